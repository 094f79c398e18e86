// SPDX-License-Identifier: MIT
/*
 * kvs: the LOTUS key-value microbenchmark (also Pandora's "micro"): 8 B keys, 40 B values,
 * ReadOne (read one key, read-only) and UpdateOne (read one key for update, write it), mixed
 * by an update percentage; keys uniform or Zipf(theta) (LOTUS: 20M keys, theta 0.99).
 *
 * Extension used by the history checker: --txn-keys A-B makes every transaction touch A..B
 * distinct keys, each written with the update percentage. Every write is a read-modify-write
 * that stores its writer's transaction id and the id it overwrote, so --history DIR can
 * record a checkable history (apps/bench/history.h).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "workload.h"
#include "history.h"

#define KVS_TABLE 0

/* The 40 B value. writer2 repeats writer so a torn read (READ is not atomic) is visible. */
struct kvs_val {
	uint64_t writer;  /* transaction id of the writer; 0: loaded */
	uint64_t prev;    /* writer id of the version this one replaced */
	uint64_t key;     /* the record's own key: a misplaced record is visible */
	uint64_t ver;     /* versions of this key so far */
	uint64_t writer2;
};
_Static_assert(sizeof(struct kvs_val) == 40, "kvs values are 40 B, as in LOTUS");

enum { KVS_READ, KVS_UPDATE };

struct kvs {
	uint64_t keys;
	unsigned update_pct;
	unsigned kmin, kmax;
	struct wl_keydist dist;
	const char *history; /* directory, or NULL */
	bool crash_safe;     /* --history-crash on */
	bool each;           /* one round trip per key, in order */
};

struct kvs_coord {
	struct kvs_val buf[WL_MAX_KEYS];
	bool found[WL_MAX_KEYS];
	struct hist_log log;
	bool logging;
	bool pending; /* this attempt recorded a pending history record */
};

static const struct wl_knob kvs_knobs[] = {
	{ "keys", "100000", "records in the store (LOTUS: 20M)" },
	{ "update-pct", "50", "percent of UpdateOne (per key with --txn-keys > 1)" },
	{ "rw-ratio", "", "reads:updates, e.g. 1:1 or 95:5 (instead of --update-pct)" },
	{ "dist", "zipf", "key popularity: uniform | zipf" },
	{ "theta", "0.99", "Zipf skew (0 < theta; LOTUS: 0.99)" },
	{ "txn-keys", "1", "keys per transaction: N or A-B (history checks use 2-4)" },
	{ "history", "", "record every committed transaction under this directory" },
	{ "history-crash", "off", "on: the history survives a compute node's SIGKILL (a shared "
	  "file mapping, each commit recorded pending first; the crash campaign sets it)" },
	{ "fetch", "batch", "batch: all keys of a transaction in one round trip | each: one by one" },
	{ NULL, NULL, NULL },
};

static int parse_rw_ratio(struct wl *wl, const char *s, unsigned *pct)
{
	unsigned long r, w;
	char *end;

	r = strtoul(s, &end, 10);
	if (end == s || *end != ':')
		goto bad;
	s = end + 1;
	w = strtoul(s, &end, 10);
	if (end == s || *end || r + w == 0 || r > 1000000 || w > 1000000)
		goto bad;
	*pct = (unsigned)((w * 100 + (r + w) / 2) / (r + w));
	return 0;
bad:
	return wl_fail(wl, "--rw-ratio: expected READS:UPDATES such as 1:1 or 95:5");
}

static int parse_range(struct wl *wl, const char *name, unsigned max, unsigned *lo, unsigned *hi)
{
	const char *s = wl_knob_str(wl, name);
	unsigned long a, b;
	char *end;

	a = strtoul(s, &end, 10);
	if (end == s)
		goto bad;
	b = a;
	if (*end == '-') {
		const char *t = end + 1;

		b = strtoul(t, &end, 10);
		if (end == t)
			goto bad;
	}
	if (*end || a < 1 || b < a || b > max)
		goto bad;
	*lo = (unsigned)a;
	*hi = (unsigned)b;
	return 0;
bad:
	return wl_fail(wl, "--%s: expected N or A-B with 1 <= A <= B <= %u", name, max);
}

