/* SPDX-License-Identifier: MIT */
/* The database handle: protocol choice, format, open/close, loading entry points. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <stddef.h>
#include <string.h>

#include "config/env.h"
#include "ids.h"
#include "protocol.h"
#include "transport/direct.h"
#include "txn.h"

/* Messages of failed opens/formats: no handle exists yet to keep them on. */
static _Thread_local char db_last_err[TXN_ERRLEN];

static int db_fail(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static int db_fail(int code, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(db_last_err, sizeof(db_last_err), fmt, ap);
	va_end(ap);
	return code;
}

/* ---- protocol registry ----------------------------------------------------------------- */

static int stub_db_init(struct remora_db *db)
{
	(void)db;
	return 0;
}

static void stub_db_fini(struct remora_db *db)
{
	(void)db;
}

static int stub_rpc_init(struct remora_db *db, struct remora_rpc *rpc)
{
	(void)db, (void)rpc;
	return 0;
}

static void stub_worker_drain(struct remora_worker *w)
{
	(void)w;
}

static int stub_begin(struct remora_tx *tx)
{
	(void)tx;
	return 0;
}

static int stub_fetch(struct remora_tx *tx, struct txn_obj *const *objs, unsigned n)
{
	(void)tx, (void)objs, (void)n;
	return -EOPNOTSUPP;
}

static int stub_write(struct remora_tx *tx, struct txn_obj *o, const void *value)
{
	(void)tx, (void)o, (void)value;
	return -EOPNOTSUPP;
}

static int stub_remove(struct remora_tx *tx, struct txn_obj *o)
{
	(void)tx, (void)o;
	return -EOPNOTSUPP;
}

static int stub_commit(struct remora_tx *tx)
{
	(void)tx;
	return -EOPNOTSUPP;
}

static void stub_abort(struct remora_tx *tx)
{
	(void)tx;
}

static int stub_coord_init(struct txn_coord *c)
{
	(void)c;
	return 0;
}

static void stub_coord_fini(struct txn_coord *c)
{
	(void)c;
}

static int stub_recover_online(struct remora_db *db, const uint16_t *failed_cn, unsigned n)
{
	(void)db, (void)failed_cn, (void)n;
	return -EOPNOTSUPP;
}

static int stub_before_resolve(struct remora_tx *tx, struct txn_obj *const *objs, unsigned n)
{
	(void)tx, (void)objs, (void)n;
	return 0;
}

static void stub_describe_lock(const struct remora_db *db, uint64_t w, char *buf, size_t len)
{
	(void)db;
	snprintf(buf, len, "lock word %#llx", (unsigned long long)w);
}

static int stub_key_home(const struct remora_db *db, uint32_t table, uint64_t key, uint16_t *cn)
{
	(void)db, (void)table, (void)key, (void)cn;
	return -EOPNOTSUPP;
}

static const struct txn_proto_ops proto_stubs = {
	.size = sizeof(struct txn_proto_ops),
	.name = "stub",
	.db_init = stub_db_init,
	.db_fini = stub_db_fini,
	.begin = stub_begin,
	.fetch = stub_fetch,
	.write = stub_write,
	.insert = stub_write,
	.remove = stub_remove,
	.commit = stub_commit,
	.abort = stub_abort,
	.coord_init = stub_coord_init,
	.coord_fini = stub_coord_fini,
	.recover = NULL, /* no whole-cluster recovery: recovery_run says so */
	.recover_online = stub_recover_online,
	.before_resolve = stub_before_resolve,
	.rpc_init = stub_rpc_init,
	.worker_drain = stub_worker_drain,
	.describe_lock = stub_describe_lock,
	.key_home = stub_key_home,
};

/* Copies the slots p has (by its size) over the stubs. */
static void proto_merge(const struct txn_proto_ops *p, struct txn_proto_ops *out)
{
	*out = proto_stubs;
	memcpy(out, p, p->size < sizeof(*out) ? p->size : sizeof(*out));
	out->size = sizeof(*out);
#define MERGE(slot) if (!out->slot) out->slot = proto_stubs.slot
	MERGE(db_init);
	MERGE(db_fini);
	MERGE(begin);
	MERGE(fetch);
	MERGE(write);
	MERGE(insert);
	MERGE(remove);
	MERGE(commit);
	MERGE(abort);
	MERGE(coord_init);
	MERGE(coord_fini);
	MERGE(recover_online);
	MERGE(before_resolve);
	MERGE(rpc_init);
	MERGE(worker_drain);
	MERGE(describe_lock);
	MERGE(key_home);
#undef MERGE
}

const struct txn_proto_ops *txn_proto_test;

size_t txn_proto_names(char *buf, size_t len, const char *sep)
{
	size_t at = 0;

	if (len)
		buf[0] = '\0';
	for (unsigned i = 0; txn_proto_registry[i]; i++) {
		int k = snprintf(buf + (at < len ? at : len), at < len ? len - at : 0, "%s%s",
				 i ? sep : "", txn_proto_registry[i]->name);

		at += k > 0 ? (size_t)k : 0;
	}
	return at;
}

void txn_proto_flags_str(uint32_t flags, char *buf, size_t len)
{
	static const struct {
		uint32_t bit;
		const char *name;
	} names[] = {
		{ REMORA_PROTO_NEEDS_TS, "timestamps" },
		{ REMORA_PROTO_NEEDS_MSG, "messages" },
		{ REMORA_PROTO_NEEDS_MCAS, "masked-CAS" },
	};
	size_t at = 0;

	snprintf(buf, len, "-");
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]) && at < len; i++)
		if (flags & names[i].bit)
			at += (size_t)snprintf(buf + at, len - at, "%s%s", at ? ", " : "",
					       names[i].name);
}

