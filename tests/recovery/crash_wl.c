/* SPDX-License-Identifier: MIT */
/*
 * The workload side of the crash-consistency test (tests/recovery/crash.c drives it):
 *
 *   crash_wl setup --workload W [params]     format (W's tables + a witness table), load
 *   crash_wl run --cn N --ack FILE [params]   compute node N: transactions until killed
 *   crash_wl check --ack-dir D --state FILE   after recovery: are the acknowledged commits
 *                                             there, and does W's invariant hold?
 *
 * Every transaction of coordinator g also increments g's witness record W[g] (a table only
 * g writes). Before its commit, the coordinator records (new W[g], what the transaction
 * changes) in its ack file, and after commit returned 0 it records W[g] as acknowledged. The
 * ack file is a MAP_SHARED file outside the pools: a SIGKILL loses none of its stores, and a
 * simulated power failure of the pools does not touch it (it stands for the application's
 * own record of what it was told). The check then knows, for every coordinator, which of
 * its transactions survived (those with n <= W[g]); it demands:
 *
 *   acked[g] <= W[g] <= last started[g]   every acknowledged commit is there, nothing more
 *   W[g] >= W[g] at the previous check     nothing earlier was lost
 *   smallbank  total balance == loaded + deltas of exactly the surviving transactions
 *   kvs        every record intact, sum of per-key versions == writes of the survivors
 *   insdel     (pandora) coordinator g's keys are exactly the ones its survivors left:
 *              each transaction inserts key (g, n mod 16) and deletes (g, n-2 mod 16)
 *
 * State between checks (W[g] and the totals so far) lives in --state FILE.
 */
#include <errno.h>
#include <limits.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <remora/cluster.h>
#include <remora/params.h>
#include <remora/sched.h>
#include <remora/tx.h>

#include "workload.h"

#define WIT_TABLE 30u
#define INSDEL_TABLE 29u
#define INSDEL_KEYS 16u
#define ACK_MAGIC UINT64_C(0x4b434148534152) /* "RASHACK" */
#define ACK_MAX_ENT (1u << 18)
#define MAX_COORDS 256u

struct wit_val {
	uint64_t n; /* transactions of this coordinator that committed */
	uint64_t g;
};

struct insdel_val {
	uint64_t g;
	uint64_t n;
};

/* ---- ack files ----------------------------------------------------------------------------- */

struct ack_hdr {
	uint64_t magic;
	uint32_t ncoords;
	uint32_t max_ent;
	uint64_t integrity_errors; /* values a committed transaction saw torn */
	uint64_t _pad;
};

struct ack_coord {
	uint64_t nent;  /* entries started (the last may not have committed) */
	uint64_t acked; /* witness value of the last transaction whose commit returned 0 */
	uint64_t _pad[2];
};

struct ack_ent {
	uint64_t n;    /* the witness value this transaction writes */
	int64_t delta; /* smallbank: change of the bank's total; kvs: records written */
};

struct ack {
	struct ack_hdr *h;
	struct ack_coord *c;
	struct ack_ent *e; /* ncoords x max_ent */
	size_t bytes;
};

static size_t ack_bytes(unsigned ncoords)
{
	return sizeof(struct ack_hdr) + ncoords * sizeof(struct ack_coord) +
	       (size_t)ncoords * ACK_MAX_ENT * sizeof(struct ack_ent);
}

/*
 * create: a fresh file is built under "<path>.new" and renamed over path once its header is
 * set, so a compute node killed while starting leaves the previous iteration's file (whose
 * bounds still hold) or none, never a header of zeros the check cannot read.
 */