static int kvs_init(struct wl *wl)
{
	struct kvs *k = calloc(1, sizeof(*k));
	const char *rw, *hist;
	uint64_t v;
	int rc;

	if (!k)
		return wl_fail(wl, "out of memory");
	wl->priv = k;
	rc = wl_knob_u64(wl, "keys", 1, UINT64_C(1) << 40, &k->keys);
	if (rc)
		return rc;
	rw = wl_knob_str(wl, "rw-ratio");
	if (rw && *rw) {
		for (unsigned i = 0; i < wl->args.n; i++)
			if (!strcmp(wl->args.name[i], "update-pct"))
				return wl_fail(wl, "give --update-pct or --rw-ratio, not both");
		rc = parse_rw_ratio(wl, rw, &k->update_pct);
	} else {
		rc = wl_knob_u64(wl, "update-pct", 0, 100, &v);
		k->update_pct = (unsigned)v;
	}
	if (rc)
		return rc;
	rc = parse_range(wl, "txn-keys", HIST_MAX_OPS, &k->kmin, &k->kmax);
	if (rc)
		return rc;
	if (k->kmax > k->keys)
		return wl_fail(wl, "--txn-keys %u needs at least that many --keys", k->kmax);
	rc = wl_keydist_setup(wl, &k->dist, k->keys, "dist", "theta", false);
	if (rc)
		return rc;
	{
		static const char *const modes[] = { "batch", "each", NULL };
		unsigned m;

		rc = wl_knob_choice(wl, "fetch", modes, &m);
		if (rc)
			return rc;
		k->each = m == 1;
	}
	hist = wl_knob_str(wl, "history");
	if (hist && *hist) {
		if (mkdir(hist, 0777) && errno != EEXIST)
			return wl_fail(wl, "--history %s: %s", hist, strerror(errno));
		k->history = hist;
	}
	return wl_knob_onoff(wl, "history-crash", &k->crash_safe);
}

static void kvs_fini(struct wl *wl)
{
	free(wl->priv);
}

/* A previous run's files in the history directory would join this run's history. */
static int kvs_prepare(const struct wl *wl)
{
	const struct kvs *k = wl->priv;

	return k->history ? hist_dir_clear(k->history) : 0;
}

static unsigned kvs_tables(const struct wl *wl, struct remora_table_def *defs)
{
	const struct kvs *k = wl->priv;

	memset(defs, 0, sizeof(*defs));
	snprintf(defs[0].name, sizeof(defs[0].name), "kvs");
	defs[0].id = KVS_TABLE;
	defs[0].value_size = sizeof(struct kvs_val);
	defs[0].max_records = k->keys;
	return 1;
}

static uint64_t kvs_load_count(const struct wl *wl)
{
	return ((const struct kvs *)wl->priv)->keys;
}

static int kvs_load(const struct wl *wl, struct remora_worker *w, uint64_t begin, uint64_t end)
{
	(void)wl;
	for (uint64_t key = begin; key < end; key++) {
		struct kvs_val v = { .key = key };
		int rc = remora_db_load(w, KVS_TABLE, key, &v);

		if (rc)
			return rc;
	}
	return 0;
}

static int kvs_coord_init(const struct wl *wl, struct wl_coord *c)
{
	const struct kvs *k = wl->priv;
	struct kvs_coord *kc = calloc(1, sizeof(*kc));
	int rc;

	if (!kc)
		return -ENOMEM;
	if (k->history) {
		rc = hist_log_open(&kc->log, k->history, c->cn, c->thread, c->coro,
				   k->crash_safe);
		if (rc) {
			free(kc);
			return rc;
		}
		kc->logging = true;
	}
	c->priv = kc;
	return 0;
}

static void kvs_coord_fini(const struct wl *wl, struct wl_coord *c)
{
	struct kvs_coord *kc = c->priv;

	(void)wl;
	if (!kc)
		return;
	if (kc->logging && hist_log_close(&kc->log))
		c->acc[1]++; /* a history that could not be written fails the check */
	free(kc);
}

static void kvs_gen(const struct wl *wl, struct wl_coord *c, struct wl_input *in)
{
	const struct kvs *k = wl->priv;
	unsigned n = k->kmin + (unsigned)wl_rng_below(&c->rng, k->kmax - k->kmin + 1);

	memset(in, 0, sizeof(*in));
	for (unsigned i = 0; i < n; i++) {
		uint64_t key;
		bool dup;

		do {
			key = wl_keydist_next(&k->dist, &c->rng);
			dup = false;
			for (unsigned j = 0; j < i; j++)
				dup |= in->key[j] == key;
		} while (dup);
		in->key[i] = key;
		if (wl_rng_pct(&c->rng, k->update_pct))
			in->write_mask |= 1u << i;
	}
	in->nkeys = n;
	in->type = in->write_mask ? KVS_UPDATE : KVS_READ;
}

