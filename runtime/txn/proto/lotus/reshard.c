/* SPDX-License-Identifier: MIT */
/* LOTUS's resharding (reshard.h). */
#include <errno.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cluster/evlog.h"
#include "reshard.h"
#include "txn/batch.h"

#define RS_DRAIN_NS 10000000ull /* holders of a shard being handed over: at most 10 ms */
#define RS_POLL_NS 1000000L     /* the directory's move counters are READ every 1 ms */
#define RS_HOT_INTERVALS 3u     /* above the trigger this many intervals in a row */

struct lotus_rs {
	pthread_t th;
	bool stop; /* atomic */
	struct remora_db *db;
	struct remora_chan *ch;
	uint64_t interval_ns;
	uint64_t seen[REMORA_MAX_CN]; /* the directory's move counters as last taken over */
	uint64_t lat_sum, lat_n;      /* the workers' totals at the last interval */
	uint64_t seq;
	unsigned hot;                 /* intervals in a row above the trigger */
	struct lotus_rs_dir dir;      /* READ target */
};

static uint64_t rs_now(void)
{
	struct timespec t;

	clock_gettime(CLOCK_REALTIME, &t);
	return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

static uint64_t dir_off(const struct remora_db *db, size_t field)
{
	return store_tail_off(&db->st.sb) + field;
}

static int dir_read(struct remora_db *db, struct remora_chan *ch, size_t field, void *dst,
		    uint32_t len)
{
	struct remora_wr wr = store_wr_read(&db->st, 0, dir_off(db, field), dst, len);

	return store_exec(ch, &wr, 1);
}

/* The owner a directory entry names for shard s (LOTUS_NO_OWNER: one beyond this cluster). */
static uint16_t entry_owner(const struct lotus_db *l, uint64_t e, uint32_t s)
{
	uint64_t o = e ? (e & 0xffffu) - 1 : s % l->ncn;

	return o < l->ncn ? (uint16_t)o : LOTUS_NO_OWNER;
}

/* ---- handing a shard over --------------------------------------------------------------- */

/* Waits until no lock of shard s is held here; false after RS_DRAIN_NS. */
static bool drained(struct lotus_db *l, const struct remora_db *db, uint32_t s, uint64_t t0)
{
	if (txn_db_mut(db, MUT_LOTUS_RESHARD_NO_DRAIN))
		return true;
	while (__atomic_load_n(&l->held_n[s], __ATOMIC_SEQ_CST) != 0) {
		if (rs_now() - t0 > RS_DRAIN_NS)
			return false;
		nanosleep(&(struct timespec){ .tv_nsec = 20000 }, NULL);
	}
	return true;
}

/* WRITEs the new owner of s, this node's move record and its move counter, in that order. */
static int publish(struct remora_db *db, struct remora_chan *ch, uint32_t s, uint16_t to,
		   uint64_t t_stop)
{
	struct lotus_db *l = ldb_of(db);
	struct lotus_rs_move rec = { .shard = s, .to = to, .t_stop_ns = t_stop };
	uint64_t e = 0, n = 0, ne;
	struct remora_wr wr[3];
	int rc = dir_read(db, ch, offsetof(struct lotus_rs_dir, map) + 8u * s, &e, 8);

	if (!rc)
		rc = dir_read(db, ch, offsetof(struct lotus_rs_dir, moves) + 8u * l->self, &n, 8);
	if (rc)
		return rc;
	ne = (uint64_t)(to + 1u) | ((e >> 16) + 1) << 16;
	n++;
	rec.t_pub_ns = rs_now();
	wr[0] = store_wr_write(&db->st, 0, dir_off(db, offsetof(struct lotus_rs_dir, map) + 8u * s),
			       &ne, 8, REMORA_WR_DURABLE);
	wr[1] = store_wr_write(&db->st, 0,
			       dir_off(db, offsetof(struct lotus_rs_dir, last) + sizeof(rec) * l->self),
			       &rec, sizeof(rec), REMORA_WR_DURABLE);
	wr[2] = store_wr_write(&db->st, 0,
			       dir_off(db, offsetof(struct lotus_rs_dir, moves) + 8u * l->self), &n,
			       8, REMORA_WR_DURABLE);
	return store_exec(ch, wr, 3);
}

int lotus_rs_move(struct remora_db *db, struct remora_chan *ch, uint32_t s, uint16_t to,
		  uint64_t *drain_ns)
{
	struct lotus_db *l = ldb_of(db);
	uint64_t t0;
	int rc;

	if (s >= LOTUS_SHARDS || to >= l->ncn || to == l->self || lotus_owner(l, s) != l->self)
		return -EINVAL;
	t0 = rs_now();
	/* Nobody is granted a lock of s from here on (lotus_hold reads the owner again after it
	 * counts a grant); releases still come in, so the holders drain. */
	__atomic_store_n(&l->shard_cn[s], (uint16_t)LOTUS_NO_OWNER, __ATOMIC_SEQ_CST);
	if (!drained(l, db, s, t0)) {
		__atomic_store_n(&l->shard_cn[s], l->self, __ATOMIC_SEQ_CST);
		return -ETIMEDOUT;
	}
	*drain_ns = rs_now() - t0;
	lotus_vt_drop_shard(&l->vt, s, LOTUS_SHARDS); /* the next owner's writers won't tell us */
	rc = publish(db, ch, s, to, t0);
	__atomic_store_n(&l->shard_cn[s], rc ? l->self : to, __ATOMIC_SEQ_CST);
	return rc;
}

/* ---- taking the directory over ---------------------------------------------------------- */

/* A shard that the directory hands to this node: say how long nobody served it. */
static void took_over(struct remora_db *db, const struct lotus_rs_dir *d, uint32_t s)
{
	for (uint16_t cn = 0; cn < ldb_of(db)->ncn; cn++)
		if (d->last[cn].shard == s && d->last[cn].to == db->cn_id && d->last[cn].t_stop_ns) {
			evlog(stderr, "cn", db->cn_id,
			      "lotus: shard %u handed over by cn %u; service gap %.3f ms", s,
			      (unsigned)cn, (double)(rs_now() - d->last[cn].t_stop_ns) / 1e6);
			return;
		}
}

static void take_over(struct remora_db *db, const struct lotus_rs_dir *d)
{
	struct lotus_db *l = ldb_of(db);

	for (uint32_t s = 0; s < LOTUS_SHARDS; s++) {
		uint16_t cur = lotus_owner(l, s), to = entry_owner(l, d->map[s], s);

		if (to == LOTUS_NO_OWNER || cur == LOTUS_NO_OWNER || cur == to)
			continue; /* a stale entry, or our own handover under way */
		__atomic_store_n(&l->shard_cn[s], to, __ATOMIC_SEQ_CST);
		if (to == l->self)
			took_over(db, d, s);
	}
}

int lotus_rs_refresh(struct remora_db *db, struct remora_chan *ch)
{
	struct lotus_rs_dir *d = malloc(sizeof(*d));
	int rc = d ? dir_read(db, ch, 0, d, offsetof(struct lotus_rs_dir, met)) : -ENOMEM;

	if (!rc)
		take_over(db, d);
	free(d);
	return rc;
}

/* Every 1 ms: have the move counters changed? Then the map is READ whole and taken over. */
static int rs_poll(struct lotus_rs *r)
{
	struct lotus_db *l = ldb_of(r->db);
	struct lotus_rs_dir *d = &r->dir;
	int rc = dir_read(r->db, r->ch, offsetof(struct lotus_rs_dir, moves), d->moves,
			  8u * l->ncn);

	if (rc || !memcmp(d->moves, r->seen, 8u * l->ncn))
		return rc;
	rc = dir_read(r->db, r->ch, 0, d, offsetof(struct lotus_rs_dir, met));
	if (rc)
		return rc;
	memcpy(r->seen, d->moves, 8u * l->ncn);
	take_over(r->db, d);
	return 0;
}

/* ---- the interval: metrics and the trigger ---------------------------------------------- */

/* This node's average transaction latency since the last interval (*n transactions). */
static uint64_t rs_latency(struct lotus_rs *r, uint64_t *n)
{
	struct lotus_db *l = ldb_of(r->db);
	uint64_t sum = 0, cnt = 0, avg;

	for (unsigned w = 0; w < r->db->workers && w < REMORA_RPC_MAX_WORKERS; w++) {
		sum += __atomic_load_n(&l->lat[w].sum_ns, __ATOMIC_RELAXED);
		cnt += __atomic_load_n(&l->lat[w].n, __ATOMIC_RELAXED);
	}
	*n = cnt - r->lat_n;
	avg = *n ? (sum - r->lat_sum) / *n : 0;
	r->lat_sum = sum, r->lat_n = cnt;
	return avg;
}

/* The shard of ours with the most grants since the last interval (LOTUS_SHARDS: none); every
 * count starts again. */
static uint32_t rs_hottest(struct lotus_db *l)
{
	uint32_t best = LOTUS_SHARDS, most = 0;

	for (uint32_t s = 0; s < LOTUS_SHARDS; s++) {
		uint32_t h = __atomic_exchange_n(&l->hits[s], 0, __ATOMIC_RELAXED);

		if (h > most && lotus_owner(l, s) == l->self)
			best = s, most = h;
	}
	return best;
}

/*
 * From the nodes' published metrics (live: published within 3 intervals, with transactions):
 * whether this node's latency is above 1.5x the live nodes' average, and the live node with
 * the lowest (*to; LOTUS_NO_OWNER when none but us).
 */
static bool rs_over(struct lotus_rs *r, const struct lotus_rs_metric *met, uint16_t *to)
{
	struct lotus_db *l = ldb_of(r->db);
	uint64_t now = rs_now(), sum = 0, low = UINT64_MAX, mine = met[l->self].avg_ns;
	unsigned live = 0;

	*to = LOTUS_NO_OWNER;
	for (uint16_t cn = 0; cn < l->ncn; cn++) {
		const struct lotus_rs_metric *m = &met[cn];

		if (!m->txns || m->t_ns + 3 * r->interval_ns < now)
			continue;
		live++;
		sum += m->avg_ns;
		if (cn != l->self && m->avg_ns < low)
			low = m->avg_ns, *to = cn;
	}
	return live >= 2 && met[l->self].txns && mine * 2 * live > 3 * sum;
}

static void rs_hand_over(struct lotus_rs *r, uint16_t to, uint64_t mine)
{
	struct lotus_db *l = ldb_of(r->db);
	uint32_t s = rs_hottest(l);
	uint64_t drain = 0;
	int rc;

	if (s == LOTUS_SHARDS || to == LOTUS_NO_OWNER)
		return;
	rc = lotus_rs_move(r->db, r->ch, s, to, &drain);
	if (rc)
		evlog(stderr, "cn", r->db->cn_id, "lotus: shard %u stays here: %s", s,
		      rc == -ETIMEDOUT ? "its locks stayed held 10 ms" : remora_strerror(rc));
	else
		evlog(stderr, "cn", r->db->cn_id,
		      "lotus: shard %u handed to cn %u (latency %.1f us, %u intervals above 1.5x "
		      "the average); holders drained in %.3f ms",
		      s, (unsigned)to, (double)mine / 1e3, RS_HOT_INTERVALS, (double)drain / 1e6);
}

static int rs_interval(struct lotus_rs *r)
{
	struct lotus_db *l = ldb_of(r->db);
	struct lotus_rs_metric m = { .seq = ++r->seq, .t_ns = rs_now() };
	struct remora_wr wr;
	uint16_t to;
	int rc;

	m.avg_ns = rs_latency(r, &m.txns);
	wr = store_wr_write(&r->db->st, 0,
			    dir_off(r->db, offsetof(struct lotus_rs_dir, met) + sizeof(m) * l->self),
			    &m, sizeof(m), 0);
	rc = store_exec(r->ch, &wr, 1);
	if (!rc)
		rc = dir_read(r->db, r->ch, offsetof(struct lotus_rs_dir, met), r->dir.met,
			      sizeof(m) * l->ncn);
	if (rc)
		return rc;
	r->dir.met[l->self] = m;
	r->hot = rs_over(r, r->dir.met, &to) ? r->hot + 1 : 0;
	if (r->hot < RS_HOT_INTERVALS) {
		rs_hottest(l); /* the counts are per interval */
		return 0;
	}
	r->hot = 0;
	rs_hand_over(r, to, m.avg_ns);
	return 0;
}

static void *rs_main(void *arg)
{
	struct lotus_rs *r = arg;
	uint64_t next = rs_now() + r->interval_ns;

	while (!__atomic_load_n(&r->stop, __ATOMIC_ACQUIRE)) {
		int rc = rs_poll(r);

		if (!rc && rs_now() >= next) {
			rc = rs_interval(r);
			next += r->interval_ns;
		}
		if (rc) /* a memory node gone: the run stops elsewhere; try again meanwhile */
			nanosleep(&(struct timespec){ .tv_nsec = 100 * RS_POLL_NS }, NULL);
		nanosleep(&(struct timespec){ .tv_nsec = RS_POLL_NS }, NULL);
	}
	return NULL;
}

/* ---- start and stop --------------------------------------------------------------------- */

static int rs_room(struct remora_db *db)
{
	uint64_t bytes = 0;
	uint32_t key;

	if (store_node_key(db->st.tp, 0, &key, &bytes) ||
	    store_tail_off(&db->st.sb) + sizeof(struct lotus_rs_dir) > bytes) {
		snprintf(db->errmsg, sizeof(db->errmsg),
			 "lotus: no room for the shard directory (%zu KiB) after the layout on "
			 "memory node 0; give node 0 a larger pool or set lotus_reshard_ms=0",
			 (sizeof(struct lotus_rs_dir) + 1023) / 1024);
		return -REMORA_ECONFIG;
	}
	return 0;
}

int lotus_rs_start(struct remora_db *db, struct lotus_db *l, unsigned interval_ms)
{
	struct lotus_rs *r;
	int rc = rs_room(db);

	if (rc)
		return rc;
	r = calloc(1, sizeof(*r));
	if (!r)
		return -ENOMEM;
	r->db = db;
	r->interval_ns = (uint64_t)interval_ms * 1000000u;
	rc = remora_chan_open(db->st.tp, &r->ch);
	if (!rc)
		rc = rs_poll(r); /* moves made before this node opened */
	if (!rc)
		rc = pthread_create(&r->th, NULL, rs_main, r) ? -EAGAIN : 0;
	if (rc) {
		if (r->ch)
			remora_chan_close(r->ch);
		free(r);
		snprintf(db->errmsg, sizeof(db->errmsg), "lotus: resharder: %s", remora_strerror(rc));
		return rc;
	}
	l->rs = r;
	return 0;
}

void lotus_rs_stop(struct lotus_db *l)
{
	struct lotus_rs *r = l->rs;

	if (!r)
		return;
	__atomic_store_n(&r->stop, true, __ATOMIC_RELEASE);
	pthread_join(r->th, NULL);
	remora_chan_close(r->ch);
	free(r);
	l->rs = NULL;
}