static int ack_map(const char *path, unsigned ncoords, bool create, struct ack *a)
{
	char tmp[PATH_MAX];
	int fd;
	void *p;

	if ((size_t)snprintf(tmp, sizeof(tmp), "%s.new", path) >= sizeof(tmp))
		return -ENAMETOOLONG;
	fd = open(create ? tmp : path, create ? O_RDWR | O_CREAT | O_TRUNC : O_RDONLY, 0600);
	if (fd < 0)
		return -errno;
	a->bytes = ack_bytes(ncoords);
	if (create && ftruncate(fd, (off_t)a->bytes)) {
		close(fd);
		return -errno;
	}
	p = mmap(NULL, a->bytes, create ? PROT_READ | PROT_WRITE : PROT_READ, MAP_SHARED, fd, 0);
	close(fd);
	if (p == MAP_FAILED)
		return -errno;
	a->h = p;
	a->c = (void *)(a->h + 1);
	a->e = (void *)(a->c + ncoords);
	if (create) {
		a->h->ncoords = ncoords;
		a->h->max_ent = ACK_MAX_ENT;
		__atomic_store_n(&a->h->magic, ACK_MAGIC, __ATOMIC_RELEASE);
		if (rename(tmp, path)) {
			munmap(p, a->bytes);
			return -errno;
		}
	} else if (a->h->magic != ACK_MAGIC || a->h->ncoords != ncoords) {
		munmap(p, a->bytes);
		return -EINVAL;
	}
	return 0;
}

/* ---- options ------------------------------------------------------------------------------ */

struct opts {
	const char *mode;
	const char *workload;
	const char *ack;
	const char *state;
	const char *records; /* smallbank accounts / kvs keys */
	unsigned cn;
	double seconds;
	struct remora_params *p;
	unsigned n_cn, n_mn, threads, coros, ncoords;
	const char *protocol;
};

static int usage(void)
{
	fprintf(stderr, "usage: crash_wl setup|run|check --workload W [--cn N] [--ack FILE|DIR] "
			"[--state FILE] [--seconds S] [--config F] [--<param> V...]\n");
	return 2;
}

static int parse(int argc, char **argv, struct opts *o)
{
	const char *config = NULL;
	int i = 2;

	memset(o, 0, sizeof(*o));
	if (argc < 2)
		return usage();
	o->mode = argv[1];
	o->workload = "smallbank";
	o->seconds = 1e9;
	if (remora_params_create(&o->p))
		return 1;
	while (i < argc) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		int rc;

		if (!strcmp(a, "--workload") && v) {
			o->workload = v;
		} else if (!strcmp(a, "--ack") && v) {
			o->ack = v;
		} else if (!strcmp(a, "--state") && v) {
			o->state = v;
		} else if (!strcmp(a, "--records") && v) {
			o->records = v;
		} else if (!strcmp(a, "--cn") && v) {
			o->cn = (unsigned)strtoul(v, NULL, 10);
		} else if (!strcmp(a, "--seconds") && v) {
			o->seconds = strtod(v, NULL);
		} else if (!strcmp(a, "--config") && v) {
			config = v;
		} else {
			rc = remora_params_parse_flag(o->p, argc, argv, &i);
			if (rc == 1)
				continue;
			fprintf(stderr, "crash_wl: bad option '%s' %s\n", a,
				rc ? remora_params_errmsg(o->p) : "");
			return 2;
		}
		i += 2;
	}
	if ((config && remora_params_load_file(o->p, config)) ||
	    remora_params_load_env(o->p, NULL) || remora_params_check(o->p)) {
		fprintf(stderr, "crash_wl: %s\n", remora_params_errmsg(o->p));
		return 2;
	}
	o->n_cn = remora_params_cn_count(o->p);
	o->n_mn = remora_params_mn_count(o->p);
	o->threads = (unsigned)remora_params_int(o->p, REMORA_P_THREADS);
	o->coros = (unsigned)remora_params_int(o->p, REMORA_P_COROS);
	o->ncoords = o->threads * o->coros;
	o->protocol = remora_params_str(o->p, REMORA_P_PROTOCOL);
	if (o->n_cn * o->ncoords > MAX_COORDS) {
		fprintf(stderr, "crash_wl: at most %u coordinators\n", MAX_COORDS);
		return 2;
	}
	return 0;
}

