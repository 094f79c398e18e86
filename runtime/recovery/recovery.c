/* SPDX-License-Identifier: MIT */
/*
 * Recovery entry points: the whole-cluster recovery hands the opened database to the recover
 * op of a protocol built for its record codec (the log body and the rules that decide a log
 * are the protocol's: runtime/txn/proto/<name>/), and the memory node's check of its own pool.
 */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <remora/cluster.h>

#include "cluster/evlog.h"
#include "recovery.h"
#include "store/store.h"
#include "transport/direct.h"
#include "txn/ids.h"
#include "txn/protocol.h"
#include "txn/txn.h"

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* The first built protocol of codec with a whole-cluster recover op (they share the log). */
static const struct txn_proto_ops *recovering_proto(uint32_t codec)
{
	for (unsigned i = 0; txn_proto_registry[i]; i++) {
		const struct txn_proto_ops *p = txn_proto_registry[i];

		if (p->codec == codec && p->size > offsetof(struct txn_proto_ops, recover) &&
		    p->recover)
			return p;
	}
	return NULL;
}

/*
 * The database is clean again: reads the open counts and recovery marks of every node (they
 * are reported), then, unless checking, zeroes both, durably. After the protocol's recovery no
 * log is live and no lock held, and recovery runs only while no compute node is a member, so
 * no open is live either. The words are the store's, whatever the protocol.
 */
static int clear_marks(struct store_db *st, struct remora_chan *ch, bool check,
		       struct recovery_report *rep, char *err, size_t errlen)
{
	const uint64_t off = REMORA_STORE_CONTROL_OFF +
			     offsetof(struct store_control, live_opens);
	static const uint64_t zero[2];
	uint64_t w[REMORA_MAX_MN][2];
	struct remora_wr wrs[REMORA_MAX_MN];
	unsigned n = 0;
	int rc;

	for (uint16_t m = 0; m < st->n_mn; m++)
		wrs[m] = store_wr_read(st, m, off, w[m], sizeof(w[m]));
	rc = store_exec(ch, wrs, st->n_mn);
	for (uint16_t m = 0; m < st->n_mn && !rc; m++) {
		rep->live_opens += w[m][0];
		rep->marked += w[m][1];
		if (!check && (w[m][0] || w[m][1]))
			wrs[n++] = store_wr_write(st, m, off, zero, sizeof(zero),
							 REMORA_WR_DURABLE);
	}
	if (!rc)
		rc = store_exec(ch, wrs, n);
	if (rc && err && errlen)
		snprintf(err, errlen, "recover: clearing the recovery marks: %s",
			 remora_strerror(rc));
	return rc;
}

/*
 * After a whole-cluster recovery no lock is held and compute-node ids start over: the
 * online-recovery claims and the failed-ids set of the previous run are cleared (a restarted
 * compute node reusing an id would otherwise have its locks stolen).
 */
static int clear_online(struct store_db *st, struct remora_chan *ch, char *err,
			size_t errlen)
{
	static const uint64_t zero[65536 / 64];
	const uint64_t lease = REMORA_STORE_CONTROL_OFF +
			       offsetof(struct store_control, lease);
	const uint64_t failed = REMORA_STORE_CONTROL_OFF +
				offsetof(struct store_control, failed_ids);
	/* the id blocks too: every lock is released, no id can be stray any more */
	const uint64_t ids = REMORA_STORE_CONTROL_OFF + offsetof(struct store_control, id_used);
	const uint32_t ids_len = offsetof(struct store_control, id_recycled) -
				 offsetof(struct store_control, id_used);
	/* and the failover acks: no compute node has the database open */
	const uint64_t acks = REMORA_STORE_CONTROL_OFF + offsetof(struct store_control, mnf_ack);
	struct remora_wr wrs[4 * REMORA_MAX_MN];
	unsigned n = 0;
	int rc;

	for (uint16_t m = 0; m < st->n_mn; m++) {
		wrs[n++] = store_wr_write(st, m, lease, zero, 8 * REMORA_MAX_CN,
						 REMORA_WR_DURABLE);
		wrs[n++] = store_wr_write(st, m, acks, zero, 8 * REMORA_MAX_CN,
						 REMORA_WR_DURABLE);
		wrs[n++] = store_wr_write(st, m, failed, zero, sizeof(zero),
						 REMORA_WR_DURABLE);
		wrs[n++] = store_wr_write(st, m, ids, zero, ids_len, REMORA_WR_DURABLE);
	}
	rc = store_exec(ch, wrs, n);
	if (rc && err && errlen)
		snprintf(err, errlen, "recover: clearing the failed compute-node ids: %s",
			 remora_strerror(rc));
	return rc;
}

