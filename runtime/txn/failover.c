/* SPDX-License-Identifier: MIT */
/*
 * Memory-node failover, the transaction side (docs/recovery.md, "Memory-node failover"). The lease
 * watchdog takes a dead memory node out of the transport (rt_transport_mn_down): its verbs
 * are refused from then on, and transactions cut by it resolve themselves (the OCC core's
 * mnf_resolve). The placement (store_db.dead) changes only here, between transactions: a
 * transaction begins only while the placement matches the transport. When they differ, the
 * coordinators park at begin; the first one to see no transaction of the process running
 * acknowledges the new dead mask in every live memory node's control area and waits until
 * every compute node that has the database open acknowledged it too. Only then does any
 * compute node lock a record on its new primary: no two of them ever lock one record on two
 * copies.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <remora/sched.h>

#include "transport/direct.h"
#include "txn.h"

#define MNF_BARRIER_NS 20000000000ull /* the longest wait for the other compute nodes' acks */
#define MNF_POLL_NS 200000L           /* between two READs of the acks */

static uint64_t mnf_resumed_ns; /* txn_mnf_resumed_s, in ns */
static uint64_t mnf_cn_gone;    /* txn_mnf_cn_gone: compute nodes the view says are dead */

static uint64_t mnf_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void mnf_pause(void)
{
	if (remora_coro_self())
		remora_yield();
	else
		nanosleep(&(struct timespec){ .tv_nsec = 50000 }, NULL);
}

static uint64_t ctl_off(size_t field)
{
	return REMORA_STORE_CONTROL_OFF + field;
}

/* The lowest live node: where the acks are read (every compute node reads the same one). */
static uint16_t mnf_reader(const struct store_db *st, uint32_t down)
{
	for (uint16_t m = 0; m < st->n_mn; m++)
		if (!(down >> m & 1u))
			return m;
	return 0;
}

/* Writes word at field of the control area of every live node; CAS ORs bits when or. */
static int mnf_put(struct remora_db *db, struct remora_chan *ch, uint32_t down, size_t field,
		   uint64_t word, bool or)
{
	for (uint16_t m = 0; m < db->st.n_mn; m++) {
		uint64_t seen = 0, old;
		struct remora_wr wr;
		int rc;

		if (down >> m & 1u)
			continue;
		if (!or) {
			wr = store_wr_write(&db->st, m, ctl_off(field), &word, 8, REMORA_WR_DURABLE);
			rc = store_exec(ch, &wr, 1);
			if (rc)
				return rc;
			continue;
		}
		do {
			old = seen;
			wr = store_wr_cas(&db->st, m, ctl_off(field), old, old | word, &seen);
			rc = store_exec(ch, &wr, 1);
		} while (!rc && seen != old && (seen & word) != word);
		if (rc)
			return rc;
	}
	return 0;
}

int txn_mnf_ack(struct remora_db *db, struct remora_chan *ch, uint32_t dead, bool open)
{
	uint32_t down = rt_transport_down_mask(db->st.tp) | store_dead(&db->st);
	uint64_t word = open ? REMORA_STORE_MNF_ACK_OPEN | dead : 0;

	return mnf_put(db, ch, down, offsetof(struct store_control, mnf_ack) + 8u * db->cn_id,
		       word, false);
}

/* Whether every compute node with the database open acknowledged dead (a superset). */
static int mnf_all_acked(struct remora_db *db, struct remora_chan *ch, uint32_t dead,
			 bool *all, uint16_t *late)
{
	uint64_t acks[REMORA_MAX_CN];
	uint16_t n = db->st.sb.max_cn < REMORA_MAX_CN ? db->st.sb.max_cn : REMORA_MAX_CN;
	uint16_t m = mnf_reader(&db->st, dead);
	struct remora_wr wr = store_wr_read(&db->st, m, ctl_off(offsetof(struct store_control,
									  mnf_ack)),
					    acks, (uint32_t)(n * 8u));
	int rc = store_exec(ch, &wr, 1);

	*all = !rc;
	for (uint16_t cn = 0; !rc && cn < n; cn++)
		if ((acks[cn] & REMORA_STORE_MNF_ACK_OPEN) && (acks[cn] & dead) != dead &&
		    !(__atomic_load_n(&mnf_cn_gone, __ATOMIC_ACQUIRE) >> cn & 1u)) {
			*all = false;
			*late = cn;
		}
	return rc;
}