int txn_proto_check(const struct txn_proto_ops *p, const struct remora_caps *caps,
		    bool ts_counter, char *err, size_t errlen)
{
	if ((p->flags & REMORA_PROTO_NEEDS_MCAS) && !(caps->ops & (1u << REMORA_OP_MCAS))) {
		snprintf(err, errlen,
			 "protocol %s needs masked-CAS, which this backend neither has nor emulates",
			 p->name);
		return -REMORA_ECONFIG;
	}
	if ((p->flags & REMORA_PROTO_NEEDS_MSG) && !(caps->flags & REMORA_CAP_MSG)) {
		snprintf(err, errlen,
			 "protocol %s needs compute-node messages, which this backend does not carry",
			 p->name);
		return -REMORA_ECONFIG;
	}
	if ((p->flags & REMORA_PROTO_NEEDS_TS) && ts_counter &&
	    !(caps->ops & (1u << REMORA_OP_FAA))) {
		snprintf(err, errlen,
			 "protocol %s needs counter timestamps (FAA), which this backend does not have",
			 p->name);
		return -REMORA_ECONFIG;
	}
	return 0;
}

/*
 * Whether lock words go back by CAS (the unlock parameter). A WRITE of 0 is enough where
 * atomics are atomic against WRITEs; on an RDMA NIC they need only be atomic among themselves,
 * and soft-RoCE's failed CAS writes the word back: an unlock WRITE landing between its read and
 * its write-back is undone (docs/rdma.md, problem 2).
 */
static int db_unlock_cas(const struct remora_caps *caps, bool *cas)
{
	const char *v = cfg_param_env(REMORA_P_UNLOCK);

	if (strcmp(v, "auto") == 0)
		*cas = !(caps->flags & REMORA_CAP_COHERENT_ATOMICS);
	else if (strcmp(v, "cas") == 0 || strcmp(v, "write") == 0)
		*cas = v[0] == 'c';
	else
		return db_fail(-REMORA_ECONFIG, "db open: unlock '%s': use auto, write or cas", v);
	return 0;
}

