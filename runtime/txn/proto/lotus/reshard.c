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
#define RS_ALIVE_NS 50000000ull /* a peer that published within 50 ms counts as running */
#define RS_PUBLISH_EVERY 5u     /* the oldest running begin is published every 5 polls */
#define RS_START_NS 10000000000ull /* the restart rule waits 10 s at most */
/* A move record's shard when the node died and every shard of it was taken (online
 * recovery): a survivor may learn of it before its own view says the node is dead. */
#define RS_TAKEN UINT64_MAX

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
	uint64_t pend[LOTUS_SHARDS / 64]; /* shards taken from a dead node, not served yet */
	unsigned npend;
	uint64_t pend_t;              /* when the first of them came */
	uint64_t pend_from;           /* the nodes they came from (bit cn) */
	struct lotus_rs_dir dir;      /* READ target */
};

/* Directory times are compared across nodes: CLOCK_REALTIME. */
static uint64_t rs_now(void)
{
	return lotus_clock_ns(CLOCK_REALTIME);
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

/* The compute nodes that may run transactions: the format's, also those beyond ncn (they
 * own no shard, but lock at the others). */
static uint16_t rs_nodes(const struct lotus_rs *r)
{
	uint16_t n = r->db->st.sb.max_cn;

	return n < REMORA_MAX_CN ? n : REMORA_MAX_CN;
}

/* Whether the membership view declares compute node cn dead. */
static bool gone(uint16_t cn)
{
	return cn < 64 && (txn_cn_gone() >> cn & 1);
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

/* After a failed publish: whom the directory names for s (its map WRITE may have landed),
 * or nobody when it cannot be READ. */
static uint16_t published_owner(struct remora_db *db, struct remora_chan *ch, uint32_t s)
{
	uint64_t e = 0;

	if (dir_read(db, ch, offsetof(struct lotus_rs_dir, map) + 8u * s, &e, 8))
		return LOTUS_NO_OWNER;
	return entry_owner(ldb_of(db), e, s);
}

int lotus_rs_move(struct remora_db *db, struct remora_chan *ch, uint32_t s, uint16_t to,
		  uint64_t *drain_ns)
{
	struct lotus_db *l = ldb_of(db);
	uint64_t t0;
	int rc;

	if (s >= LOTUS_SHARDS || to >= l->ncn || to == l->self || lotus_owner(l, s) != l->self ||
	    gone(to))
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
	__atomic_store_n(&l->shard_cn[s], rc ? published_owner(db, ch, s) : to, __ATOMIC_SEQ_CST);
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

/* Whether the directory's latest record of cur is the handover of shard s to us (its
 * holders drained there). */
static bool handed_to_us(const struct lotus_rs_dir *d, uint16_t cur, uint32_t s, uint16_t self)
{
	return cur < REMORA_MAX_CN && d->last[cur].shard == s && d->last[cur].to == self;
}

/*
 * A node declared dead and recovered (its claim done, so its claimant's takeover is over)
 * that the map still names: a handover to it that landed after the claimant read the map.
 * The lowest live node takes those shards too (lotus_rs_take_dead only moves its entries).
 */
static void strays(struct lotus_rs *r, const struct lotus_rs_dir *d)
{
	struct lotus_db *l = ldb_of(r->db);
	uint64_t rec = txn_cn_recovered(), dead = 0;
	uint16_t lowest = 0;

	while (lowest < l->ncn && gone(lowest))
		lowest++;
	if (!rec || lowest != l->self)
		return;
	for (uint32_t s = 0; s < LOTUS_SHARDS; s++) {
		uint16_t to = entry_owner(l, d->map[s], s);

		if (to < 64 && (rec >> to & 1))
			dead |= UINT64_C(1) << to;
	}
	for (uint16_t cn = 0; dead; cn++, dead >>= 1)
		if (dead & 1)
			lotus_rs_take_dead(&r->db->st, r->ch, cn, l->ncn, txn_cn_gone());
}

/*
 * Takes the directory's map over. A shard handed to us by a live node is served at once (its
 * holders drained there). Any other that comes to us, above all one taken from a dead node,
 * waits (pending) until no transaction that began before now runs anywhere: one of them may
 * hold a lock of the shard that died with the dead node's lock table.
 */
static void take_over(struct lotus_rs *r, const struct lotus_rs_dir *d)
{
	struct lotus_db *l = ldb_of(r->db);

	for (uint32_t s = 0; s < LOTUS_SHARDS; s++) {
		uint16_t cur = lotus_owner(l, s), to = entry_owner(l, d->map[s], s);

		if (to == LOTUS_NO_OWNER || cur == LOTUS_NO_OWNER || cur == to)
			continue; /* a stale entry, or a handover (ours, or a takeover) under way */
		if (to == l->self && !handed_to_us(d, cur, s, l->self)) {
			r->pend[s / 64] |= UINT64_C(1) << (s % 64);
			r->pend_from |= UINT64_C(1) << cur;
			r->npend++;
			r->pend_t = rs_now(); /* the latest one's time covers the earlier ones */
			__atomic_store_n(&l->shard_cn[s], (uint16_t)LOTUS_NO_OWNER, __ATOMIC_SEQ_CST);
			continue;
		}
		__atomic_store_n(&l->shard_cn[s], to, __ATOMIC_SEQ_CST);
		if (to == l->self)
			took_over(r->db, d, s);
	}
	strays(r, d);
}

/* Every 1 ms: have the move counters changed? Then the map is READ whole and taken over. */
static int rs_poll(struct lotus_rs *r)
{
	struct lotus_db *l = ldb_of(r->db);
	struct lotus_rs_dir *d = &r->dir;
	uint64_t moves[REMORA_MAX_CN];
	int rc = dir_read(r->db, r->ch, offsetof(struct lotus_rs_dir, moves), moves, 8u * l->ncn);

	if (rc || !memcmp(moves, r->seen, 8u * l->ncn))
		return rc;
	/* The map READ after these counters holds every move they count (each publish WRITEs
	 * its entry before its counter); a later move changes a counter again. */
	rc = dir_read(r->db, r->ch, 0, d, offsetof(struct lotus_rs_dir, met));
	if (rc)
		return rc;
	memcpy(r->seen, moves, 8u * l->ncn);
	take_over(r, d);
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

		if (!m->txns || m->t_ns + 3 * r->interval_ns < now || gone(cn))
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

/* WRITEs this node's oldest running transaction's begin (now, when none runs). */
static int rs_publish_oldest(struct lotus_rs *r)
{
	struct lotus_db *l = ldb_of(r->db);
	struct lotus_rs_oldest o = { .t_ns = rs_now() };
	struct remora_wr wr;

	o.begin_ns = o.t_ns;
	for (uint32_t i = 0; i < l->per_cn; i++) {
		uint64_t b = __atomic_load_n(&l->active[i], __ATOMIC_SEQ_CST);

		if (b && b < o.begin_ns)
			o.begin_ns = b;
	}
	wr = store_wr_write(&r->db->st, 0,
			    dir_off(r->db, offsetof(struct lotus_rs_dir, oldest) + sizeof(o) * l->self),
			    &o, sizeof(o), 0);
	return store_exec(r->ch, &wr, 1);
}

bool lotus_rs_peer_older(const struct lotus_rs_oldest *o, uint64_t t_open, uint64_t now)
{
	return o->t_ns + RS_ALIVE_NS > now && (o->t_ns <= t_open || o->begin_ns < t_open);
}

/* The restart rule (reshard.h), run first by the thread. A restarted node (an earlier process
 * of this node published) says how long it waited. */
static int rs_restart_wait(struct lotus_rs *r)
{
	struct lotus_db *l = ldb_of(r->db);
	uint64_t t_open = rs_now();
	bool restarted = false;
	int rc = 0;

	for (unsigned round = 0;; round++) {
		bool older = false;
		uint64_t now;

		rc = dir_read(r->db, r->ch, offsetof(struct lotus_rs_dir, oldest), r->dir.oldest,
			      sizeof(r->dir.oldest[0]) * rs_nodes(r));
		restarted |= !rc && !round && r->dir.oldest[l->self].t_ns != 0;
		now = rs_now();
		for (uint16_t cn = 0; !rc && cn < rs_nodes(r); cn++)
			older |= cn != l->self && lotus_rs_peer_older(&r->dir.oldest[cn], t_open, now);
		if (rc || !older || now - t_open > RS_START_NS ||
		    __atomic_load_n(&r->stop, __ATOMIC_ACQUIRE))
			break;
		nanosleep(&(struct timespec){ .tv_nsec = RS_POLL_NS }, NULL);
	}
	if (!rc && restarted)
		evlog(stderr, "cn", r->db->cn_id,
		      "lotus: restarted; serving %.3f ms after the open (the peers' older "
		      "transactions are over)", (double)(rs_now() - t_open) / 1e6);
	return rc;
}

_Static_assert(REMORA_MAX_CN <= 64, "pend_from is a 64-bit set of compute nodes");

/* "0, 2" for bits 0 and 2. */
static const char *cn_list(uint64_t set, char *buf, size_t len)
{
	size_t at = 0;

	buf[0] = '\0';
	for (unsigned cn = 0; cn < 64 && at < len; cn++)
		if (set >> cn & 1)
			at += (size_t)snprintf(buf + at, len - at, "%s%u", at ? ", " : "", cn);
	return buf;
}

/*
 * The shards taken from a dead node are served once no transaction that began before they
 * came runs on a live node, this one included (published oldest begins).
 */
static int rs_pending(struct lotus_rs *r)
{
	struct lotus_db *l = ldb_of(r->db);
	char from[96];
	bool older = false;
	unsigned n = r->npend;
	uint64_t now;
	int rc = dir_read(r->db, r->ch, offsetof(struct lotus_rs_dir, oldest), r->dir.oldest,
			  sizeof(r->dir.oldest[0]) * rs_nodes(r));

	now = rs_now();
	for (uint16_t cn = 0; !rc && cn < rs_nodes(r); cn++)
		older |= !gone(cn) && lotus_rs_peer_older(&r->dir.oldest[cn], r->pend_t, now);
	if (!rc && !older) /* the map again: a shard given elsewhere meanwhile is not ours */
		rc = dir_read(r->db, r->ch, offsetof(struct lotus_rs_dir, map), r->dir.map,
			      sizeof(r->dir.map));
	if (rc || older)
		return rc;
	for (uint32_t s = 0; s < LOTUS_SHARDS; s++)
		if (r->pend[s / 64] >> (s % 64) & 1)
			__atomic_store_n(&l->shard_cn[s], entry_owner(l, r->dir.map[s], s),
					 __ATOMIC_SEQ_CST);
	memset(r->pend, 0, sizeof(r->pend));
	r->npend = 0;
	evlog(stderr, "cn", r->db->cn_id,
	      "lotus: took over %u shards of dead cn %s; serving them %.3f ms after the takeover",
	      n, cn_list(r->pend_from, from, sizeof(from)), (double)(now - r->pend_t) / 1e6);
	r->pend_from = 0;
	return 0;
}

/* Whether this node owns shards at all (a node beyond ncn only locks at the others). */
static bool l_owns(const struct lotus_rs *r)
{
	return ldb_of(r->db)->self < ldb_of(r->db)->ncn;
}

static void *rs_main(void *arg)
{
	struct lotus_rs *r = arg;
	uint64_t next, round = 0;

	/* Meanwhile the node's workers run and refuse lock requests at once (lotus_hold), so a
	 * peer's transaction waiting on this node aborts instead of holding the wait up. */
	rs_restart_wait(r);
	__atomic_store_n(&ldb_of(r->db)->serving, true, __ATOMIC_RELEASE);
	next = rs_now() + r->interval_ns;
	while (!__atomic_load_n(&r->stop, __ATOMIC_ACQUIRE)) {
		int rc = rs_poll(r);

		/* every RS_PUBLISH_EVERY polls, well inside RS_ALIVE_NS; and while shards wait */
		if (!rc && (round++ % RS_PUBLISH_EVERY == 0 || r->npend))
			rc = rs_publish_oldest(r);
		if (!rc && r->npend)
			rc = rs_pending(r);
		if (!rc && r->interval_ns && l_owns(r) && rs_now() >= next) {
			rc = rs_interval(r);
			next += r->interval_ns;
		}
		if (rc) /* a memory node gone: the run stops elsewhere; try again soon (a pause
			 * of RS_ALIVE_NS would make the peers count this node as stopped) */
			nanosleep(&(struct timespec){ .tv_nsec = 5 * RS_POLL_NS }, NULL);
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
			 "memory node 0; give node 0 a larger pool",
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
	l->active = calloc(l->per_cn, sizeof(*l->active));
	if (!r || !l->active) {
		free(r);
		free(l->active);
		l->active = NULL;
		return -ENOMEM;
	}
	r->db = db;
	r->interval_ns = (uint64_t)interval_ms * 1000000u;
	__atomic_store_n(&l->serving, false, __ATOMIC_RELEASE);
	rc = remora_chan_open(db->st.tp, &r->ch);
	/* The directory's polls and publications come every millisecond of wall time. On a
	 * memory node scaled by K their share of its verb rate is K times the real one (at the
	 * cx3 point x12800, a quarter of node 0's READs), so they are not charged. The
	 * channel's other verbs (a handover's or takeover's map WRITEs, a few per move) are
	 * not charged either. */
	if (!rc)
		remora_chan_cost_exempt(r->ch, true);
	if (!rc)
		rc = rs_poll(r); /* moves made before this node opened */
	if (!rc)
		rc = pthread_create(&r->th, NULL, rs_main, r) ? -EAGAIN : 0;
	if (rc) {
		if (r->ch)
			remora_chan_close(r->ch);
		free(r);
		free(l->active);
		l->active = NULL;
		__atomic_store_n(&l->serving, true, __ATOMIC_RELEASE);
		snprintf(db->errmsg, sizeof(db->errmsg), "lotus: resharder: %s", remora_strerror(rc));
		return rc;
	}
	l->rs = r;
	return 0;
}

/* A clean close takes this node's oldest-transaction entry back: no peer waits for it. */
static void rs_unpublish(struct lotus_rs *r)
{
	static const struct lotus_rs_oldest none;
	struct remora_wr wr = store_wr_write(
		&r->db->st, 0,
		dir_off(r->db, offsetof(struct lotus_rs_dir, oldest) +
				       sizeof(none) * ldb_of(r->db)->self),
		&none, sizeof(none), 0);

	store_exec(r->ch, &wr, 1);
}

void lotus_rs_stop(struct lotus_db *l)
{
	struct lotus_rs *r = l->rs;

	if (!r)
		return;
	__atomic_store_n(&r->stop, true, __ATOMIC_RELEASE);
	pthread_join(r->th, NULL);
	rs_unpublish(r);
	remora_chan_close(r->ch);
	free(r);
	l->rs = NULL;
	free(l->active);
	l->active = NULL;
}

/* ---- a dead node's shards (online recovery) --------------------------------------------- */

int lotus_rs_take_dead(const struct store_db *st, struct remora_chan *ch, uint16_t dead,
		       unsigned ncn, uint64_t gone_mask)
{
	uint64_t base = store_tail_off(&st->sb), *map = malloc(sizeof(uint64_t) * LOTUS_SHARDS);
	uint64_t cnt = 0, *vals = malloc(sizeof(uint64_t) * LOTUS_SHARDS);
	uint16_t live[REMORA_MAX_CN];
	unsigned nlive = 0, k = 0, n = 0;
	struct remora_wr wr[66]; /* 64 entries, then the record and the counter */
	int rc = map && vals ? 0 : -ENOMEM;

	for (uint16_t cn = 0; cn < ncn && cn < REMORA_MAX_CN; cn++)
		if (cn != dead && !(gone_mask >> cn & 1))
			live[nlive++] = cn;
	if (!rc && nlive) {
		wr[0] = store_wr_read(st, 0, base + offsetof(struct lotus_rs_dir, map), map,
				      sizeof(uint64_t) * LOTUS_SHARDS);
		wr[1] = store_wr_read(st, 0, base + offsetof(struct lotus_rs_dir, moves) + 8u * dead,
				      &cnt, 8);
		rc = store_exec(ch, wr, 2);
	}
	/* Only the dead node's entries are written: the live ones belong to their owners. */
	for (uint32_t s = 0; !rc && nlive && s < LOTUS_SHARDS; s++) {
		uint64_t o = map[s] ? (map[s] & 0xffffu) - 1 : s % ncn;

		if (o != dead)
			continue;
		vals[s] = (uint64_t)(live[k++ % nlive] + 1u) | ((map[s] >> 16) + 1) << 16;
		wr[n++] = store_wr_write(st, 0, base + offsetof(struct lotus_rs_dir, map) + 8u * s,
					 &vals[s], 8, REMORA_WR_DURABLE);
		if (n == 64) {
			rc = store_exec(ch, wr, n);
			n = 0;
		}
	}
	if (!rc && nlive) { /* then its move record and the counter the live nodes poll */
		struct lotus_rs_move rec = { .shard = RS_TAKEN, .to = UINT64_MAX };

		cnt++;
		wr[n++] = store_wr_write(st, 0,
					 base + offsetof(struct lotus_rs_dir, last) + sizeof(rec) * dead,
					 &rec, sizeof(rec), REMORA_WR_DURABLE);
		wr[n++] = store_wr_write(st, 0, base + offsetof(struct lotus_rs_dir, moves) + 8u * dead,
					 &cnt, 8, REMORA_WR_DURABLE);
		rc = store_exec(ch, wr, n);
	}
	free(map);
	free(vals);
	return rc;
}