/* ---- workload ----------------------------------------------------------------------------- */

static bool is_insdel(const struct opts *o)
{
	return !strcmp(o->workload, "insdel");
}

static int wl_open(const struct opts *o, struct wl *wl)
{
	const struct wl_desc *d;
	struct wl_args args = { 0 };

	memset(wl, 0, sizeof(*wl));
	if (is_insdel(o))
		return 0;
	d = wl_find(o->workload);
	if (!d) {
		fprintf(stderr, "crash_wl: unknown workload %s\n", o->workload);
		return -EINVAL;
	}
	/* Small and hot: every crash catches transactions on shared records. */
	if (!strcmp(o->workload, "smallbank"))
		wl_args_set(&args, "accounts", o->records ? o->records : "1000");
	if (!strcmp(o->workload, "kvs")) {
		wl_args_set(&args, "keys", o->records ? o->records : "2000");
		wl_args_set(&args, "txn-keys", "2-4");
	}
	if (wl_setup(wl, d, &args, 7, o->n_cn * o->ncoords)) {
		fprintf(stderr, "crash_wl: %s\n", wl->err);
		return -EINVAL;
	}
	return 0;
}

static unsigned tables(const struct opts *o, const struct wl *wl, struct remora_table_def *defs)
{
	unsigned n = is_insdel(o) ? 0 : wl->desc->tables(wl, defs);

	defs[n++] = (struct remora_table_def){ .name = "crash_witness", .id = WIT_TABLE,
					       .value_size = sizeof(struct wit_val),
					       .max_records = MAX_COORDS };
	if (is_insdel(o))
		defs[n++] = (struct remora_table_def){ .name = "crash_insdel", .id = INSDEL_TABLE,
						       .value_size = sizeof(struct insdel_val),
						       .max_records = MAX_COORDS * INSDEL_KEYS };
	return n;
}

static int open_db(const struct opts *o, struct remora_cluster *cl, int cn, unsigned workers,
		   unsigned coros, struct remora_db **db)
{
	struct remora_db_cfg cfg = {
		.size = sizeof(cfg), .tp = remora_cluster_transport(cl), .protocol = o->protocol,
		.cn_id = (uint16_t)(cn < 0 ? 0 : cn), .n_mn = (uint16_t)o->n_mn,
		.coords_per_worker = (uint16_t)coros, .workers = workers,
	};
	char ncn[16];
	int rc;

	/* lotus spreads its lock shards over the run's compute nodes (cn < 0: setup, check) */
	snprintf(ncn, sizeof(ncn), "%u", cn < 0 ? 1u : o->n_cn);
	setenv("REMORA_CN", ncn, 1);
	rc = remora_db_open(&cfg, db);
	if (rc)
		fprintf(stderr, "crash_wl: db open: %s\n", remora_db_errmsg(NULL));
	return rc;
}

static int join(const struct opts *o, int cn, struct remora_cluster **cl)
{
	char err[400];
	int rc = remora_cluster_join(o->p, cn, cl, err, sizeof(err));

	if (rc)
		fprintf(stderr, "crash_wl: join as %d: %s\n", cn, err);
	return rc;
}

/* ---- setup -------------------------------------------------------------------------------- */