int txn_proto_select(const char *name, struct txn_proto_ops *out, char *err, size_t errlen)
{
	char names[128];

	if (!name || !*name)
		name = cfg_param_env(REMORA_P_PROTOCOL);
	for (unsigned i = 0; txn_proto_registry[i]; i++) {
		if (strcmp(txn_proto_registry[i]->name, name) == 0) {
			proto_merge(txn_proto_registry[i], out);
			return 0;
		}
	}
	if (txn_proto_test && strcmp(txn_proto_test->name, name) == 0) {
		proto_merge(txn_proto_test, out);
		return 0;
	}
	txn_proto_names(names, sizeof(names), ", ");
	snprintf(err, errlen, "unknown protocol '%s' (protocols: %s)", name, names);
	return -REMORA_ECONFIG;
}

/* ---- format ---------------------------------------------------------------------------- */

REMORA_API int remora_db_format_ex(struct remora_transport *tp,
				   const struct remora_db_format_cfg *cfg)
{
	struct remora_db_format_cfg c = { 0 };
	struct txn_proto_ops ops;
	int rc;

	/* callers built before the cells were appended pass a shorter struct: no cells */
	if (!tp || !cfg || cfg->size < offsetof(struct remora_db_format_cfg, cells))
		return db_fail(-EINVAL, "format: missing transport or configuration");
	memcpy(&c, cfg, cfg->size < sizeof(c) ? cfg->size : sizeof(c));
	c.size = sizeof(c);
	rc = txn_proto_select(c.protocol, &ops, db_last_err, sizeof(db_last_err));
	if (rc)
		return rc;
	return store_format(tp, &c, ops.codec, ops.tail_bytes, db_last_err, sizeof(db_last_err));
}

REMORA_API int remora_db_format(struct remora_transport *tp, uint16_t n_mn, uint16_t replicas,
				const char *protocol, const struct remora_table_def *tables,
				unsigned ntables)
{
	struct remora_db_format_cfg cfg = {
		.size = sizeof(cfg), .n_mn = n_mn, .replicas = replicas, .protocol = protocol,
		.tables = tables, .ntables = ntables,
	};

	return remora_db_format_ex(tp, &cfg);
}

/* ---- open / close ---------------------------------------------------------------------- */

/* cfg->field, or dflt when the caller's struct ends before the field (the size rule). */
#define DB_CFG(cfg, field, dflt)                                                                 \
	((cfg)->size >= offsetof(struct remora_db_cfg, field) + sizeof((cfg)->field) ?           \
		 (cfg)->field : (dflt))

static const char *db_cfg_isolation(const struct remora_db_cfg *cfg)
{
	return DB_CFG(cfg, isolation, NULL);
}

static const char *db_cfg_failed_locks(const struct remora_db_cfg *cfg)
{
	return DB_CFG(cfg, failed_locks, NULL);
}

static uint32_t db_cfg_route(const struct remora_db_cfg *cfg)
{
	return DB_CFG(cfg, route, 0u);
}

static int db_check_cfg(const struct remora_db_cfg *cfg)
{
	const char *iso, *fl;

	if (!cfg || cfg->size < offsetof(struct remora_db_cfg, isolation) || !cfg->tp)
		return db_fail(-EINVAL, "db open: missing transport or configuration");
	if (cfg->cn_id >= REMORA_MAX_CN)
		return db_fail(-REMORA_ECONFIG, "db open: cn_id %u, must be below %d", cfg->cn_id,
			       REMORA_MAX_CN);
	if (cfg->workers == 0 || cfg->workers >= REMORA_STORE_COORD_SLOTS)
		return db_fail(-REMORA_ECONFIG, "db open: %u workers, need 1..%u", cfg->workers,
			       REMORA_STORE_COORD_SLOTS - 1);
	iso = db_cfg_isolation(cfg);
	if (iso && strlen(iso) >= sizeof(((struct remora_db *)0)->isolation))
		return db_fail(-REMORA_ECONFIG, "db open: isolation '%s': use sr or si", iso);
	fl = db_cfg_failed_locks(cfg);
	if (fl && strlen(fl) >= sizeof(((struct remora_db *)0)->failed_locks))
		return db_fail(-REMORA_ECONFIG, "db open: failed_locks '%s': use abort or stall",
			       fl);
	if (db_cfg_route(cfg) > 1)
		return db_fail(-REMORA_ECONFIG, "db open: route %u: use 0 (off) or 1 (on)",
			       db_cfg_route(cfg));
	return 0;
}