int recovery_run(struct remora_transport *tp,
				   const struct recovery_cfg *cfg,
				   struct recovery_report *rep, char *err, size_t errlen)
{
	const struct txn_proto_ops *p;
	struct store_db *st;
	struct remora_chan *ch;
	uint64_t t0 = now_ns();
	int rc;

	if (!tp || !cfg || cfg->size < sizeof(*cfg) || !rep) {
		if (err && errlen)
			snprintf(err, errlen, "recover: missing transport or configuration");
		return -EINVAL;
	}
	memset(rep, 0, sizeof(*rep));
	st = calloc(1, sizeof(*st));
	if (!st)
		return -ENOMEM;
	rc = remora_chan_open(tp, &ch);
	if (rc) {
		free(st);
		if (err && errlen)
			snprintf(err, errlen, "recover: cannot open a channel: %s",
				 remora_strerror(rc));
		return rc;
	}
	/* REMORA_CODEC_NONE: whichever codec the database was formatted with. */
	rc = store_open(st, tp, ch, cfg->n_mn, 0, REMORA_CODEC_NONE, err, errlen);
	/*
	 * A memory node that failed over in an earlier run holds a stale pool, and this recovery
	 * reads and writes every node's logs and locks: refused, rather than let its old logs
	 * decide anything (docs/recovery.md, "Memory-node failover").
	 */
	if (!rc && store_dead(st)) {
		rc = -REMORA_ECONFIG;
		if (err && errlen)
			snprintf(err, errlen,
				 "recover: memory node %u failed over in an earlier run (its pool is "
				 "stale): whole-cluster recovery of such a database is not supported; "
				 "format it again", (unsigned)__builtin_ctz(store_dead(st)));
	}
	p = rc ? NULL : recovering_proto(st->sb.codec);
	if (p) {
		rc = p->recover(st, ch, cfg->flags, rep, err, errlen);
		if (!rc)
			rc = clear_marks(st, ch, cfg->flags & REMORA_RECOVERY_CHECK, rep, err, errlen);
		if (!rc && !(cfg->flags & REMORA_RECOVERY_CHECK))
			rc = clear_online(st, ch, err, errlen);
	} else if (!rc) {
		rc = -REMORA_ECONFIG;
		if (err && errlen)
			snprintf(err, errlen,
				 "recover: no protocol of this build recovers the %s record codec",
				 st->codec->name);
	}
	rep->ns_total = now_ns() - t0;
	remora_chan_close(ch);
	free(st);
	return rc;
}

/* ---- online: one failed compute node -------------------------------------------------- */

#define CLAIM_BIT (UINT64_C(1) << 62)
#define DONE_BIT (UINT64_C(1) << 63)

static uint64_t claim_off(uint16_t cn)
{
	return REMORA_STORE_CONTROL_OFF + offsetof(struct store_control, lease) + cn * 8u;
}

/* The claim on node m: 0 this caller holds it; 1 done; 2 held by a live compute node. */
static int claim_on(struct store_db *st, struct remora_chan *ch,
		    const struct recovery_online_cfg *c, uint16_t cn, uint16_t m)
{
	uint64_t want = CLAIM_BIT | (uint64_t)(c->self_cn + 1u), cur = 0, old = 0;
	struct remora_wr wr = store_wr_read(st, m, claim_off(cn), &cur, 8);
	int rc = store_exec(ch, &wr, 1);

	for (;;) {
		uint64_t holder = (cur & 0xffff) - 1;

		if (rc)
			return rc;
		if (cur & DONE_BIT)
			return 1;
		if (cur == want)
			return 0;
		if (cur && holder < 64 && !(c->dead >> holder & 1))
			return 2; /* a live compute node is on it */
		wr = store_wr_cas(st, m, claim_off(cn), cur, want, &old);
		rc = store_exec(ch, &wr, 1);
		if (!rc && old == cur)
			return 0;
		cur = old;
	}
}