static unsigned kvs_tx_flags(const struct wl *wl, const struct wl_input *in)
{
	(void)wl;
	return in->type == KVS_READ ? REMORA_TX_READ_ONLY : 0;
}

static void kvs_record(struct hist_txn *t, const struct wl_input *in,
		       const struct wl_result *res, uint64_t txid)
{
	memset(t, 0, sizeof(*t));
	t->txid = txid;
	t->nops = in->nkeys;
	for (unsigned i = 0; i < in->nkeys; i++)
		t->op[i] = (struct hist_op){ .key = in->key[i], .seen = res->seen[i],
					     .write = (in->write_mask >> i) & 1 };
}

static void kvs_commit(const struct wl *wl, struct wl_coord *c, const struct wl_input *in,
		       const struct wl_result *res, uint64_t txid)
{
	struct kvs_coord *kc = c->priv;
	struct hist_txn t;

	(void)wl;
	c->acc[0] += res->integrity_errors;
	if (!kc->logging)
		return;
	kvs_record(&t, in, res, txid);
	if (hist_log_append(&kc->log, &t))
		c->acc[1]++;
}

static void kvs_undecided(const struct wl *wl, struct wl_coord *c)
{
	struct kvs_coord *kc = c->priv;

	(void)wl;
	/* only a record of this very attempt: slot n+1 may hold an older attempt's that aborted */
	if (kc->logging && kc->pending)
		hist_log_undecided(&kc->log);
}

static int kvs_exec(const struct wl *wl, struct wl_coord *c, struct remora_tx *tx,
		    const struct wl_input *in, struct wl_result *res)
{
	const struct kvs *k = wl->priv;
	struct kvs_coord *kc = c->priv;
	uint64_t me = wl_txid(c);
	int rc;

	kc->pending = false;
	for (unsigned i = 0; i < in->nkeys; i++) {
		enum remora_access mode = (in->write_mask >> i) & 1 ? REMORA_RW : REMORA_RD;

		rc = remora_tx_stage(tx, KVS_TABLE, in->key[i], mode, &kc->buf[i], &kc->found[i]);
		if (!rc && k->each)
			rc = remora_tx_fetch(tx);
		if (rc)
			return rc;
	}
	if (!k->each) {
		rc = remora_tx_fetch(tx);
		if (rc)
			return rc;
	}
	for (unsigned i = 0; i < in->nkeys; i++) {
		const struct kvs_val *v = &kc->buf[i];

		if (!kc->found[i] || v->key != in->key[i] || v->writer != v->writer2) {
			res->integrity_errors++;
			continue;
		}
		res->seen[i] = v->writer;
		if ((in->write_mask >> i) & 1) {
			struct kvs_val nv = { .writer = me, .prev = v->writer, .key = in->key[i],
					      .ver = v->ver + 1, .writer2 = me };

			rc = remora_tx_write(tx, KVS_TABLE, in->key[i], &nv);
			if (rc)
				return rc;
		}
	}
	if (kc->logging && kc->log.crash_safe && in->write_mask) {
		/* before the commit verbs: if this node dies in them, the outcome is unknown */
		struct hist_txn t;

		kvs_record(&t, in, res, me);
		if (hist_log_pending(&kc->log, &t))
			c->acc[1]++;
		else
			kc->pending = true;
	}
	return 0;
}

/* ---- verify ----------------------------------------------------------------------------- */

struct kvs_scan {
	const struct wl *wl;
	struct remora_worker *w;
	uint64_t *final;       /* writer per key */
	uint64_t bad;          /* records failing their self-check */
	uint64_t bad_key;
	uint64_t locked_key;
	int rc;
};

#define SCAN_BATCH 16

/* Reads keys [at, at+n) in one read-only transaction. */
static int scan_batch(struct remora_worker *w, struct kvs_scan *s, uint64_t at, unsigned n)
{
	struct kvs_val v[SCAN_BATCH];
	bool found[SCAN_BATCH];
	uint64_t keys[SCAN_BATCH];
	int rc;

	for (unsigned i = 0; i < n; i++)
		keys[i] = at + i;
	rc = wl_probe_locks(w, KVS_TABLE, keys, n, v, sizeof(v[0]), found, WL_VERIFY_TIMEOUT_MS);
	if (rc == -ETIMEDOUT)
		s->locked_key = at;
	if (rc)
		return rc;
	for (unsigned i = 0; i < n; i++) {
		if (!found[i] || v[i].key != at + i || v[i].writer != v[i].writer2) {
			if (!s->bad++)
				s->bad_key = at + i;
			s->final[at + i] = UINT64_MAX;
		} else {
			s->final[at + i] = v[i].writer;
		}
	}
	return 0;
}