/* Every coordinator needs a log slot and an id: the format fixed how many fit. */
static int db_check_coords(struct remora_db *db)
{
	const struct store_sb *sb = &db->st.sb;
	uint64_t per_cn = (uint64_t)db->workers * db->coords_per_worker;

	if (db->cn_id >= sb->max_cn)
		return db_fail(-REMORA_ECONFIG,
			       "db open: cn_id %u but the database was formatted for %u compute nodes (format with max_cn > %u)",
			       db->cn_id, sb->max_cn, db->cn_id);
	if (per_cn > sb->coords_per_cn)
		return db_fail(-REMORA_ECONFIG,
			       "db open: %u workers x %u coordinators = %llu, but the database was formatted for %u per compute node (format with coords_per_cn >= %llu)",
			       db->workers, db->coords_per_worker, (unsigned long long)per_cn,
			       sb->coords_per_cn, (unsigned long long)per_cn);
	return 0;
}

static uint64_t db_cache_entries(const struct remora_db *db)
{
	const char *env = cfg_knob(CFG_KNOB_ADDR_CACHE);
	uint64_t want = 0;

	if (env)
		return strtoull(env, NULL, 0);
	for (unsigned i = 0; i < REMORA_MAX_TABLES; i++)
		if (db->st.tab[i].present)
			want += db->st.tab[i].ent.max_records;
	want *= 4; /* 4-way sets at 1/4 load: conflict misses stay well below 0.1% */
	if (want < 4096)
		want = 4096;
	if (want > (UINT64_C(1) << 24))
		want = UINT64_C(1) << 24;
	return want;
}

/*
 * Transaction ids are versions and must never repeat, also across restarts on durable pools:
 * every open takes a new incarnation number from the control node (store_ctl_faa) and its
 * coordinators number their transactions from incarnation << 32.
 */
static int db_incarnation(struct remora_db *db, struct remora_chan *ch)
{
	uint64_t old = 0;
	int rc = store_ctl_faa(&db->st, ch,
			       REMORA_STORE_CONTROL_OFF + offsetof(struct store_control, incarnation),
			       1, &old, REMORA_WR_DURABLE);

	if (rc)
		return db_fail(rc, "db open: incarnation counter: %s", remora_strerror(rc));
	db->seq_base = ((old + 1) & 0xffff) << 32;
	return 0;
}

/*
 * ---- unclean databases ------------------------------------------------------------------
 * Every open counts itself in live_opens on every memory node, and a clean close takes it
 * back. A memory node that restarts on a kept pool whose count is not zero marks the database
 * needs_recovery (recovery_pool_mark): the processes that opened it died with their
 * locks and logs. Transactions run on such a database would go on from stale locks and live
 * logs that recovery, run later, cannot tell from its own (lost updates): refuse, and leave
 * the pool as it is. remora recover zeroes both words.
 */
static remora_gaddr db_ctl_addr(uint16_t node, size_t field)
{
	return store_addr(node, REMORA_STORE_CONTROL_OFF + field);
}