static int do_setup(const struct opts *o)
{
	struct remora_table_def defs[REMORA_MAX_TABLES];
	struct remora_db_format_cfg f = {
		.size = sizeof(f), .n_mn = (uint16_t)o->n_mn, .protocol = o->protocol,
		.replicas = (uint16_t)remora_params_int(o->p, REMORA_P_REPLICAS),
		.max_cn = (uint16_t)o->n_cn, .coords_per_cn = (uint16_t)o->ncoords,
		.log_slot_bytes = 8192,
	};
	struct remora_cluster *cl;
	struct remora_worker *w;
	struct remora_db *db;
	struct wl wl;
	int rc;

	rc = wl_open(o, &wl);
	if (rc)
		return rc;
	f.tables = defs;
	f.ntables = tables(o, &wl, defs);
	rc = join(o, -1, &cl);
	if (rc)
		return rc;
	rc = remora_db_format_ex(remora_cluster_transport(cl), &f);
	if (rc) {
		fprintf(stderr, "crash_wl: format: %s\n", remora_db_errmsg(NULL));
		goto leave;
	}
	rc = open_db(o, cl, -1, 1, 1, &db);
	if (rc)
		goto leave;
	rc = remora_worker_create(db, 0, &w);
	if (rc)
		goto close;
	if (!is_insdel(o))
		rc = wl_load_range(&wl, w, 0, wl.desc->load_count(&wl), NULL, NULL);
	for (uint64_t g = 0; !rc && g < o->n_cn * o->ncoords; g++)
		rc = remora_db_load(w, WIT_TABLE, g, &(struct wit_val){ .n = 0, .g = g });
	if (!rc)
		rc = remora_db_load_flush(w);
	if (rc)
		fprintf(stderr, "crash_wl: load: %s (%s)\n", remora_strerror(rc),
			remora_worker_errmsg(w));
	remora_worker_destroy(w);
close:
	remora_db_close(db);
leave:
	remora_cluster_leave(cl);
	if (!is_insdel(o))
		wl_teardown(&wl);
	return rc;
}

/* ---- run ---------------------------------------------------------------------------------- */

struct co {
	const struct opts *o;
	const struct wl *wl;
	struct wl_coord c;
	struct ack *ack;
	unsigned local;  /* index in this node's ack file */
	uint64_t deadline_ns;
	int rc;
};

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static uint64_t insdel_key(uint64_t g, uint64_t n)
{
	return g << 32 | (n % INSDEL_KEYS);
}

/* insdel: insert (g, n), delete (g, n - 2); both keys cycle through INSDEL_KEYS slots. */
static int insdel_exec(struct co *k, struct remora_tx *tx, uint64_t n)
{
	uint64_t g = k->c.global_index;
	struct insdel_val v = { .g = g, .n = n };
	int rc = remora_tx_insert(tx, INSDEL_TABLE, insdel_key(g, n), &v);

	if (rc == 0 && n > 2)
		rc = remora_tx_delete(tx, INSDEL_TABLE, insdel_key(g, n - 2));
	return rc == -REMORA_EEXIST || rc == -REMORA_ENOTFOUND ? -EPROTO : rc;
}

/* One attempt: the workload's part, the witness, the intent record, the commit. */
static int attempt(struct co *k, const struct wl_input *in, uint64_t idx, uint64_t *n_out)
{
	struct ack_ent *e = &k->ack->e[(size_t)k->local * ACK_MAX_ENT + idx];
	struct ack_coord *ac = &k->ack->c[k->local];
	struct wl_result res = { 0 };
	struct remora_tx *tx;
	struct wit_val wv;
	int64_t delta = 0;
	int rc;

	k->c.seq++;
	rc = remora_tx_begin(k->c.w, 0, &tx);
	if (rc)
		return rc;
	/*
	 * The witness goes last (insdel needs it first), so a commit cut after its first WRITE
	 * has changed workload data, not just the witness.
	 */
	if (is_insdel(k->o)) {
		rc = remora_tx_read_for_update(tx, WIT_TABLE, k->c.global_index, &wv);
		if (rc == 0)
			rc = insdel_exec(k, tx, wv.n + 1);
	} else {
		rc = k->wl->desc->exec(k->wl, &k->c, tx, in, &res);
		if (rc == 0)
			rc = remora_tx_read_for_update(tx, WIT_TABLE, k->c.global_index, &wv);
	}
	if (rc == 0 && wv.g != k->c.global_index)
		rc = -EPROTO;
	if (rc == WL_USER_ABORT) {
		remora_tx_abort(tx);
		return WL_USER_ABORT;
	}
	if (rc == WL_RETRY)
		rc = -REMORA_EABORT;
	if (rc == 0) {
		wv.n++;
		rc = remora_tx_write(tx, WIT_TABLE, k->c.global_index, &wv);
	}
	if (rc) {
		remora_tx_abort(tx);
		return rc;
	}
	if (!strcmp(k->o->workload, "smallbank"))
		delta = res.delta;
	else if (!strcmp(k->o->workload, "kvs"))
		delta = __builtin_popcount(in->write_mask & ((1u << in->nkeys) - 1));
	/* The intent first: a commit that returns may be killed before it is noted. */
	e->n = wv.n;
	e->delta = delta;
	__atomic_store_n(&ac->nent, idx + 1, __ATOMIC_RELEASE);
	rc = remora_tx_commit(tx);
	if (rc == 0 && res.integrity_errors)
		__atomic_add_fetch(&k->ack->h->integrity_errors, res.integrity_errors,
				   __ATOMIC_RELAXED);
	if (rc == 0)
		*n_out = wv.n;
	return rc;
}