/* The barrier: acknowledge dead, wait for every other compute node, take the placement. */
static int mnf_switch(struct remora_db *db, uint32_t dead)
{
	uint64_t deadline = mnf_now_ns() + MNF_BARRIER_NS;
	struct remora_chan *ch;
	bool all = false;
	uint16_t late = 0;
	int rc;

	if (__atomic_load_n(&db->mnf_undecided, __ATOMIC_SEQ_CST)) {
		snprintf(db->errmsg, sizeof(db->errmsg),
			 "memory-node failover: a commit cut by the dead memory nodes %#x could not "
			 "be decided; its locks and log are left to recovery", dead);
		return -EIO;
	}
	rc = remora_chan_open(db->st.tp, &ch);
	if (rc)
		return rc;
	rc = mnf_put(db, ch, dead, offsetof(struct store_control, mnf_dead), dead, true);
	if (!rc)
		rc = txn_mnf_ack(db, ch, dead, true);
	while (!rc && !mut_on(db->mutations, MUT_MNF_NO_BARRIER)) {
		rc = mnf_all_acked(db, ch, dead, &all, &late);
		if (rc || all)
			break;
		if (mnf_now_ns() > deadline) {
			rc = -ETIMEDOUT;
			snprintf(db->errmsg, sizeof(db->errmsg),
				 "memory-node failover: compute node %u did not acknowledge the "
				 "dead memory nodes %#x within %llu s", late, dead,
				 MNF_BARRIER_NS / 1000000000ull);
			break;
		}
		nanosleep(&(struct timespec){ .tv_nsec = MNF_POLL_NS }, NULL);
	}
	remora_chan_close(ch);
	if (!rc) {
		struct timespec ts;

		store_set_dead(&db->st, dead);
		clock_gettime(CLOCK_REALTIME, &ts);
		__atomic_store_n(&mnf_resumed_ns,
				 (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec,
				 __ATOMIC_RELAXED);
	}
	return rc;
}

void txn_mnf_cn_gone(uint64_t dead)
{
	__atomic_store_n(&mnf_cn_gone, dead, __ATOMIC_RELEASE);
}

uint64_t txn_cn_gone(void)
{
	return __atomic_load_n(&mnf_cn_gone, __ATOMIC_ACQUIRE);
}

static uint64_t cn_recovered;

void txn_cn_recovered_set(uint64_t mask)
{
	__atomic_store_n(&cn_recovered, mask, __ATOMIC_RELEASE);
}

uint64_t txn_cn_recovered(void)
{
	return __atomic_load_n(&cn_recovered, __ATOMIC_ACQUIRE);
}

double txn_mnf_resumed_s(void)
{
	return (double)__atomic_load_n(&mnf_resumed_ns, __ATOMIC_RELAXED) / 1e9;
}

/* Transactions of the process running: read after the dead mask changed (Dekker, enter). */
static bool mnf_running(struct remora_db *db)
{
	for (uint32_t i = 0; i < db->workers; i++)
		if (__atomic_load_n(&db->mnf_busy[i].n, __ATOMIC_SEQ_CST))
			return true;
	return false;
}

/* Waits for the transactions that began before the failure, as long as the barrier at most. */
static int mnf_drain(struct remora_db *db, uint32_t down)
{
	uint64_t deadline = mnf_now_ns() + MNF_BARRIER_NS;

	while (mnf_running(db)) {
		if (mnf_now_ns() > deadline) {
			snprintf(db->errmsg, sizeof(db->errmsg),
				 "memory-node failover: transactions of this compute node still ran "
				 "%llu s after the memory nodes %#x died",
				 MNF_BARRIER_NS / 1000000000ull, down);
			return -ETIMEDOUT;
		}
		mnf_pause();
	}
	return 0;
}

/*
 * Parked at begin until the placement matches the transport. One coordinator of the process
 * (the leader) runs the barrier once no transaction of the process runs; the others yield.
 */
static int mnf_wait(struct remora_db *db, uint32_t down)
{
	int rc = 0;

	while (store_dead(&db->st) != down) {
		bool free_ = false;

		if (!__atomic_compare_exchange_n(&db->mnf_leader, &free_, true, false,
						 __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {
			mnf_pause();
			continue;
		}
		rc = __atomic_load_n(&db->mnf_failed, __ATOMIC_SEQ_CST);
		if (!rc)
			rc = mnf_drain(db, down);
		if (!rc && store_dead(&db->st) != down)
			rc = mnf_switch(db, down);
		if (rc)
			__atomic_store_n(&db->mnf_failed, rc, __ATOMIC_SEQ_CST);
		__atomic_store_n(&db->mnf_leader, false, __ATOMIC_SEQ_CST);
		if (rc)
			return rc;
	}
	return 0;
}

int txn_mnf_init(struct remora_db *db)
{
	size_t n = db->workers ? db->workers : 1;

	db->mnf_busy = aligned_alloc(64, n * sizeof(*db->mnf_busy));
	if (!db->mnf_busy)
		return -ENOMEM;
	memset(db->mnf_busy, 0, n * sizeof(*db->mnf_busy));
	return 0;
}

/*
 * Dekker against the leader (mnf_wait): this worker's count is stored (seq_cst), then the
 * transport's dead mask read; the leader sees the mask changed, then reads every count. Only
 * this worker's thread writes its count: a store, no read-modify-write on a shared line.
 */
int txn_mnf_enter(struct remora_worker *w)
{
	struct remora_db *db = w->db;
	uint32_t *busy = &db->mnf_busy[w->index].n;

	for (;;) {
		uint32_t down;
		int rc;

		__atomic_store_n(busy, __atomic_load_n(busy, __ATOMIC_RELAXED) + 1u,
				 __ATOMIC_SEQ_CST);
		down = rt_transport_down_mask(db->st.tp);
		if (down == store_dead(&db->st))
			return 0;
		__atomic_store_n(busy, __atomic_load_n(busy, __ATOMIC_RELAXED) - 1u,
				 __ATOMIC_SEQ_CST);
		rc = mnf_wait(db, down);
		if (rc)
			return rc;
	}
}

void txn_mnf_leave(struct remora_worker *w)
{
	uint32_t *busy = &w->db->mnf_busy[w->index].n;

	__atomic_store_n(busy, __atomic_load_n(busy, __ATOMIC_RELAXED) - 1u, __ATOMIC_RELEASE);
}