static int db_check_clean(struct remora_db *db, struct remora_chan *ch)
{
	uint64_t marks[REMORA_MAX_MN] = { 0 };
	struct remora_wr wr[REMORA_MAX_MN];
	uint16_t n = db->st.n_mn;
	unsigned k = 0;
	int rc;

	for (uint16_t m = 0; m < n; m++)
		if (!store_node_dead(&db->st, m))
			wr[k++] = (struct remora_wr){
				.raddr = db_ctl_addr(m, offsetof(struct store_control,
								 needs_recovery)),
				.rkey = db->st.rkey[m], .op = REMORA_OP_READ, .len = 8,
				.local = &marks[m],
			};
	rc = store_exec(ch, wr, k);
	if (rc)
		return db_fail(rc, "db open: reading the recovery mark: %s", remora_strerror(rc));
	for (uint16_t m = 0; m < n; m++)
		if (marks[m])
			return db_fail(-EUCLEAN,
				       "db open: the database needs recovery: memory node %u restarted with %llu open(s) of crashed processes; run `remora recover` first (the pool is left as it is)",
				       m, (unsigned long long)marks[m]);
	return 0;
}

/* Adds delta (+1 open, -1 clean close) to live_opens on every node, durably. */
static int db_count_open(struct remora_db *db, struct remora_chan *ch, uint64_t delta)
{
	uint64_t old[REMORA_MAX_MN];
	struct remora_wr wr[REMORA_MAX_MN];
	uint32_t dead = store_dead(&db->st) | rt_transport_down_mask(db->st.tp);
	unsigned n = 0;

	for (uint16_t m = 0; m < db->st.n_mn; m++) {
		if (dead >> m & 1u)
			continue; /* failed over: never back in this database's life */
		wr[n] = (struct remora_wr){
			.raddr = db_ctl_addr(m, offsetof(struct store_control, live_opens)),
			.rkey = db->st.rkey[m], .op = REMORA_OP_FAA, .flags = REMORA_WR_DURABLE,
			.swap = delta, .local = &old[n],
		};
		n++;
	}
	return store_exec(ch, wr, n);
}

/*
 * Tells the failover barrier (failover.c) that this compute node has the database open, in
 * Dekker order against it: the ack (OPEN | the dead mask) first, on every live node, then
 * mnf_dead read again (ORed over the live nodes). A barrier that read the acks before this one landed had published its
 * mask before: the read sees it, the node is detached and acknowledged again. Reading only
 * first would let a barrier skip this node while it takes the old placement.
 */
static int db_ack_open(struct remora_db *db, struct remora_chan *ch)
{
	for (;;) {
		uint32_t dead = store_dead(&db->st);
		int rc = txn_mnf_ack(db, ch, dead, true);

		if (rc)
			return rc;
		rc = store_read_dead(&db->st, ch, NULL, 0);
		if (rc || store_dead(&db->st) == dead)
			return rc;
		for (uint16_t m = 0; m < db->st.n_mn; m++)
			if (store_node_dead(&db->st, m))
				rt_transport_mn_down(db->st.tp, m);
	}
}

/*
 * A clean close, or an open that failed after counting. Not taken back when a node is
 * unreachable: its restart asks for recovery. The ack is cleared whatever the count did.
 */
static void db_uncount(struct remora_db *db)
{
	struct remora_chan *ch;

	if (remora_chan_open(db->st.tp, &ch) == 0) {
		db_count_open(db, ch, (uint64_t)-1);
		txn_mnf_ack(db, ch, 0, false);
		remora_chan_close(ch);
	}
}

static int db_setup(struct remora_db *db, const struct remora_db_cfg *cfg,
		    struct txn_proto_ops *ops)
{
	const char *die_at = cfg_knob(CFG_KNOB_DIE_AT);
	struct remora_caps caps = { .size = sizeof(caps) };
	enum ts_kind tk;
	struct remora_chan *ch;
	int rc;