static void co_main(void *arg)
{
	struct co *k = arg;
	struct ack_coord *ac = &k->ack->c[k->local];
	struct wl_input in = { 0 };

	for (uint64_t idx = 0; idx < ACK_MAX_ENT && now_ns() < k->deadline_ns; idx++) {
		uint64_t n = 0;
		int rc;

		if (!is_insdel(k->o))
			k->wl->desc->gen(k->wl, &k->c, &in);
		do
			rc = attempt(k, &in, idx, &n);
		while (rc == -REMORA_EABORT && now_ns() < k->deadline_ns);
		if (rc == WL_USER_ABORT || rc == -REMORA_EABORT) {
			idx--; /* nothing committed: the slot is reused */
			continue;
		}
		if (rc) {
			k->rc = rc;
			fprintf(stderr, "crash_wl: coordinator %u: %s (%s)\n", k->c.global_index,
				remora_strerror(rc), remora_worker_errmsg(k->c.w));
			return;
		}
		__atomic_store_n(&ac->acked, n, __ATOMIC_RELEASE);
	}
}

static int do_run(const struct opts *o)
{
	struct remora_cluster *cl;
	struct remora_worker *w;
	struct remora_db *db;
	struct ack ack;
	struct co *cos;
	struct wl wl;
	int rc;

	if (!o->ack || o->threads != 1)
		return usage(); /* one worker thread per compute node keeps the test simple */
	rc = ack_map(o->ack, o->ncoords, true, &ack);
	if (rc) {
		fprintf(stderr, "crash_wl: %s: %s\n", o->ack, strerror(-rc));
		return rc;
	}
	rc = wl_open(o, &wl);
	if (rc)
		return rc;
	rc = join(o, (int)o->cn, &cl);
	if (rc)
		return rc;
	rc = open_db(o, cl, (int)o->cn, 1, o->coros, &db);
	if (rc)
		goto leave;
	rc = remora_worker_create(db, 0, &w);
	cos = calloc(o->coros, sizeof(*cos));
	if (rc || !cos) {
		rc = rc ? rc : -ENOMEM;
		goto close;
	}
	for (unsigned i = 0; i < o->coros && !rc; i++) {
		struct co *k = &cos[i];

		*k = (struct co){ .o = o, .wl = &wl, .ack = &ack, .local = i,
				  .deadline_ns = now_ns() + (uint64_t)(o->seconds * 1e9) };
		wl_coord_prepare(&wl, &k->c, w, (uint16_t)o->cn, 0, (uint16_t)i,
				 o->cn * o->ncoords + i);
		if (!is_insdel(o))
			rc = wl_coord_init(&wl, &k->c);
		if (!rc)
			rc = remora_sched_spawn(remora_worker_sched(w), co_main, k);
	}
	if (!rc)
		rc = remora_sched_run(remora_worker_sched(w));
	for (unsigned i = 0; i < o->coros; i++) {
		rc = rc ? rc : cos[i].rc;
		if (!is_insdel(o) && cos[i].c.priv)
			wl_coord_fini(&wl, &cos[i].c);
	}
	free(cos);
	remora_worker_destroy(w);
close:
	remora_db_close(db);
leave:
	remora_cluster_leave(cl);
	if (!is_insdel(o))
		wl_teardown(&wl);
	return rc;
}