/* Gives a won claim back on node m: the next attempt, by anyone, may take it. */
static void release_on(struct store_db *st, struct remora_chan *ch,
		       const struct recovery_online_cfg *c, uint16_t cn, uint16_t m)
{
	uint64_t want = CLAIM_BIT | (uint64_t)(c->self_cn + 1u), old = 0;
	struct remora_wr wr = store_wr_cas(st, m, claim_off(cn), want, 0, &old);

	(void)store_exec(ch, &wr, 1);
}

static void release_on_nodes(struct store_db *st, struct remora_chan *ch,
			     const struct recovery_online_cfg *c, uint16_t cn, uint32_t nodes)
{
	for (uint16_t m = 0; m < 32; m++)
		if (nodes >> m & 1u)
			release_on(st, ch, c, cn, m);
}

/*
 * The claim of cn, taken on every live copy of home 0 in order (so that a copy that takes
 * over after node 0 failed over still names the claimant): 0 this caller holds it; 1 done;
 * 2 held by a live compute node; or a verb's error. A claim not won everywhere is given back.
 */
static int claim(struct store_db *st, struct remora_chan *ch, const struct recovery_online_cfg *c,
		 uint16_t cn)
{
	uint32_t won = 0;
	int rc = 0;

	for (uint16_t m = 0; m < 32 && !rc; m++) {
		if (!(store_ctl_copies(st) >> m & 1u))
			continue;
		rc = claim_on(st, ch, c, cn, m);
		if (!rc)
			won |= 1u << m;
	}
	if (rc)
		release_on_nodes(st, ch, c, cn, won);
	return rc;
}

/* Gives a won claim back after a failed recovery, on every live copy. */
static void release_claim(struct store_db *st, struct remora_chan *ch,
			  const struct recovery_online_cfg *c, uint16_t cn)
{
	release_on_nodes(st, ch, c, cn, store_ctl_copies(st));
}

static int mark_done(struct store_db *st, struct remora_chan *ch,
		     const struct recovery_online_cfg *c, uint16_t cn)
{
	uint64_t done = DONE_BIT | (uint64_t)(c->self_cn + 1u);
	struct remora_wr wrs[REMORA_MAX_MN];
	unsigned n = 0;

	/* on every live copy of home 0: a claimant after node 0 failed over sees it done */
	for (uint16_t m = 0; m < 32; m++)
		if (store_ctl_copies(st) >> m & 1u)
			wrs[n++] = store_wr_write(st, m, claim_off(cn), &done, 8, REMORA_WR_DURABLE);
	return store_exec(ch, wrs, n);
}

static const struct txn_proto_ops *proto_named(const char *name)
{
	for (unsigned i = 0; name && txn_proto_registry[i]; i++) {
		const struct txn_proto_ops *p = txn_proto_registry[i];

		if (strcmp(p->name, name) == 0 &&
		    p->size > offsetof(struct txn_proto_ops, recover_online) && p->recover_online)
			return p;
	}
	return NULL;
}

/* The txn-layer switches of $REMORA_MUTATE (negative controls reach the recovery too). */
static uint64_t recovery_mutations(void)
{
	uint64_t m = 0;

	if (mut_from_env(MUT_TXN, &m, NULL, 0))
		m = 0; /* bad names: none */
	return m;
}

bool recovery_mutated(enum mut_id id)
{
	return mut_on(recovery_mutations(), id);
}

/* The claimed recovery: the protocol's op on a database handle of the opened store. */
static int recover_claimed(struct store_db *st, const struct txn_proto_ops *p, uint16_t cn,
			   struct recovery_report *rep)
{
	struct remora_db *db = calloc(1, sizeof(*db));
	int rc;

	if (!db)
		return -ENOMEM;
	db->st = *st;
	db->proto = p;
	db->online_rep = rep;
	db->mutations = recovery_mutations(); /* unpublished_failure, online_no_lock_proof */
	rc = p->recover_online(db, &cn, 1);
	free(db);
	return rc;
}