	rc = ts_parse(cfg->timestamps, &tk);
	if (rc)
		return db_fail(rc, "db open: timestamps '%s': use clock or counter", cfg->timestamps);
	rc = mut_from_env(MUT_TXN, &db->mutations, db_last_err, sizeof(db_last_err));
	if (!rc)
		rc = mut_from_env(MUT_PROTO, &db->proto_mutations, db_last_err,
				  sizeof(db_last_err));
	if (rc)
		return rc;
	rc = remora_transport_caps(cfg->tp, &caps);
	if (rc)
		return db_fail(rc, "db open: transport capabilities: %s", remora_strerror(rc));
	rc = db_unlock_cas(&caps, &db->unlock_cas);
	if (rc)
		return rc;
	rc = txn_proto_check(ops, &caps, tk == REMORA_TS_COUNTER, db_last_err,
			     sizeof(db_last_err));
	if (rc)
		return rc;
	rc = remora_chan_open(cfg->tp, &ch);
	if (rc)
		return db_fail(rc, "db open: cannot open a channel: %s", remora_strerror(rc));
	rc = store_open(&db->st, cfg->tp, ch, cfg->n_mn, cfg->replicas, ops->codec,
			       db_last_err, sizeof(db_last_err));
	/* nodes a failover declared dead stay out of this process too (failover.c) */
	for (uint16_t m = 0; !rc && m < db->st.n_mn; m++)
		if (store_node_dead(&db->st, m))
			rt_transport_mn_down(cfg->tp, m);
	if (!rc)
		rc = db_check_coords(db);
	if (!rc)
		rc = db_check_clean(db, ch);
	if (!rc)
		rc = db_incarnation(db, ch);
	if (!rc) {
		rc = db_count_open(db, ch, 1);
		if (rc)
			db_fail(rc, "db open: counting the open: %s", remora_strerror(rc));
	}
	if (!rc) {
		rc = db_ack_open(db, ch);
		if (rc) {
			db_count_open(db, ch, (uint64_t)-1);
			txn_mnf_ack(db, ch, 0, false);
			db_fail(rc, "db open: acknowledging the failover state: %s",
				remora_strerror(rc));
		}
	}
	remora_chan_close(ch);
	if (rc)
		return rc;
	db->split_commit = die_at && strncmp(die_at, "txn.commit_mid", 14) == 0;
	if (tk == REMORA_TS_CLOCK)
		ts_init_clock(&db->ts, db->cn_id);
	else
		ts_init_counter(&db->ts,
				       store_addr(0, REMORA_STORE_CONTROL_OFF +
							   offsetof(struct store_control,
								    ts_counter)),
				       db->st.rkey[0]);
	rc = txn_cache_init(&db->cache, db_cache_entries(db));
	if (rc) {
		db_uncount(db);
		return db_fail(rc, "db open: out of memory for the address cache");
	}
	return 0;
}

/* The RPC layer of a protocol that sends compute-node messages, with its handlers. */
static int db_rpc_open(struct remora_db *db, struct remora_transport *tp)
{
	struct remora_rpc_cfg rcfg = { .size = sizeof(rcfg), .workers = db->workers };
	int rc;

	if (!(db->proto->flags & REMORA_PROTO_NEEDS_MSG) && !db->wants_msg && !db->route)
		return 0;
	rc = remora_rpc_create(tp, &rcfg, &db->rpc);
	if (rc)
		return db_fail(rc, "db open: protocol %s: RPC layer: %s", db->proto->name,
			       remora_rpc_errmsg(NULL));
	rc = db->proto->rpc_init(db, db->rpc);
	if (!rc && db->route)
		rc = txn_route_rpc_init(db, db->rpc);
	if (rc) {
		remora_rpc_destroy(db->rpc);
		db->rpc = NULL;
		return db_fail(rc, "db open: protocol %s: registering its messages: %s",
			       db->proto->name, remora_strerror(rc));
	}
	return 0;
}