/* ---- check -------------------------------------------------------------------------------- */

struct state {
	uint64_t magic;
	int64_t delta;      /* smallbank: committed deltas so far; kvs: writes so far */
	uint64_t w[MAX_COORDS];
};

static int state_load(const char *path, struct state *s)
{
	FILE *f = fopen(path, "rb");

	memset(s, 0, sizeof(*s));
	if (!f)
		return errno == ENOENT ? 0 : -errno;
	if (fread(s, sizeof(*s), 1, f) != 1)
		memset(s, 0, sizeof(*s));
	fclose(f);
	return 0;
}

static int state_save(const char *path, const struct state *s)
{
	char tmp[512];
	FILE *f;

	snprintf(tmp, sizeof(tmp), "%s.new", path);
	f = fopen(tmp, "wb");
	if (!f)
		return -errno;
	if (fwrite(s, sizeof(*s), 1, f) != 1 || fclose(f))
		return -EIO;
	return rename(tmp, path) ? -errno : 0;
}

struct chk {
	const struct opts *o;
	struct remora_worker *w;
	uint64_t wit[MAX_COORDS];
	int rc;
	char msg[512];
};

static void read_witness(void *arg)
{
	struct chk *c = arg;
	unsigned n = c->o->n_cn * c->o->ncoords;

	for (unsigned g = 0; g < n && !c->rc; g += 16) {
		struct wit_val v[16];
		uint64_t keys[16];
		bool found[16];
		unsigned k = n - g < 16 ? n - g : 16;

		for (unsigned i = 0; i < k; i++)
			keys[i] = g + i;
		c->rc = wl_read_keys(c->w, WIT_TABLE, keys, k, v, sizeof(v[0]), found,
				     WL_VERIFY_TIMEOUT_MS);
		for (unsigned i = 0; !c->rc && i < k; i++) {
			if (!found[i] || v[i].g != g + i) {
				snprintf(c->msg, sizeof(c->msg), "witness %u is missing or corrupt",
					 g + i);
				c->rc = 1;
			}
			c->wit[g + i] = v[i].n;
		}
	}
}

/* Key slot i of a coordinator whose witness is w: live for n = w and n = w - 1 (n >= 1). */
static bool insdel_slot_ok(uint64_t g, uint64_t w, unsigned i, bool found,
			   const struct insdel_val *v)
{
	bool live = (w >= 1 && i == w % INSDEL_KEYS) || (w >= 2 && i == (w - 1) % INSDEL_KEYS);

	if (found != live)
		return false;
	return !live || (v->g == g && v->n % INSDEL_KEYS == i && v->n + 1 >= w && v->n <= w);
}

/* insdel: coordinator g's keys hold exactly what its last two survivors inserted. */
static void read_insdel(void *arg)
{
	struct chk *c = arg;
	unsigned n = c->o->n_cn * c->o->ncoords;

	for (unsigned g = 0; g < n && !c->rc; g++) {
		struct insdel_val v[INSDEL_KEYS];
		uint64_t keys[INSDEL_KEYS], w = c->wit[g];
		bool found[INSDEL_KEYS];

		for (unsigned i = 0; i < INSDEL_KEYS; i++)
			keys[i] = insdel_key(g, i);
		c->rc = wl_read_keys(c->w, INSDEL_TABLE, keys, INSDEL_KEYS, v, sizeof(v[0]), found,
				     WL_VERIFY_TIMEOUT_MS);
		if (c->rc == -ETIMEDOUT) { /* every read aborted: a record left locked or torn */
			snprintf(c->msg, sizeof(c->msg),
				 "insdel: coordinator %u: its keys stay unreadable (a record left "
				 "locked or torn by recovery) for %d ms", g, WL_VERIFY_TIMEOUT_MS);
			c->rc = 1;
		}
		for (unsigned i = 0; !c->rc && i < INSDEL_KEYS; i++) {
			if (insdel_slot_ok(g, w, i, found[i], &v[i]))
				continue;
			snprintf(c->msg, sizeof(c->msg),
				 "insdel: coordinator %u (witness %" PRIu64 "): key slot %u is %s "
				 "(value n=%" PRIu64 ")", g, w, i, found[i] ? "present" : "absent",
				 found[i] ? v[i].n : 0);
			c->rc = 1;
		}
	}
}