int recovery_online(struct remora_transport *tp, const struct recovery_online_cfg *cfg,
			   uint16_t cn, struct recovery_report *rep, char *err,
			   size_t errlen)
{
	const struct txn_proto_ops *p = cfg ? proto_named(cfg->protocol) : NULL;
	struct store_db *st;
	struct remora_chan *ch;
	uint64_t t0 = now_ns();
	int rc;

	if (!tp || !cfg || cfg->size < sizeof(*cfg) || !rep || cn >= REMORA_MAX_CN)
		return -EINVAL; /* cn indexes the claim words */
	memset(rep, 0, sizeof(*rep));
	if (!p)
		return -EOPNOTSUPP;
	st = calloc(1, sizeof(*st));
	if (!st)
		return -ENOMEM;
	rc = remora_chan_open(tp, &ch);
	if (rc) {
		free(st);
		return rc;
	}
	rc = store_open(st, tp, ch, cfg->n_mn, 0, REMORA_CODEC_NONE, err, errlen);
	if (!rc)
		rc = claim(st, ch, cfg, cn);
	if (!rc && mut_on(recovery_mutations(), MUT_CLAIM_DONE_FIRST))
		rc = mark_done(st, ch, cfg, cn);
	if (!rc) {
		rc = recover_claimed(st, p, cn, rep);
		if (!rc)
			rc = mark_done(st, ch, cfg, cn);
		if (rc)
			release_claim(st, ch, cfg, cn);
	}
	if (rc < 0 && err && errlen && rc != -EOPNOTSUPP)
		snprintf(err, errlen, "online recovery of cn %u: %s", cn, remora_strerror(rc));
	rep->ns_total = now_ns() - t0;
	remora_chan_close(ch);
	free(st);
	return rc;
}

/*
 * Clears the failover ack of cn (fenced: it writes no more), on every live node: the barrier
 * (runtime/txn/failover.c) waits for no open of a dead compute node.
 */
static int unack(struct store_db *st, struct remora_chan *ch, uint16_t cn)
{
	static const uint64_t zero;
	const uint64_t off = REMORA_STORE_CONTROL_OFF + offsetof(struct store_control, mnf_ack) +
			     8u * cn;
	uint32_t down = store_dead(st) | rt_transport_down_mask(st->tp);
	struct remora_wr wrs[REMORA_MAX_MN];
	unsigned n = 0;

	for (uint16_t m = 0; m < st->n_mn; m++)
		if (!(down >> m & 1u))
			wrs[n++] = store_wr_write(st, m, off, &zero, 8, REMORA_WR_DURABLE);
	return store_exec(ch, wrs, n);
}

int recovery_suspect(struct remora_transport *tp, uint16_t n_mn, uint16_t cn)
{
	struct store_db *st = calloc(1, sizeof(*st));
	struct remora_chan *ch = NULL;
	uint32_t block = 0;
	uint16_t inc = 0;
	int rc = st ? remora_chan_open(tp, &ch) : -ENOMEM;

	if (!rc)
		rc = store_open(st, tp, ch, n_mn, 0, REMORA_CODEC_NONE, NULL, 0);
	if (!rc && cn < st->sb.max_cn) {
		rc = txn_ids_owner(st, ch, cn, &block, &inc);
		if (rc == 1)
			txn_suspect_ids(txn_ids_first(st->sb.coords_per_cn, block),
					st->sb.coords_per_cn, inc);
		if (rc >= 0)
			rc = unack(st, ch, cn);
		/* rc == 0: no open of cn holds a block, so none of its ids is on a lock */
		rc = rc < 0 ? rc : 0;
	}
	if (ch)
		remora_chan_close(ch);
	free(st);
	return rc;
}

static double wall_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Membership events only, one line each (never per transaction). */
#define watch_log(log, cfg, ...) evlog(log, "cn", (cfg)->self_cn, __VA_ARGS__)

static pthread_mutex_t event_lock = PTHREAD_MUTEX_INITIALIZER;
static struct recovery_event last_event;
static bool have_event;

void recovery_note_event(const struct recovery_event *ev)
{
	pthread_mutex_lock(&event_lock);
	last_event = *ev;
	have_event = true;
	pthread_mutex_unlock(&event_lock);
}

bool recovery_last_event(struct recovery_event *out)
{
	bool have;

	pthread_mutex_lock(&event_lock);
	have = have_event;
	if (have)
		*out = last_event;
	pthread_mutex_unlock(&event_lock);
	if (have && out->mn && txn_mnf_resumed_s() > out->seen_s)
		out->total_ms = (txn_mnf_resumed_s() - out->seen_s) * 1000;
	return have;
}

/*
 * Recovers cn, which this process fenced on every memory node; one line to log (a failure
 * only the first time in a row). 2: under way elsewhere; < 0: failed, try again later.
 */