static void scan_coro(void *arg)
{
	struct kvs_scan *s = arg;
	const struct kvs *k = s->wl->priv;
	struct remora_worker *w = s->w;

	for (uint64_t at = 0; at < k->keys && !s->rc; at += SCAN_BATCH) {
		unsigned n = k->keys - at < SCAN_BATCH ? (unsigned)(k->keys - at) : SCAN_BATCH;

		s->rc = scan_batch(w, s, at, n);
	}
}

/* ", N pending (M committed)": the unfinished commits of killed nodes; or "" */
static const char *pending_note(const struct hist_report *rep, char *buf, size_t len)
{
	if (!rep->pending)
		return "";
	snprintf(buf, len, ", %" PRIu64 " pending (%" PRIu64 " committed)", rep->pending,
		 rep->pending_kept);
	return buf;
}

static int kvs_verify(const struct wl *wl, struct remora_worker *w, const int64_t *acc, char *msg,
		      size_t msglen)
{
	const struct kvs *k = wl->priv;
	struct kvs_scan s = { .wl = wl, .w = w };
	struct hist_set hs = { 0 };
	struct hist_report rep;
	char note[WL_LOCK_NOTE_LEN];
	int rc;

	if (acc[0]) {
		snprintf(msg, msglen, "%" PRId64 " committed transactions read a torn or misplaced "
			 "value", acc[0]);
		return 1;
	}
	if (hist_lost_msg(acc[1], msg, msglen))
		return 1;
	s.final = calloc(k->keys, sizeof(*s.final));
	if (!s.final)
		return -ENOMEM;
	rc = wl_read_back(w, scan_coro, &s, &s.rc, &s.locked_key, SCAN_BATCH, msg, msglen);
	if (rc)
		goto free_final;
	if (s.bad) {
		snprintf(msg, msglen, "%" PRIu64 " records fail their self-check after the run "
			 "(first: key %" PRIu64 ")", s.bad, s.bad_key);
		rc = 1;
		goto free_final;
	}
	if (!k->history) {
		snprintf(msg, msglen, "all %" PRIu64 " records intact", k->keys);
		goto free_final;
	}
	rc = hist_set_load_dir(&hs, k->history, msg, msglen);
	if (rc)
		goto free_set;
	/* --isolation si: the history must be snapshot isolation only */
	rc = wl->si ? hist_check_si(&hs, s.final, k->keys, &rep) :
		      hist_check(&hs, s.final, k->keys, &rep);
	if (rc >= 0)
		snprintf(msg, msglen, "%" PRIu64 " transactions, %" PRIu64 " writes, edges wr %"
			 PRIu64 " ww %" PRIu64 " rw %" PRIu64 "%s: %s", rep.txns, rep.writes,
			 rep.edges_wr, rep.edges_ww, rep.edges_rw,
			 pending_note(&rep, note, sizeof(note)), rep.msg);
free_set:
	hist_set_free(&hs);
free_final:
	free(s.final);
	return rc;
}

const struct wl_desc wl_kvs = {
	.name = "kvs",
	.summary = "LOTUS KVS microbenchmark: 8 B keys, 40 B values, ReadOne / UpdateOne",
	.source = "LOTUS (arXiv 2025) section 8.1; Pandora (EDBT'25) micro",
	.knobs = kvs_knobs,
	.ntypes = 2,
	.type_names = { "ReadOne", "UpdateOne" },
	.acc_names = { "integrity_errors", "history_lost" },
	.init = kvs_init,
	.fini = kvs_fini,
	.prepare = kvs_prepare,
	.tables = kvs_tables,
	.load_count = kvs_load_count,
	.load = kvs_load,
	.coord_init = kvs_coord_init,
	.coord_fini = kvs_coord_fini,
	.gen = kvs_gen,
	.tx_flags = kvs_tx_flags,
	.exec = kvs_exec,
	.commit = kvs_commit,
	.undecided = kvs_undecided,
	.verify = kvs_verify,
};