REMORA_API int remora_db_open(const struct remora_db_cfg *cfg, struct remora_db **out)
{
	struct txn_proto_ops *ops;
	struct remora_db *db;
	int rc;

	rc = db_check_cfg(cfg);
	if (rc)
		return rc;
	db = calloc(1, sizeof(*db));
	ops = calloc(1, sizeof(*ops));
	if (!db || !ops) {
		rc = db_fail(-ENOMEM, "db open: out of memory");
		goto err_free;
	}
	rc = txn_proto_select(cfg->protocol, ops, db_last_err, sizeof(db_last_err));
	if (rc)
		goto err_free;
	db->proto = ops;
	db->cn_id = cfg->cn_id;
	db->workers = cfg->workers;
	if (db_cfg_isolation(cfg))
		snprintf(db->isolation, sizeof(db->isolation), "%s", db_cfg_isolation(cfg));
	if (db_cfg_failed_locks(cfg))
		snprintf(db->failed_locks, sizeof(db->failed_locks), "%s", db_cfg_failed_locks(cfg));
	db->coords_per_worker = cfg->coords_per_worker ? cfg->coords_per_worker : 1;
	db->route = db_cfg_route(cfg) == 1;
	rc = txn_mnf_init(db);
	if (rc) {
		db_fail(rc, "db open: out of memory");
		goto err_free;
	}
	rc = db_setup(db, cfg, ops);
	if (rc)
		goto err_cache;
	rc = ops->db_init(db);
	if (rc) {
		db_fail(rc, "db open: protocol %s: %s", ops->name, db->errmsg);
		db_uncount(db);
		goto err_cache;
	}
	rc = db_rpc_open(db, cfg->tp);
	if (rc) {
		ops->db_fini(db);
		db_uncount(db);
		goto err_cache;
	}
	*out = db;
	return 0;

err_cache:
	txn_cache_fini(&db->cache);
err_free:
	free(ops);
	if (db)
		free(db->mnf_busy);
	free(db);
	return rc;
}

REMORA_API void remora_db_close(struct remora_db *db)
{
	if (!db)
		return;
	remora_rpc_destroy(db->rpc);
	db->proto->db_fini(db);
	/* Stranded: locks and a valid log stay behind, as after a crash; so does the count. */
	if (!remora_db_stranded(db) || mut_on(db->mutations, MUT_STRANDED_CLEAN_CLOSE))
		db_uncount(db);
	txn_cache_fini(&db->cache);
	free((void *)db->proto);
	free(db->mnf_busy);
	free(db);
}

REMORA_API int64_t remora_db_locks_unreleased(const struct remora_db *db)
{
	return db ? __atomic_load_n(&db->locks_unreleased, __ATOMIC_RELAXED) : 0;
}

REMORA_API bool remora_db_stranded(const struct remora_db *db)
{
	return db && __atomic_load_n(&db->stranded, __ATOMIC_RELAXED);
}

REMORA_API const char *remora_db_errmsg(const struct remora_db *db)
{
	return db ? db->errmsg : db_last_err;
}

REMORA_API const char *remora_db_protocol(const struct remora_db *db)
{
	return db->proto->name;
}

REMORA_API int remora_db_table(const struct remora_db *db, const char *name)
{
	for (unsigned i = 0; name && i < REMORA_MAX_TABLES; i++)
		if (db->st.tab[i].present && strcmp(db->st.tab[i].ent.name, name) == 0)
			return (int)i;
	return -REMORA_ENOTFOUND;
}

REMORA_API int remora_db_table_def(const struct remora_db *db, unsigned id,
				   struct remora_table_def *out)
{
	const struct store_tabent *e;

	if (id >= REMORA_MAX_TABLES || !db->st.tab[id].present)
		return -REMORA_ENOTFOUND;
	e = &db->st.tab[id].ent;
	memset(out, 0, sizeof(*out));
	snprintf(out->name, sizeof(out->name), "%s", e->name);
	out->id = e->id;
	out->value_size = e->value_size;
	out->max_records = e->max_records;
	return 0;
}

void txn_set_failed(struct remora_db *db, uint16_t coord_id, bool failed)
{
	uint64_t bit = UINT64_C(1) << (coord_id & 63);

	if (failed)
		__atomic_fetch_or(&db->failed_ids[coord_id >> 6], bit, __ATOMIC_RELEASE);
	else
		__atomic_fetch_and(&db->failed_ids[coord_id >> 6], ~bit, __ATOMIC_RELEASE);
}