/* acknowledged <= witness w <= started, and w did not go back from the last check (prev). */
static int check_coord(unsigned g, uint64_t w, uint64_t prev, const struct ack_coord *ac,
		       const struct ack_ent *e)
{
	uint64_t last = ac->nent ? e[ac->nent - 1].n : prev;

	if (w < prev || w < ac->acked || w > last) {
		fprintf(stderr, "crash_wl check: coordinator %u: witness %" PRIu64 ", but %" PRIu64
			" at the last check, %" PRIu64 " acknowledged, %" PRIu64 " started%s\n", g,
			w, prev, ac->acked, last,
			w < ac->acked ? ": AN ACKNOWLEDGED COMMIT IS LOST" : "");
		return 1;
	}
	if (ac->nent && e[0].n != prev + 1) {
		fprintf(stderr, "crash_wl check: coordinator %u: first transaction %" PRIu64
			" does not follow witness %" PRIu64 "\n", g, e[0].n, prev);
		return 1;
	}
	return 0;
}

/* Matches the witnesses against the ack files; sums the survivors' deltas into *delta. */
static int check_acks(const struct opts *o, const struct chk *c, const struct state *s,
		      int64_t *delta, uint64_t *survivors)
{
	for (unsigned cn = 0; cn < o->n_cn; cn++) {
		char path[512];
		struct ack a;
		int rc;

		snprintf(path, sizeof(path), "%s/ack-cn%u", o->ack, cn);
		rc = ack_map(path, o->ncoords, false, &a);
		if (rc == -ENOENT)
			continue; /* this compute node never started */
		if (rc) {
			fprintf(stderr, "crash_wl check: %s: %s\n", path, strerror(-rc));
			return 1;
		}
		if (a.h->integrity_errors) {
			fprintf(stderr, "crash_wl check: cn %u: %" PRIu64 " committed transactions "
				"read torn or misplaced values\n", cn, a.h->integrity_errors);
			return 1;
		}
		for (unsigned i = 0; i < o->ncoords; i++) {
			unsigned g = cn * o->ncoords + i;
			const struct ack_coord *ac = &a.c[i];
			const struct ack_ent *e = &a.e[(size_t)i * ACK_MAX_ENT];
			uint64_t w = c->wit[g];

			if (check_coord(g, w, s->w[g], ac, e))
				return 1;
			for (uint64_t k = 0; k < ac->nent && e[k].n <= w; k++) {
				*delta += e[k].delta;
				(*survivors)++;
			}
		}
		munmap(a.h, a.bytes);
	}
	return 0;
}

struct kvs_sum {
	uint64_t keys;
	struct remora_worker *w;
	int64_t sum;
	int rc;
};

/* kvs values: {writer, prev, key, ver, writer2}; ver counts the writes of a key. */
static void kvs_versions(void *arg)
{
	struct kvs_sum *s = arg;

	for (uint64_t at = 0; at < s->keys && !s->rc; at += 16) {
		unsigned n = s->keys - at < 16 ? (unsigned)(s->keys - at) : 16;
		uint64_t v[16][5], keys[16];
		bool found[16];

		for (unsigned i = 0; i < n; i++)
			keys[i] = at + i;
		s->rc = wl_read_keys(s->w, 0, keys, n, v, sizeof(v[0]), found,
				     WL_VERIFY_TIMEOUT_MS);
		for (unsigned i = 0; !s->rc && i < n; i++)
			s->sum += found[i] ? (int64_t)v[i][3] : 0;
	}
}