static int watch_one(const struct recovery_watch_src *src, const struct recovery_online_cfg *cfg,
		     uint16_t cn, double seen, struct recovery_watcher *w, FILE *log)
{
	struct recovery_report rep;
	char err[256] = "";
	int rc = recovery_online(src->tp, cfg, cn, &rep, err, sizeof(err));
	bool quiet = (w->failing >> cn & 1) != 0;

	w->failing &= ~(UINT64_C(1) << cn);
	if (rc >= 0)
		recovery_note_event(&(struct recovery_event){
			.cn = cn, .here = rc == 0, .seen_s = seen,
			.total_ms = rc == 0 ? (double)rep.ns_total / 1e6 : 0,
			.logs_ms = rc == 0 ? (double)rep.ns_logs / 1e6 : 0,
			.logs = rc == 0 ? rep.logs : 0 });
	if (rc == -EOPNOTSUPP)
		watch_log(log, cfg, "cn %u dead at t=%.3f; fenced; %s has no online recovery: its "
			  "locks stay held until remora recover", cn, seen, cfg->protocol);
	else if (rc < 0) {
		w->failing |= UINT64_C(1) << cn;
		if (!quiet)
			watch_log(log, cfg, "cn %u dead at t=%.3f; %s; trying again", cn, seen, err);
	} else if (rc == 0)
		watch_log(log, cfg, "cn %u dead at t=%.3f; fenced; recovered here: %llu logs "
			  "(%llu forward, %llu back, %llu finished), %s; logs "
			  "%.3f ms, total %.3f ms",
			  cn, seen, (unsigned long long)rep.logs, (unsigned long long)rep.forward,
			  (unsigned long long)rep.back, (unsigned long long)rep.finished,
			  rep.locks_at_survivors ? "its locks dropped by the survivors" :
			  rep.records	     ? "its locks released by a scan" :
						       "failed ids published",
			  (double)rep.ns_logs / 1e6, (double)rep.ns_total / 1e6);
	return rc;
}

/* Fences every dead compute node not fenced yet, on every memory node (a failure: next call). */
static void fence_dead(const struct recovery_watch_src *src,
		       const struct recovery_online_cfg *cfg, uint64_t dead,
		       struct recovery_watcher *w, FILE *log)
{
	uint64_t todo = dead & ~w->fenced;

	for (uint16_t cn = 0; todo; cn++, todo >>= 1) {
		uint64_t bit = UINT64_C(1) << cn;

		if (!(todo & 1))
			continue;
		if (src->fence(src->ctx, cn) == 0) {
			(void)recovery_suspect(src->tp, src->n_mn, cn); /* failed_locks = stall */
			w->fenced |= bit;
			w->failing &= ~bit;
			continue;
		}
		if (!(w->failing & bit))
			watch_log(log, cfg, "cn %u is dead but fencing it failed (%s): not recovered "
				  "yet, trying again", cn, src->errmsg(src->ctx));
		w->failing |= bit;
	}
}

void recovery_watch_src(const struct recovery_watch_src *src, const char *protocol,
			struct recovery_watcher *w, FILE *log)
{
	struct recovery_online_cfg cfg = {
		.size = sizeof(cfg), .protocol = protocol, .n_mn = src->n_mn,
		.self_cn = src->self_cn,
	};
	uint64_t dead = 0, todo;
	double seen;

	if (src->view(src->ctx, &dead))
		return;
	seen = wall_s(); /* when this pass saw the view: the detection time's end */
	dead &= ~(UINT64_C(1) << cfg.self_cn);
	txn_mnf_cn_gone(dead); /* the failover barrier waits for none of them */
	/* Pass 1: fence them all, so that no claim of a half-fenced claimant counts as void. */
	fence_dead(src, &cfg, dead, w, log);
	cfg.dead = mut_on(recovery_mutations(), MUT_RECOVER_UNFENCED) ? dead : w->fenced;
	/* A new fenced death may be the claimant of a pending one: try those again. */
	if (w->fenced != w->seen_dead)
		w->handled &= ~w->pending;
	w->seen_dead = w->fenced;
	todo = cfg.dead & ~w->handled;
	for (uint16_t cn = 0; todo; cn++, todo >>= 1) {
		uint64_t bit = UINT64_C(1) << cn;
		int rc;

		if (!(todo & 1))
			continue;
		rc = watch_one(src, &cfg, cn, seen, w, log);
		w->pending &= ~bit;
		if (rc == 2)
			w->pending |= bit;
		if (rc == 0 || rc == 1)
			w->done |= bit;
		/* else: not handled, the next call tries again; 2 too (a live node is recovering
		 * it), so that this node learns when it is done (w->done) */
		if ((rc >= 0 && rc != 2) || rc == -EOPNOTSUPP)
			w->handled |= bit;
	}
	txn_cn_recovered_set(w->done & dead); /* LOTUS: survivors drop its holds now */
}