/* Incarnation + 1 (TXN_INC_ANY + 1: any) per suspected coordinator id; 0: not suspected. */
static uint32_t txn_suspects[65536];

void txn_suspect_ids(uint16_t first, uint32_t n, uint32_t inc)
{
	for (uint32_t i = 0; i < n && first + i < 65536u; i++)
		__atomic_store_n(&txn_suspects[first + i], inc + 1u, __ATOMIC_RELEASE);
}

bool txn_lock_suspected(uint64_t w)
{
	uint32_t s = __atomic_load_n(&txn_suspects[(uint16_t)w], __ATOMIC_ACQUIRE);

	return s && (s == TXN_INC_ANY + 1u || s - 1u == (uint32_t)(w >> 48));
}

void txn_set_failed_inc(struct remora_db *db, uint16_t coord_id, uint16_t inc)
{
	__atomic_store_n(&db->failed_inc[coord_id], (uint32_t)inc + 1u, __ATOMIC_RELEASE);
	txn_set_failed(db, coord_id, true);
}

uint16_t txn_db_coord_id(const struct remora_db *db, uint32_t local)
{
	if (db->id_block)
		return (uint16_t)(txn_ids_first(db->st.sb.coords_per_cn, db->id_block - 1u) + local);
	return txn_coord_id(db->cn_id, local);
}

/* ---- loading --------------------------------------------------------------------------- */

/* Loaded records go straight into the address cache: the first transaction is warm. */
static void loaded_to_cache(void *arg, uint64_t hash, uint64_t off)
{
	txn_cache_put(arg, hash, off);
}

static int worker_loader(struct remora_worker *w)
{
	int rc;

	if (w->loader)
		return 0;
	rc = store_loader_create(&w->db->st, w->ch, &w->db->loaded, loaded_to_cache,
					&w->db->cache, &w->loader);
	if (rc)
		snprintf(w->errmsg, sizeof(w->errmsg), "load: out of memory");
	return rc;
}

REMORA_API int remora_db_load(struct remora_worker *w, uint32_t table, uint64_t key,
			      const void *value)
{
	int rc = worker_loader(w);

	if (rc)
		return rc;
	rc = store_load(w->loader, table, key, value);
	if (rc)
		snprintf(w->errmsg, sizeof(w->errmsg), "%s", store_loader_errmsg(w->loader));
	return rc;
}

REMORA_API int remora_db_load_flush(struct remora_worker *w)
{
	int rc;

	if (!w->loader)
		return 0;
	rc = store_load_flush(w->loader);
	if (rc)
		snprintf(w->errmsg, sizeof(w->errmsg), "%s", store_loader_errmsg(w->loader));
	return rc;
}

REMORA_API uint64_t remora_db_load_count(const struct remora_db *db)
{
	return __atomic_load_n(&db->loaded, __ATOMIC_RELAXED);
}

/* Parameter id as this process was given it (its environment, or the default), as a number:
 * a SIZE in bytes, a BOOL as 0 or 1, an INT. 0, or a code with db->errmsg set. */
int txn_db_param(struct remora_db *db, enum remora_param_id id, uint64_t *out)
{
	const struct remora_param_def *d = remora_param_def(id);
	char var[96]; /* the origin: REMORA_<NAME> */
	struct remora_params *p;
	int rc = remora_params_create(&p);

	if (rc)
		return rc;
	cfg_param_env_var(id, var, sizeof(var));
	rc = remora_params_set(p, d->name, cfg_param_env(id), REMORA_SRC_ENV, var);
	if (rc)
		snprintf(db->errmsg, sizeof(db->errmsg), "%s", remora_params_errmsg(p));
	else if (d->type == REMORA_PT_SIZE)
		*out = remora_params_size(p, id);
	else if (d->type == REMORA_PT_BOOL)
		*out = remora_params_bool(p, id);
	else
		*out = (uint64_t)remora_params_int(p, id);
	remora_params_destroy(p);
	return rc;
}