static int verify_workload(const struct opts *o, struct wl *wl, struct chk *c, int64_t delta)
{
	int64_t acc[WL_MAX_ACC] = { 0 };
	struct kvs_sum ks = { .keys = strtoull(o->records ? o->records : "2000", NULL, 10),
			      .w = c->w };
	int rc;

	if (is_insdel(o)) {
		wl_on_worker(c->w, read_insdel, c);
		if (c->rc)
			fprintf(stderr, "crash_wl check: %s\n", c->rc == 1 ? c->msg :
				remora_strerror(c->rc));
		return c->rc ? 1 : 0;
	}
	if (!strcmp(o->workload, "smallbank"))
		acc[0] = delta;
	rc = wl->desc->verify(wl, c->w, acc, c->msg, sizeof(c->msg));
	if (rc) {
		fprintf(stderr, "crash_wl check: %s: %s\n", o->workload, c->msg);
		return 1;
	}
	printf("crash_wl check: %s: %s\n", o->workload, c->msg);
	if (strcmp(o->workload, "kvs"))
		return 0;
	wl_on_worker(c->w, kvs_versions, &ks);
	if (ks.rc || ks.sum != delta) {
		fprintf(stderr, "crash_wl check: kvs: the keys carry %" PRId64 " versions, the "
			"surviving transactions wrote %" PRId64 "%s\n", ks.sum, delta,
			ks.rc ? " (read failed)" : "");
		return 1;
	}
	return 0;
}

static int do_check(const struct opts *o)
{
	struct chk c = { .o = o };
	struct remora_cluster *cl;
	struct remora_db *db;
	uint64_t survivors = 0;
	struct state s;
	int64_t delta;
	struct wl wl;
	int rc, bad = 1;

	if (!o->ack || !o->state)
		return usage();
	if (state_load(o->state, &s) || wl_open(o, &wl))
		return 1;
	if (join(o, -1, &cl))
		goto teardown;
	if (open_db(o, cl, -1, 1, 1, &db))
		goto leave;
	if (remora_worker_create(db, 0, &c.w))
		goto close;
	wl_on_worker(c.w, read_witness, &c);
	if (c.rc) {
		fprintf(stderr, "crash_wl check: %s\n", c.rc == 1 ? c.msg : remora_strerror(c.rc));
		goto worker;
	}
	delta = s.delta;
	if (check_acks(o, &c, &s, &delta, &survivors))
		goto worker;
	if (verify_workload(o, &wl, &c, delta))
		goto worker;
	s.delta = delta;
	memcpy(s.w, c.wit, sizeof(s.w));
	rc = state_save(o->state, &s);
	if (rc)
		fprintf(stderr, "crash_wl check: %s: %s\n", o->state, strerror(-rc));
	else
		printf("crash_wl check: ok: %" PRIu64
		       " transactions survived since the last check\n", survivors);
	bad = rc != 0;
worker:
	remora_worker_destroy(c.w);
close:
	remora_db_close(db);
leave:
	remora_cluster_leave(cl);
teardown:
	if (!is_insdel(o))
		wl_teardown(&wl);
	return bad;
}

int main(int argc, char **argv)
{
	struct opts o;
	int rc = parse(argc, argv, &o);

	if (rc)
		return rc;
	if (!strcmp(o.mode, "setup"))
		rc = do_setup(&o) ? 1 : 0;
	else if (!strcmp(o.mode, "run"))
		rc = do_run(&o) ? 1 : 0;
	else if (!strcmp(o.mode, "check"))
		rc = do_check(&o);
	else
		rc = usage();
	remora_params_destroy(o.p);
	return rc;
}