static int cluster_dead(void *ctx, uint64_t *dead)
{
	struct remora_cluster_view v;
	int rc = remora_cluster_view(ctx, &v);

	*dead = rc ? 0 : v.dead;
	return rc;
}

static int cluster_fence(void *ctx, uint16_t cn)
{
	return remora_cluster_fence(ctx, cn);
}

static const char *cluster_errmsg(void *ctx)
{
	return remora_cluster_errmsg(ctx);
}

void recovery_watch(struct remora_cluster *cl, const char *protocol,
			   struct recovery_watcher *w, FILE *log)
{
	struct recovery_watch_src src = {
		.view = cluster_dead, .fence = cluster_fence, .errmsg = cluster_errmsg, .ctx = cl,
		.tp = remora_cluster_transport(cl), .n_mn = (uint16_t)remora_cluster_n_mn(cl),
		.self_cn = (uint16_t)remora_cluster_cn_id(cl),
	};

	if (remora_cluster_cn_id(cl) >= 0)
		recovery_watch_src(&src, protocol, w, log);
}

/* ---- the memory node's own check ------------------------------------------------------- */

static int pool_err(char *err, size_t len, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static int pool_err(char *err, size_t len, const char *fmt, ...)
{
	va_list ap;

	if (err && len) {
		va_start(ap, fmt);
		vsnprintf(err, len, fmt, ap);
		va_end(ap);
	}
	return -REMORA_ELAYOUT;
}

int recovery_pool_check(const void *base, uint64_t bytes, uint16_t node,
					  char *err, size_t errlen)
{
	const unsigned char *p = base;
	struct store_sb sb;
	bool zero = true;

	if (bytes < REMORA_STORE_SB_BYTES)
		return 1; /* too small to hold any database: a format will say so */
	for (size_t i = 0; i < REMORA_STORE_SB_BYTES && zero; i++)
		zero = p[i] == 0;
	if (zero)
		return 1;
	memcpy(&sb, p, sizeof(sb));
	if (sb.magic != REMORA_STORE_MAGIC)
		return pool_err(err, errlen,
				"the pool holds no remora database (magic %#llx); "
				"start with --format to erase it",
				(unsigned long long)sb.magic);
	if (sb.layout_version != REMORA_STORE_LAYOUT_VERSION || sb.sb_bytes != sizeof(sb))
		return pool_err(err, errlen,
				"the database has layout version %u, this build reads version %u",
				sb.layout_version, REMORA_STORE_LAYOUT_VERSION);
	if (sb.csum != store_csum(REMORA_STORE_SB_CSUM_SEED, &sb,
					 offsetof(struct store_sb, csum)))
		return pool_err(err, errlen,
				"the database superblock fails its checksum (corrupt)");
	if (sb.node != node)
		return pool_err(err, errlen, "the database was formatted as memory node %u, not %u",
				sb.node, node);
	if (sb.layout_bytes > bytes || sb.log_off + sb.log_bytes > sb.layout_bytes ||
	    sb.data_off + sb.data_bytes > sb.layout_bytes)
		return pool_err(err, errlen,
				"the database needs %llu bytes but the pool has %llu",
				(unsigned long long)sb.layout_bytes, (unsigned long long)bytes);
	return 0;
}

void recovery_pool_erase(void *base, uint64_t bytes)
{
	memset(base, 0, bytes < REMORA_STORE_SB_BYTES ? bytes : REMORA_STORE_SB_BYTES);
}

uint64_t recovery_pool_mark(void *base, uint64_t bytes)
{
	struct store_control *c;

	if (bytes < REMORA_STORE_CONTROL_OFF + sizeof(*c))
		return 0;
	c = (struct store_control *)(void *)((char *)base + REMORA_STORE_CONTROL_OFF);
	if (!c->live_opens)
		return 0;
	c->needs_recovery += c->live_opens;
	c->live_opens = 0;
	return c->needs_recovery;
}
