/* SPDX-License-Identifier: MIT */
/*
 * `remora verbs`: a perftest-like micro-benchmark of the verbs transport on any backend, with
 * no cluster: it opens a transport, creates a private pool in this process (unique cluster
 * name, removed at exit), registers and attaches it, and measures READ, WRITE, CAS, FAA and
 * masked-CAS: throughput, latency per batch, and the verbs the transport counted.
 *
 * --raw replays the very same accesses (same PRNG streams, same addresses, same batch counts
 * per stream) with plain memcpy and CPU atomics on the pool's local mapping, so the cost of
 * the API is printed as a ratio measured in the same run.
 *
 * --coro-switch measures the coroutine context switch of runtime/sched instead.
 */
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <remora/sched.h>
#include <remora/transport.h>

#include "benchutil.h"
#include "cli.h"
#include "cmd.h"
#include "transport/cost.h" /* the profile's service rates, printed next to measured ones */
#include "utilization.h"
#include "verbs_rpc.h"

#define VERBS_MAX_THREADS 256
#define VERBS_MAX_COROS 4096
#define VERBS_MAX_BATCH 4096
#define VERBS_MAX_LOCAL (UINT64_C(1) << 30) /* local buffers per thread */
#define VERBS_SWITCH_ROUNDS 5

#define ALL_OPS ((1u << REMORA_OP__COUNT) - 1)

struct verbs_opts {
	const char *backend; /* NULL: $REMORA_BACKEND, else shm */
	const char *profile; /* NULL: $REMORA_PROFILE, else none */
	uint64_t mn_scale;   /* 0: $REMORA_MN_SCALE, else 1 */
	unsigned ops;        /* bit per enum remora_op */
	bool ops_all;
	uint64_t size;
	uint64_t pool_size;
	bool seq;
	unsigned batch, threads, coros;
	double duration;
	bool duration_set;
	uint64_t iters; /* batches per stream; 0: run for duration */
	double warmup;
	bool raw, coro_switch, prefetch;
	bool floor; /* with raw: the contract's floor too */
	bool rpc; /* --op rpc: verbs_rpc.c */
	const char *json;
};

enum phase { PH_WARMUP, PH_MEASURE, PH_STOP };

/* One access stream: what one coroutine (or the plain loop) issues, replayable by --raw. */
struct stream {
	struct bu_rng rng;
	uint64_t cursor; /* seq: next slot */
	uint64_t first;  /* seq: where this stream starts */
	uint64_t batches;
};

struct bench;
static void env_backend_params(struct bench *b);

struct worker {
	struct bench *b;
	unsigned id;
	pthread_t tid;
	struct remora_chan *ch;
	struct stream *streams; /* coros of them */
	uint8_t *buf;           /* batch * stride bytes: READ destinations, WRITE sources */
	uint64_t *old;          /* batch atomics' old values */
	int32_t *status;        /* batch completion statuses (the --floor pass) */
	uint64_t floor_verbs, floor_bytes, floor_refused; /* its counters */
	uint64_t floor_doorbells;
	uint64_t floor_lane;    /* its fence handshake (backends/host/fence.h) */
	struct bu_hist *hist;   /* ticks per batch */
	struct remora_counters cnt; /* measured phase only */
	uint64_t t_start, t_end;
	uint64_t cpu_ns; /* thread CPU time of the measured pass */
	bool measuring;
	int err;
};

struct bench {
	const struct verbs_opts *o;
	struct remora_transport *tp;
	struct remora_transport_cfg cfg; /* kept to remove the cluster's segments at the end */
	char cluster[48];
	struct remora_kv bparams[8];  /* the backend's parameters, from REMORA_<NAME> */
	struct remora_pool *pool;
	struct remora_caps caps;
	uint8_t *base;    /* local mapping of the pool (for --raw) */
	uint32_t key;
	uint64_t pool_bytes;
	uint64_t stride;  /* distance between two addresses a stream may use */
	uint64_t nslots;  /* pool_bytes / stride */
	enum remora_op op;
	bool raw;         /* this pass replays with CPU loads/stores/atomics */
	bool floor;       /* ... plus what the API contract requires of each verb */
	uint64_t floor_epoch; /* the fence epoch the floor pass checks, never moved */
	int phase;        /* enum phase, atomic */
	unsigned ready;   /* workers in the measured pass, atomic */
	struct worker *w;
	uint64_t *replay; /* batches per stream of the API pass, [thread * coros + coro] */
};

struct op_result {
	enum remora_op op;
	uint64_t verbs;
	double seconds;   /* wall time of the measured pass */
	double busy_ns;   /* sum over threads of their CPU time in the measured pass */
	struct bu_hist *hist;
	struct remora_counters cnt;
	struct ut_report util; /* modelled MN busy time and CPU over the measured pass */
	bool have_raw;
	double raw_busy_ns;
	uint64_t raw_verbs;
	bool have_floor;
	double floor_busy_ns;
	uint64_t floor_verbs;
};

static volatile sig_atomic_t interrupted;
static int *stop_phase; /* the running pass's phase, for the signal handler */

static void on_signal(int sig)
{
	(void)sig;
	interrupted = 1;
	if (stop_phase)
		__atomic_store_n(stop_phase, PH_STOP, __ATOMIC_RELAXED);
}

/* ---- options --------------------------------------------------------------------------- */

static int bad_flag(const char *flag, const char *fmt, const char *val)
{
	fprintf(stderr, "remora verbs: %s: ", flag);
	fprintf(stderr, fmt, val);
	fputc('\n', stderr);
	return 2;
}

static int parse_op(const char *v, struct verbs_opts *o)
{
	static const char *const names[] = { "read", "write", "cas", "faa", "mcas" };

	o->rpc = strcmp(v, "rpc") == 0;
	if (o->rpc)
		return 0;
	if (strcmp(v, "all") == 0) {
		o->ops = ALL_OPS;
		o->ops_all = true;
		return 0;
	}
	for (unsigned i = 0; i < REMORA_OP__COUNT; i++) {
		if (strcmp(v, names[i]) == 0) {
			o->ops = 1u << i;
			o->ops_all = false;
			return 0;
		}
	}
	return -1;
}

static bool backend_known(const char *name)
{
	for (const char *const *n = remora_backend_names(); n && *n; n++)
		if (strcmp(*n, name) == 0)
			return true;
	return false;
}

static void list_backends(char *buf, size_t len)
{
	size_t used = 0;

	buf[0] = '\0';
	for (const char *const *n = remora_backend_names(); n && *n && used < len; n++)
		used += (size_t)snprintf(buf + used, len - used, "%s%s", used ? ", " : "", *n);
}

/* Handlers of the options whose value needs more than a range check (struct cli_opt). */

static int opt_backend(void *opts, const char *cmd, const char *flag, const char *v)
{
	char list[128], msg[200];

	(void)cmd;
	if (!backend_known(v)) {
		list_backends(list, sizeof(list));
		snprintf(msg, sizeof(msg), "unknown backend '%s' (built in: %s)", v, list);
		return bad_flag(flag, "%s", msg);
	}
	((struct verbs_opts *)opts)->backend = v;
	return 0;
}

static int opt_profile(void *opts, const char *cmd, const char *flag, const char *v)
{
	(void)cmd;
	if (!rt_cost_profile_find(v))
		return bad_flag(flag, "unknown profile '%s' (none, cxl, cx3, cx4, cx5, cx6)", v);
	((struct verbs_opts *)opts)->profile = v;
	return 0;
}

static int opt_op(void *opts, const char *cmd, const char *flag, const char *v)
{
	(void)cmd;
	if (parse_op(v, opts))
		return bad_flag(flag, "unknown op '%s' (read, write, cas, faa, mcas, all, rpc)", v);
	return 0;
}

static int opt_pattern(void *opts, const char *cmd, const char *flag, const char *v)
{
	(void)cmd;
	if (strcmp(v, "random") && strcmp(v, "seq"))
		return bad_flag(flag, "unknown pattern '%s' (random, seq)", v);
	((struct verbs_opts *)opts)->seq = strcmp(v, "seq") == 0;
	return 0;
}

static int opt_duration(void *opts, const char *cmd, const char *flag, const char *v)
{
	struct verbs_opts *o = opts;
	char err[160];

	(void)cmd;
	if (bu_parse_seconds(v, &o->duration, err, sizeof(err)))
		return bad_flag(flag, "%s", err);
	if (!(o->duration > 0))
		return bad_flag(flag, "'%s' must be more than 0", v);
	o->duration_set = true;
	return 0;
}

static int opt_json(void *opts, const char *cmd, const char *flag, const char *v)
{
	if (!*v)
		return bad_flag(flag, "%s", "needs a file name");
	if (bu_check_out_path(cmd, flag, v))
		return 2;
	((struct verbs_opts *)opts)->json = v;
	return 0;
}

static const struct cli_opt verbs_opt_table[] = {
	CLI_OPT_FN("--backend", "NAME", opt_backend,
		   "transport backend (default: $REMORA_BACKEND, else shm); its own\n"
		   "parameters come from REMORA_<NAME> (e.g. REMORA_RDMA_DEVICE)"),
	CLI_OPT_FN("--profile", "P", opt_profile,
		   "NIC cost model: none | cxl | cx3 | cx4 | cx5 | cx6 (default: $REMORA_PROFILE,\n"
		   "else none)"),
	CLI_OPT_U64("--mn-scale", "K", struct verbs_opts, mn_scale, 1, REMORA_MN_SCALE_MAX,
		    "divide the profile's service rates by K, round trips kept\n"
		    "(default: $REMORA_MN_SCALE, else 1)"),
	CLI_OPT_FN("--op", "OP", opt_op,
		   "read | write | cas | faa | mcas | all (default: all the backend\n"
		   "supports); rpc: compute-node RPC round trip beside a READ's"),
	CLI_OPT_SIZE("--size", "BYTES", struct verbs_opts, size, 0, UINT32_MAX,
		     "READ/WRITE payload, K/M/G suffixes (default: 8)"),
	CLI_OPT_SIZE("--pool-size", "BYTES", struct verbs_opts, pool_size, 4096,
		     REMORA_GADDR_OFF_MASK, "pool size, K/M/G suffixes (default: 1G)"),
	CLI_OPT_FN("--pattern", "P", opt_pattern, "random | seq addresses (default: random)"),
	CLI_OPT_UNSIGNED("--batch", "N", struct verbs_opts, batch, 1, VERBS_MAX_BATCH,
			 "verbs per doorbell (default: 1)"),
	CLI_OPT_UNSIGNED("--threads", "T", struct verbs_opts, threads, 1, VERBS_MAX_THREADS,
			 "worker threads, one channel each (default: 1)"),
	CLI_OPT_UNSIGNED("--coros", "C", struct verbs_opts, coros, 1, VERBS_MAX_COROS,
			 "coroutines per thread, each keeping one batch in flight\n"
			 "(default: 1 = a plain loop on remora_exec, no scheduler)"),
	CLI_OPT_FN("--duration", "SEC", opt_duration,
		   "measured time per op (default: 2; accepts ms/s/m)"),
	CLI_OPT_U64("--iters", "N", struct verbs_opts, iters, 1, UINT64_C(1) << 40,
		    "instead of --duration: N batches per coroutine"),
	CLI_OPT_SECONDS("--warmup", "SEC", struct verbs_opts, warmup,
			"unmeasured warm-up per op (default: 0.2; 0 disables)"),
	CLI_OPT_FLAG("--raw", struct verbs_opts, raw,
		     "also replay the same accesses with memcpy and CPU atomics on the\n"
		     "pool's local mapping and print api/raw thread CPU time per verb"),
	CLI_OPT_FLAG("--floor", struct verbs_opts, floor,
		     "with --raw: a third replay that adds to each raw access only what\n"
		     "the API contract requires (the region check and a completion\n"
		     "status; the fence handshake and the counters once per batch) and\n"
		     "prints floor/raw, the api/raw below which no implementation of\n"
		     "the contract can go"),
	CLI_OPT_FLAG("--prefetch-yield", struct verbs_opts, prefetch,
		     "with --coros > 1: each coroutine prefetches its verbs' lines and\n"
		     "yields before they run (remora_sched_set_prefetch); --raw then\n"
		     "replays with the same prefetch one turn ahead"),
	CLI_OPT_FLAG("--coro-switch", struct verbs_opts, coro_switch,
		     "measure the coroutine switch (remora_yield between two\n"
		     "coroutines) instead of verbs; --iters sets switches per round"),
	CLI_OPT_FN("--json", "FILE", opt_json, "also write the results as JSON"),
	{ 0 },
};

static void verbs_more_help(FILE *f)
{
	fputs("\n"
	      "Latency is per batch: from posting a batch to its last completion, as the issuing\n"
	      "coroutine sees it (with --batch 1, per verb), timed on one batch in 16. Throughput\n"
	      "counts verbs over the wall time of the measured phase, all threads together. The pool\n"
	      "is prefaulted before measuring.\n"
	      "Exit status: 0 done, 1 run-time failure, 2 bad option.\n",
	      f);
}

static const struct cli_cmd verbs_cmd = {
	.name = "verbs",
	.usage = "usage: remora verbs [options]\n"
		 "\n"
		 "Benchmarks one-sided verbs on a private in-process pool (no cluster needed).\n",
	.opts = verbs_opt_table,
	.more_help = verbs_more_help,
};

/* 0, 1 after printing the help, or 2 after a one-line error. */
static int parse_opts(int argc, char **argv, struct verbs_opts *o)
{
	int i = 1, rc;

	*o = (struct verbs_opts){ .ops = ALL_OPS, .ops_all = true, .size = 8,
				  .pool_size = UINT64_C(1) << 30, .batch = 1, .threads = 1,
				  .coros = 1, .duration = 2.0, .warmup = 0.2 };
	rc = cli_parse(&verbs_cmd, o, NULL, argc, argv, &i);
	if (rc)
		return rc;
	if (o->duration_set && o->iters)
		return bad_flag("--iters", "%s", "conflicts with --duration (give one)");
	if (o->size > o->pool_size)
		return bad_flag("--size", "%s", "larger than --pool-size");
	if (o->floor && !o->raw)
		return bad_flag("--floor", "%s", "needs --raw");
	return 0;
}

/* ---- one pass: API or raw -------------------------------------------------------------- */

_Static_assert(sizeof(struct remora_counters) % sizeof(uint64_t) == 0,
	       "remora_counters holds only uint64_t fields");

/* dst += src, field by field (every field is a uint64_t). */
static void counters_add(struct remora_counters *dst, const struct remora_counters *src)
{
	uint64_t d[sizeof(*dst) / sizeof(uint64_t)], sv[sizeof(*dst) / sizeof(uint64_t)];

	memcpy(d, dst, sizeof(d));
	memcpy(sv, src, sizeof(sv));
	for (size_t i = 0; i < sizeof(d) / sizeof(d[0]); i++)
		d[i] += sv[i];
	memcpy(dst, d, sizeof(d));
}

static inline int phase_get(struct bench *b)
{
	return __atomic_load_n(&b->phase, __ATOMIC_RELAXED);
}

/* Streams are numbered across threads so that seq streams start at distinct places. */
static void stream_init(struct bench *b, struct stream *s, unsigned gid, uint64_t seed)
{
	unsigned nstreams = b->o->threads * b->o->coros;

	bu_rng_seed(&s->rng, seed ^ ((uint64_t)gid * UINT64_C(0xd1b54a32d192ed03)));
	s->first = (uint64_t)((unsigned __int128)b->nslots * gid / nstreams);
	s->cursor = s->first;
	s->batches = 0;
}

static inline uint64_t stream_next(struct bench *b, struct stream *s)
{
	uint64_t slot;

	if (!b->o->seq)
		return bu_rng_below(&s->rng, b->nslots) * b->stride;
	slot = s->cursor;
	s->cursor = slot + 1 == b->nslots ? 0 : slot + 1;
	return slot * b->stride;
}

static void wrs_init(struct bench *b, struct worker *w, struct remora_wr *wrs)
{
	for (unsigned i = 0; i < b->o->batch; i++) {
		struct remora_wr *wr = &wrs[i];

		memset(wr, 0, sizeof(*wr));
		wr->op = (uint8_t)b->op;
		wr->rkey = b->key;
		switch (b->op) {
		case REMORA_OP_READ:
		case REMORA_OP_WRITE:
			wr->len = (uint32_t)b->o->size;
			wr->local = w->buf + (size_t)i * b->stride;
			break;
		case REMORA_OP_CAS:
			wr->local = &w->old[i]; /* compare 0, swap 0: the pool keeps its bytes */
			break;
		case REMORA_OP_FAA:
			wr->local = &w->old[i];
			wr->swap = 1;
			break;
		default:
			wr->local = &w->old[i];
			wr->compare_mask = 0xff;
			wr->swap_mask = 0xff;
			break;
		}
	}
}

/*
 * Whether a stream is done. Warm-up: when the phase moves on. Measured: at its batch budget
 * (--iters, or the replay count of the raw pass; UINT64_MAX when bound by time), or when the
 * phase says stop (duration over, an error elsewhere, or a signal).
 */
static inline bool stream_done(struct bench *b, struct worker *w, const struct stream *s,
			       uint64_t budget)
{
	int ph = phase_get(b);

	if (!w->measuring)
		return ph != PH_WARMUP;
	return s->batches >= budget || ph == PH_STOP;
}

/*
 * Latency is timed on one batch in LAT_SAMPLE_EVERY per stream. A timestamp that counts a
 * load's miss where it belongs must wait for it (rdtscp), which would also stop the CPU from
 * overlapping the misses of consecutive batches; timing every batch would then slow the raw
 * loop far more than the API loop (whose fence check already orders each batch) and hide the
 * API's cost. Sampling keeps the throughput free-running; the percentiles come from many
 * thousands of samples all the same.
 */
#define LAT_SAMPLE_EVERY 16

static inline bool lat_sampled(const struct stream *s)
{
	return s->batches % LAT_SAMPLE_EVERY == 0;
}

static inline uint64_t stream_budget(struct bench *b, unsigned wid, unsigned c)
{
	if (b->raw)
		return b->replay[(size_t)wid * b->o->coros + c];
	return b->o->iters ? b->o->iters : UINT64_MAX;
}

/* The API loop of one stream; rc != 0 stops everyone. */
static int api_stream(struct bench *b, struct worker *w, unsigned c, bool coro)
{
	struct stream *s = &w->streams[c];
	uint64_t budget = w->measuring ? stream_budget(b, w->id, c) : 0;
	struct remora_wr *wrs = calloc(b->o->batch, sizeof(*wrs)); /* coroutine stacks are small */
	int rc = 0;

	if (!wrs)
		return -ENOMEM;
	wrs_init(b, w, wrs);
	while (!stream_done(b, w, s, budget)) {
		uint64_t t0, t1;

		bool timed = w->measuring && lat_sampled(s);

		for (unsigned i = 0; i < b->o->batch; i++)
			wrs[i].raddr = remora_gaddr_make(0, stream_next(b, s));
		t0 = timed ? bu_ticks() : 0;
		rc = coro ? remora_co_exec(w->ch, wrs, b->o->batch) :
			    remora_exec(w->ch, wrs, b->o->batch);
		if (rc)
			break;
		if (timed) {
			t1 = bu_ticks();
			bu_hist_record(w->hist, t1 - t0);
		}
		s->batches++;
	}
	free(wrs);
	return rc;
}

struct coro_arg {
	struct worker *w;
	unsigned c;
};

static void api_coro(void *p)
{
	struct coro_arg *a = p;
	struct bench *b = a->w->b;
	int rc = api_stream(b, a->w, a->c, true);

	if (rc && !a->w->err) {
		a->w->err = rc;
		__atomic_store_n(&b->phase, PH_STOP, __ATOMIC_RELAXED);
	}
}

static int api_pass(struct bench *b, struct worker *w)
{
	struct remora_sched *s;
	struct coro_arg *args;
	int rc;

	if (b->o->coros == 1) {
		rc = api_stream(b, w, 0, false);
		if (rc)
			__atomic_store_n(&b->phase, PH_STOP, __ATOMIC_RELAXED);
		return rc;
	}
	args = calloc(b->o->coros, sizeof(*args));
	if (!args)
		return -ENOMEM;
	rc = remora_sched_create(w->ch, 0, &s);
	if (rc)
		goto free_args;
	remora_sched_set_prefetch(s, b->o->prefetch);
	for (unsigned c = 0; c < b->o->coros && !rc; c++) {
		args[c] = (struct coro_arg){ .w = w, .c = c };
		rc = remora_sched_spawn(s, api_coro, &args[c]);
	}
	if (!rc)
		rc = remora_sched_run(s);
	if (!rc)
		rc = w->err;
	remora_sched_destroy(s);
free_args:
	free(args);
	return rc;
}

/* Masked-CAS on a CPU word, with the semantics of transport.h. */
static inline uint64_t raw_mcas(uint64_t *p, const struct remora_wr *wr)
{
	uint64_t old = __atomic_load_n(p, __ATOMIC_RELAXED), nv;

	do {
		if ((old ^ wr->compare) & wr->compare_mask)
			return old;
		nv = (old & ~wr->swap_mask) | (wr->swap & wr->swap_mask);
	} while (!__atomic_compare_exchange_n(p, &old, nv, true, __ATOMIC_SEQ_CST,
					      __ATOMIC_RELAXED));
	return old;
}

#if defined(__SANITIZE_THREAD__)
#define RAW_ATOMIC_COPY 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define RAW_ATOMIC_COPY 1
#endif
#endif

/*
 * A plain store. Raw WRITEs of several threads race by design (so do plain stores on a CXL
 * pool); an 8-byte one is a relaxed atomic store, which is the same single instruction. Under
 * TSan longer ones are copied as relaxed atomic bytes too, so that the run stays clean; such a
 * build is for checking, not for measuring.
 */
static inline void raw_store(uint8_t *p, const void *src, uint32_t len)
{
	if (len == 8) {
		uint64_t v;

		memcpy(&v, src, 8);
		__atomic_store_n((uint64_t *)(void *)p, v, __ATOMIC_RELAXED);
		return;
	}
#ifdef RAW_ATOMIC_COPY
	for (uint32_t i = 0; i < len; i++)
		__atomic_store_n(p + i, ((const uint8_t *)src)[i], __ATOMIC_RELAXED);
#else
	memcpy(p, src, len);
#endif
}

/*
 * The floor's per-verb part: the region check (key, node and both bounds, as an RNIC checks
 * an rkey) and the verb's completion status. False for a verb the API would refuse (none
 * here: the streams only draw good addresses; counted, so that the check cannot be dropped).
 */
static inline bool floor_check(struct bench *b, struct worker *w, const struct remora_wr *wr,
			       unsigned i)
{
	uint64_t off = remora_gaddr_off(wr->raddr);
	uint64_t len = wr->op <= REMORA_OP_WRITE ? wr->len : 8;
	bool ok = wr->rkey == b->key && remora_gaddr_node(wr->raddr) == 0 &&
		  off <= b->pool_bytes && len <= b->pool_bytes - off;

	w->status[i] = ok ? 0 : -REMORA_EBOUNDS;
	return ok;
}

/* One batch with CPU loads, stores and atomics on the pool's local mapping. */
static inline void raw_batch(struct bench *b, struct worker *w, const struct remora_wr *wrs)
{
	if (b->floor) {
		/* The fence handshake of the host backends: a store, a load and a store per batch. */
		__atomic_store_n(&w->floor_lane, 1, __ATOMIC_RELAXED);
		if (__atomic_load_n(&b->floor_epoch, __ATOMIC_ACQUIRE) != 0)
			w->floor_refused++;
		/* The counters, once per batch of one op (verbs.c adds them per run). */
		w->floor_doorbells++;
		w->floor_verbs += b->o->batch;
		w->floor_bytes += (uint64_t)b->o->batch * (b->op <= REMORA_OP_WRITE ? wrs[0].len : 8);
	}
	for (unsigned i = 0; i < b->o->batch; i++) {
		const struct remora_wr *wr = &wrs[i];
		uint8_t *p = b->base + remora_gaddr_off(wr->raddr);
		uint64_t *old = wr->local, cmp;

		if (b->floor && !floor_check(b, w, wr, i)) {
			w->floor_refused++;
			continue;
		}

		switch (wr->op) {
		case REMORA_OP_READ:
			if (wr->len == 8) /* one plain load, as the backend does */
				memcpy(wr->local, p, 8);
			else
				memcpy(wr->local, p, wr->len);
			break;
		case REMORA_OP_WRITE:
			raw_store(p, wr->local, wr->len);
			break;
		case REMORA_OP_CAS:
			cmp = wr->compare;
			__atomic_compare_exchange_n((uint64_t *)p, &cmp, wr->swap, false,
						    __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
			*old = cmp;
			break;
		case REMORA_OP_FAA:
			*old = __atomic_fetch_add((uint64_t *)p, wr->swap, __ATOMIC_SEQ_CST);
			break;
		default:
			*old = raw_mcas((uint64_t *)p, wr);
			break;
		}
	}
	if (b->floor)
		__atomic_store_n(&w->floor_lane, 0, __ATOMIC_RELEASE);
	/* The copies land in buffers nobody reads: keep the compiler from dropping them. */
	__asm__ volatile("" ::: "memory");
}

/* One batch of a stream, its latency sampled as the API pass samples it. */
static inline void raw_timed_batch(struct bench *b, struct worker *w, struct stream *s,
				   const struct remora_wr *cw)
{
	bool timed = w->measuring && lat_sampled(s);
	uint64_t t0 = timed ? bu_ticks() : 0;

	raw_batch(b, w, cw);
	if (timed)
		bu_hist_record(w->hist, bu_ticks() - t0);
	s->batches++;
}

/* Prefetch and yield's raw twin: the lines of a batch, one turn before it runs. */
static inline void raw_prefetch(struct bench *b, const struct remora_wr *wrs)
{
	for (unsigned i = 0; i < b->o->batch; i++) {
		const uint8_t *p = b->base + remora_gaddr_off(wrs[i].raddr);

		if (wrs[i].op == REMORA_OP_READ) /* as rt_host_prefetch does */
			__builtin_prefetch(p, 0);
		else
			__builtin_prefetch(p, 1);
	}
}

/*
 * Replays the streams of one thread in the order the coroutines took turns. With
 * --prefetch-yield a coroutine's turn runs the batch it prefetched on its previous turn, then
 * draws and prefetches its next one, as remora_co_exec does then.
 */
static int raw_pass(struct bench *b, struct worker *w)
{
	unsigned nc = b->o->coros, batch = b->o->batch;
	bool pf = b->o->prefetch && nc > 1;
	struct remora_wr *wrs = calloc((size_t)nc * batch, sizeof(*wrs));
	bool *pending = calloc(nc, sizeof(*pending)); /* prefetched, runs on the next turn */
	bool any = true;

	if (!wrs || !pending) {
		free(wrs);
		free(pending);
		return -ENOMEM;
	}
	for (unsigned c = 0; c < nc; c++)
		wrs_init(b, w, wrs + (size_t)c * batch);
	while (any) {
		any = false;
		for (unsigned c = 0; c < nc; c++) {
			struct stream *s = &w->streams[c];
			struct remora_wr *cw = wrs + (size_t)c * batch;
			uint64_t budget = w->measuring ? stream_budget(b, w->id, c) : 0;

			if (pending[c]) {
				raw_timed_batch(b, w, s, cw);
				pending[c] = false;
				any = true;
			}
			if (stream_done(b, w, s, budget))
				continue;
			any = true;
			for (unsigned i = 0; i < batch; i++)
				cw[i].raddr = remora_gaddr_make(0, stream_next(b, s));
			if (pf) {
				raw_prefetch(b, cw);
				pending[c] = true;
			} else {
				raw_timed_batch(b, w, s, cw);
			}
		}
	}
	free(wrs);
	free(pending);
	return 0;
}

#define SEED_WARM UINT64_C(0x5eed0000aaaa5555)
#define SEED_MEASURE UINT64_C(0x0123456789abcdef)

static void *worker_main(void *p)
{
	struct worker *w = p;
	struct bench *b = w->b;
	unsigned nc = b->o->coros;
	struct remora_counters c0 = { 0 }, c1;
	uint64_t cpu0;
	int rc = 0;

	if (b->o->warmup > 0) {
		w->measuring = false;
		for (unsigned c = 0; c < nc; c++)
			stream_init(b, &w->streams[c], w->id * nc + c, SEED_WARM);
		rc = b->raw ? raw_pass(b, w) : api_pass(b, w);
	}
	while (!rc && phase_get(b) == PH_WARMUP)
		usleep(100);
	w->measuring = true;
	for (unsigned c = 0; c < nc; c++)
		stream_init(b, &w->streams[c], w->id * nc + c, SEED_MEASURE);
	if (!b->raw)
		remora_chan_counters(w->ch, &c0);
	__atomic_fetch_add(&b->ready, 1, __ATOMIC_RELEASE);
	w->t_start = bu_now_ns();
	cpu0 = bu_thread_cpu_ns();
	if (!rc)
		rc = b->raw ? raw_pass(b, w) : api_pass(b, w);
	w->cpu_ns = bu_thread_cpu_ns() - cpu0;
	w->t_end = bu_now_ns();
	if (!b->raw) {
		remora_chan_counters(w->ch, &c1);
		remora_counters_diff(&c1, &c0, &w->cnt);
	}
	w->err = rc;
	return NULL;
}

static void sleep_while(struct bench *b, int phase, double seconds)
{
	uint64_t end = bu_now_ns() + (uint64_t)(seconds * 1e9);

	while (phase_get(b) == phase && bu_now_ns() < end) {
		struct timespec ts = { 0, 2 * 1000 * 1000 };

		nanosleep(&ts, NULL);
	}
}

/* Runs one measured pass of b->op over all threads and sums its results into r. */
static int run_pass(struct bench *b, struct op_result *r)
{
	const struct verbs_opts *o = b->o;
	unsigned started = 0;
	uint64_t t_min = UINT64_MAX, t_max = 0;
	struct ut_snap u0 = { 0 }, u1;
	int rc = 0;

	b->phase = PH_WARMUP;
	b->ready = 0;
	stop_phase = &b->phase;
	for (unsigned t = 0; t < o->threads; t++) {
		struct worker *w = &b->w[t];

		bu_hist_reset(w->hist);
		memset(&w->cnt, 0, sizeof(w->cnt));
		w->floor_verbs = w->floor_bytes = w->floor_refused = w->floor_doorbells = 0;
		w->err = 0;
		if (pthread_create(&w->tid, NULL, worker_main, w)) {
			rc = -EAGAIN;
			__atomic_store_n(&b->phase, PH_STOP, __ATOMIC_RELAXED);
			break;
		}
		started++;
	}
	if (!rc) {
		if (o->warmup > 0)
			sleep_while(b, PH_WARMUP, o->warmup);
		if (phase_get(b) == PH_WARMUP)
			__atomic_store_n(&b->phase, PH_MEASURE, __ATOMIC_RELAXED);
		while (__atomic_load_n(&b->ready, __ATOMIC_ACQUIRE) < o->threads &&
		       phase_get(b) != PH_STOP)
			usleep(100);
		ut_snap(b->tp, &u0);
		/* Duration-bound only for the API pass; the raw pass replays exact counts. */
		if (!o->iters && !b->raw)
			sleep_while(b, PH_MEASURE, o->duration);
		if (!o->iters && !b->raw)
			__atomic_store_n(&b->phase, PH_STOP, __ATOMIC_RELAXED);
	}
	for (unsigned t = 0; t < started; t++) {
		struct worker *w = &b->w[t];

		pthread_join(w->tid, NULL);
		if (w->err && !rc)
			rc = w->err;
		if (w->t_start < t_min)
			t_min = w->t_start;
		if (w->t_end > t_max)
			t_max = w->t_end;
		for (unsigned c = 0; c < o->coros; c++) {
			uint64_t n = w->streams[c].batches;

			if (b->floor) {
				r->floor_verbs += n * o->batch;
			} else if (b->raw) {
				r->raw_verbs += n * o->batch;
			} else {
				r->verbs += n * o->batch;
				b->replay[(size_t)t * o->coros + c] = n;
			}
		}
		if (b->floor) {
			r->floor_busy_ns += (double)w->cpu_ns;
			if (w->floor_refused && !rc)
				rc = -REMORA_EBOUNDS; /* the streams draw good addresses only */
		} else if (b->raw) {
			r->raw_busy_ns += (double)w->cpu_ns;
		} else {
			r->busy_ns += (double)w->cpu_ns;
			bu_hist_merge(r->hist, w->hist);
			counters_add(&r->cnt, &w->cnt);
		}
	}
	stop_phase = NULL;
	if (!b->raw && t_max > t_min)
		r->seconds = (double)(t_max - t_min) / 1e9;
	if (!b->raw && !rc) {
		struct ut_window w;

		ut_snap(b->tp, &u1);
		ut_window(&u0, &u1, &w);
		w.cpu_s = r->busy_ns / 1e9; /* the workers' own threads, not this one */
		ut_report(&w, r->seconds, o->threads, 1, 1, &r->util);
	}
	return rc;
}

/* ---- setup and teardown ---------------------------------------------------------------- */

static uint64_t round8(uint64_t v)
{
	return (v + 7) & ~UINT64_C(7);
}

static void bench_close(struct bench *b)
{
	if (b->w) {
		for (unsigned t = 0; t < b->o->threads; t++) {
			struct worker *w = &b->w[t];

			remora_chan_close(w->ch);
			free(w->streams);
			free(w->buf);
			free(w->old);
			free(w->status);
			free(w->hist);
		}
		free(b->w);
	}
	free(b->replay);
	if (b->pool)
		remora_pool_close(b->pool, true);
	if (b->tp) {
		remora_transport_close(b->tp);
		/* The mailbox and cost segments outlive a transport: this cluster was ours alone. */
		remora_transport_cleanup(&b->cfg);
	}
}

/* Run-time failure with the transport's own message. */
static int tp_fail(struct bench *b, const char *what, int rc)
{
	const char *msg = b->tp ? remora_transport_errmsg(b->tp) : NULL;

	fprintf(stderr, "remora verbs: %s: %s\n", what, msg && *msg ? msg : remora_strerror(rc));
	return 1;
}

/* Opens the transport and a private pool: node 0, registered whole, attached. */
/*
 * The backend's own parameters (rdma_device, ...) from REMORA_<NAME>, as the other commands
 * take them from their parameter table: this command has no config file.
 */
static void env_backend_params(struct bench *b)
{
	const char *name = b->cfg.backend ? b->cfg.backend : getenv("REMORA_BACKEND");
	const char *const *params = remora_backend_params(name && *name ? name : "shm");
	uint32_t n = 0;

	for (; params && *params && n < 8; params++) {
		char var[40];
		const char *v;
		size_t i;

		snprintf(var, sizeof(var), "REMORA_%s", *params);
		for (i = 7; var[i]; i++)
			var[i] = (char)toupper((unsigned char)var[i]);
		v = getenv(var);
		if (v && *v)
			b->bparams[n++] = (struct remora_kv){ *params, v };
	}
	b->cfg.backend_params = b->bparams;
	b->cfg.n_backend_params = n;
}

static int bench_open_pool(struct bench *b)
{
	const struct verbs_opts *o = b->o;
	struct remora_transport_cfg *cfg = &b->cfg;
	struct remora_pool_spec spec = { .size = sizeof(spec), .node = 0, .bytes = o->pool_size,
					 .flags = REMORA_POOL_CREATE | REMORA_POOL_EXCL |
						  REMORA_POOL_UNLINK_ON_CLOSE };
	struct remora_node_desc desc;
	int rc;

	/* Unique per run, so that concurrent runs and stale files never meet. */
	snprintf(b->cluster, sizeof(b->cluster), "verbs-%ld-%08llx", (long)getpid(),
		 (unsigned long long)(bu_now_ns() & 0xffffffffu));
	*cfg = (struct remora_transport_cfg){ .size = sizeof(*cfg), .backend = o->backend,
					      .profile = o->profile, .cluster = b->cluster,
					      .mn_scale = (uint32_t)o->mn_scale,
					      .self_cn = 0, .numa_node = -1 };
	env_backend_params(b);
	rc = remora_transport_open(cfg, &b->tp);
	if (rc) {
		b->tp = NULL;
		fprintf(stderr, "remora verbs: %s\n", remora_last_error());
		return rc == -REMORA_ENOBACKEND || rc == -REMORA_ECONFIG ? 2 : 1;
	}
	b->caps.size = sizeof(b->caps);
	rc = remora_transport_caps(b->tp, &b->caps);
	if (rc)
		return tp_fail(b, "caps", rc);
	if (o->batch > b->caps.max_batch) {
		fprintf(stderr, "remora verbs: --batch: %u exceeds the backend's max_batch %u\n",
			o->batch, b->caps.max_batch);
		return 2;
	}
	rc = remora_pool_open(b->tp, &spec, &b->pool);
	if (rc) {
		b->pool = NULL;
		return tp_fail(b, "pool", rc);
	}
	b->pool_bytes = remora_pool_bytes(b->pool);
	if (b->pool_bytes > o->pool_size)
		b->pool_bytes = o->pool_size;
	rc = remora_pool_reg(b->pool, 0, b->pool_bytes, &b->key);
	if (!rc)
		rc = remora_pool_describe(b->pool, &desc);
	if (!rc)
		rc = remora_transport_attach(b->tp, &desc);
	if (rc)
		return tp_fail(b, "pool setup", rc);
	b->base = remora_pool_base(b->pool);
	/* Fault every page in now: first touches must not be measured as verb latency. */
	if (b->base)
		memset(b->base, 0, b->pool_bytes);
	return 0;
}

/*
 * The pool's local mapping is faulted in by bench_open_pool, but a backend may map the pool
 * again for the compute node (shm attaches a mapping of its own): one READ per page through
 * the API faults that one in too, so that no measured verb pays a page fault.
 */
static int prefault_attached(struct bench *b)
{
	enum { PAGE = 4096, MAXB = 64 };
	struct remora_wr wrs[MAXB];
	uint64_t sink[MAXB];
	unsigned max = b->caps.max_batch < MAXB ? b->caps.max_batch : MAXB;
	uint64_t off = 0;

	while (off + 8 <= b->pool_bytes) {
		unsigned n = 0;
		int rc;

		for (; n < max && off + 8 <= b->pool_bytes; n++, off += PAGE)
			wrs[n] = (struct remora_wr){ .raddr = remora_gaddr_make(0, off),
						     .rkey = b->key, .len = 8,
						     .op = REMORA_OP_READ, .local = &sink[n] };
		rc = remora_exec(b->w[0].ch, wrs, n);
		if (rc)
			return tp_fail(b, "prefault", rc);
	}
	return 0;
}

static int bench_open_workers(struct bench *b)
{
	const struct verbs_opts *o = b->o;
	uint64_t local = o->batch * round8(o->size);
	int rc;

	b->w = calloc(o->threads, sizeof(*b->w));
	b->replay = calloc((size_t)o->threads * o->coros, sizeof(*b->replay));
	if (!b->w || !b->replay)
		goto oom;
	for (unsigned t = 0; t < o->threads; t++) {
		struct worker *w = &b->w[t];

		w->b = b;
		w->id = t;
		w->streams = calloc(o->coros, sizeof(*w->streams));
		w->buf = calloc(1, local);
		w->old = calloc(o->batch, sizeof(*w->old));
		w->status = calloc(o->batch, sizeof(*w->status));
		w->hist = bu_hist_new();
		if (!w->streams || !w->buf || !w->old || !w->status || !w->hist)
			goto oom;
		/* A byte pattern, so WRITEs move non-zero data. */
		memset(w->buf, 0xa5, local);
		rc = remora_chan_open(b->tp, &w->ch);
		if (rc) {
			w->ch = NULL;
			return tp_fail(b, "channel", rc);
		}
	}
	return 0;
oom:
	fprintf(stderr, "remora verbs: out of memory\n");
	return 1;
}

/* ---- reporting ------------------------------------------------------------------------- */

/* Per-MN service rate the profile allows for op's class, in Mops; 0 when unlimited. */
static unsigned scale = 1; /* the transport's mn_scale, for model_mops */

static double model_mops(const struct rt_cost_profile *p, enum remora_op op)
{
	uint64_t svc;

	if (!p)
		return 0;
	svc = p->svc_ns[rt_cost_class_of(op)] * scale;
	return svc ? 1e3 / (double)svc : 0;
}

static uint64_t emulated_total(const struct remora_counters *c, enum remora_op op)
{
	uint64_t n = 0;

	for (unsigned mn = 0; mn < REMORA_MAX_MN; mn++)
		n += c->emulated[mn][op];
	return n;
}

static void ops_list(uint32_t mask, char *buf, size_t len)
{
	size_t used = 0;

	buf[0] = '\0';
	for (unsigned i = 0; i < REMORA_OP__COUNT && used < len; i++)
		if (mask & (1u << i))
			used += (size_t)snprintf(buf + used, len - used, "%s%s", used ? "," : "",
						 remora_op_name((enum remora_op)i));
	if (!used)
		snprintf(buf, len, "none");
}

static void print_header(struct bench *b, const struct rt_cost_profile *prof)
{
	const struct verbs_opts *o = b->o;
	char emu[64], pool[32], size[32], scale[48] = "";

	if (remora_transport_mn_scale(b->tp) > 1)
		snprintf(scale, sizeof(scale), " x%u, rates divided by %u",
			 remora_transport_mn_scale(b->tp), remora_transport_mn_scale(b->tp));
	ops_list(b->caps.emulated_ops, emu, sizeof(emu));
	bu_format_size(b->pool_bytes, pool, sizeof(pool));
	bu_format_size(o->size, size, sizeof(size));
	printf("remora verbs: backend %s, profile %s%s (%s), emulated ops: %s\n",
	       remora_transport_backend(b->tp), remora_transport_profile(b->tp), scale,
	       prof ? prof->summary : "?", emu);
	printf("  1 memory node, pool %s, pattern %s, size %s (read/write), batch %u, "
	       "threads %u, coros %u, ",
	       pool, o->seq ? "seq" : "random", size, o->batch, o->threads, o->coros);
	if (o->iters)
		printf("%" PRIu64 " batches per coroutine", o->iters);
	else
		printf("%g s per op", o->duration);
	printf(" (warm-up %g s)\n", o->warmup);
	printf("  latency is per batch, post to last completion%s, timed on 1 batch in %d; "
	       "model = the profile's rate limit per memory node;\n"
	       "  cpu%% = share of the wall time the worker threads were on a CPU\n\n",
	       o->batch == 1 ? " (batch 1: per verb)" : "", LAT_SAMPLE_EVERY);
	printf("%-5s %12s %9s %5s %9s %8s %8s %8s %10s  %s\n", "op", "verbs", "Mops", "cpu%",
	       "avg ns", "p50", "p99", "p99.9", "model", "counted by the transport");
}

static void counted_text(const struct remora_counters *c, char *buf, size_t len)
{
	size_t used = 0;

	buf[0] = '\0';
	for (unsigned i = 0; i < REMORA_OP__COUNT && used < len; i++) {
		uint64_t n = remora_counters_total(c, (enum remora_op)i);

		if (n)
			used += (size_t)snprintf(buf + used, len - used, "%s=%" PRIu64 " ",
						 remora_op_name((enum remora_op)i), n);
	}
	for (unsigned i = 0; i < REMORA_OP__COUNT && used < len; i++) {
		uint64_t n = emulated_total(c, (enum remora_op)i);

		if (n)
			used += (size_t)snprintf(buf + used, len - used, "emulated-%s=%" PRIu64 " ",
						 remora_op_name((enum remora_op)i), n);
	}
	if (used < len)
		snprintf(buf + used, len - used, "doorbells=%" PRIu64, c->doorbells);
}

static double hist_ns(const struct bu_hist *h, double q)
{
	return (double)bu_hist_quantile(h, q) / bu_ticks_per_ns();
}

/*
 * Share of the measured wall time the worker threads were on a CPU. Below ~90% the machine
 * was busy with other work, and a rate-limited profile loses service time while its poster
 * is off the CPU: read throughput against the model with this in mind.
 */
static double cpu_share(const struct op_result *r, unsigned threads)
{
	return r->seconds > 0 ? r->busy_ns / 1e9 / (r->seconds * threads) : 0;
}

static void print_row(const struct op_result *r, const struct rt_cost_profile *prof,
		      unsigned threads)
{
	char counted[256], model[16] = "-";
	double mops = r->seconds > 0 ? (double)r->verbs / r->seconds / 1e6 : 0;
	double m = model_mops(prof, r->op);

	counted_text(&r->cnt, counted, sizeof(counted));
	if (m > 0)
		snprintf(model, sizeof(model), "%.2f", m);
	printf("%-5s %12" PRIu64 " %9.3f %5.0f %9.1f %8.0f %8.0f %8.0f %10s  %s\n",
	       remora_op_name(r->op), r->verbs, mops, cpu_share(r, threads) * 100,
	       bu_hist_mean(r->hist) / bu_ticks_per_ns(), hist_ns(r->hist, 0.5),
	       hist_ns(r->hist, 0.99), hist_ns(r->hist, 0.999), model, counted);
	printf("      bottleneck: %s %.0f%%", r->util.bottleneck, 100 * r->util.bottleneck_util);
	if (r->util.cost)
		printf(" (memory node 0: read %.0f%% write %.0f%% atomic %.0f%%)",
		       100 * r->util.mn[0][0], 100 * r->util.mn[0][1], 100 * r->util.mn[0][2]);
	putchar('\n');
}

static void print_raw(const struct op_result *res, unsigned n)
{
	bool floor = n && res[0].have_floor;

	printf("\n--raw: the same accesses with memcpy and CPU atomics on the pool mapping; "
	       "time per verb = thread CPU time / verbs\n");
	if (floor)
		printf("--floor: raw plus the region check and a status per verb, the fence "
		       "handshake and counters per batch\n");
	printf("%-5s %12s %12s %9s", "op", "api ns/verb", "raw ns/verb", "api/raw");
	if (floor)
		printf(" %14s %10s", "floor ns/verb", "floor/raw");
	printf("\n");
	for (unsigned i = 0; i < n; i++) {
		const struct op_result *r = &res[i];
		double api = r->verbs ? r->busy_ns / (double)r->verbs : 0;
		double raw = r->raw_verbs ? r->raw_busy_ns / (double)r->raw_verbs : 0;
		double fl = r->floor_verbs ? r->floor_busy_ns / (double)r->floor_verbs : 0;

		if (!r->have_raw)
			continue;
		printf("%-5s %12.2f %12.2f %9.2f", remora_op_name(r->op), api, raw,
		       raw > 0 ? api / raw : 0);
		if (floor)
			printf(" %14.2f %10.2f", fl, raw > 0 ? fl / raw : 0);
		printf("\n");
	}
}

static void json_counters(struct bu_json *j, const struct remora_counters *c)
{
	bu_json_obj_begin(j, "counted");
	for (unsigned i = 0; i < REMORA_OP__COUNT; i++)
		bu_json_u64(j, remora_op_name((enum remora_op)i),
			    remora_counters_total(c, (enum remora_op)i));
	bu_json_obj_begin(j, "emulated");
	for (unsigned i = 0; i < REMORA_OP__COUNT; i++)
		bu_json_u64(j, remora_op_name((enum remora_op)i),
			    emulated_total(c, (enum remora_op)i));
	bu_json_obj_end(j);
	bu_json_u64(j, "doorbells", c->doorbells);
	bu_json_obj_end(j);
}

static void json_config(struct bu_json *j, const struct verbs_opts *o)
{
	bu_json_obj_begin(j, "config");
	bu_json_u64(j, "pool_size", o->pool_size);
	bu_json_u64(j, "size", o->size);
	bu_json_str(j, "pattern", o->seq ? "seq" : "random");
	bu_json_u64(j, "batch", o->batch);
	bu_json_u64(j, "threads", o->threads);
	bu_json_u64(j, "coros", o->coros);
	if (o->iters)
		bu_json_u64(j, "iters", o->iters);
	else
		bu_json_f64(j, "duration_s", o->duration);
	bu_json_f64(j, "warmup_s", o->warmup);
	bu_json_bool(j, "raw", o->raw);
	bu_json_obj_end(j);
}

/* Creates the --json file and opens its document with "tool"; NULL after printing why not. */
static FILE *json_begin(const char *path, const char *tool, struct bu_json *j)
{
	FILE *f = fopen(path, "w");

	if (!f) {
		fprintf(stderr, "remora verbs: --json: cannot create '%s': %s\n", path,
			strerror(errno));
		return NULL;
	}
	bu_json_init(j, f);
	bu_json_obj_begin(j, NULL);
	bu_json_str(j, "tool", tool);
	return f;
}

static int write_json(struct bench *b, const struct rt_cost_profile *prof,
		      const struct op_result *res, unsigned n)
{
	const struct verbs_opts *o = b->o;
	struct bu_json j;
	FILE *f = json_begin(o->json, "remora verbs", &j);

	if (!f)
		return 1;
	bu_json_str(&j, "backend", remora_transport_backend(b->tp));
	bu_json_str(&j, "profile", remora_transport_profile(b->tp));
	bu_json_u64(&j, "mn_scale", remora_transport_mn_scale(b->tp));
	bu_json_str(&j, "profile_summary", prof ? prof->summary : NULL);
	bu_json_arr_begin(&j, "emulated_ops");
	for (unsigned i = 0; i < REMORA_OP__COUNT; i++)
		if (b->caps.emulated_ops & (1u << i))
			bu_json_str(&j, NULL, remora_op_name((enum remora_op)i));
	bu_json_arr_end(&j);
	json_config(&j, o);
	bu_json_str(&j, "latency_unit", "ns per batch, post to last completion");
	bu_json_u64(&j, "latency_sample_every", LAT_SAMPLE_EVERY);
	bu_json_arr_begin(&j, "results");
	for (unsigned i = 0; i < n; i++) {
		const struct op_result *r = &res[i];
		double m = model_mops(prof, r->op);

		bu_json_obj_begin(&j, NULL);
		bu_json_str(&j, "op", remora_op_name(r->op));
		bu_json_u64(&j, "verbs", r->verbs);
		bu_json_f64(&j, "seconds", r->seconds);
		bu_json_f64(&j, "mops", r->seconds > 0 ? (double)r->verbs / r->seconds / 1e6 : 0);
		bu_json_f64(&j, "cpu_seconds", r->busy_ns / 1e9);
		bu_json_f64(&j, "cpu_share", cpu_share(r, o->threads));
		bu_json_obj_begin(&j, "latency_ns");
		bu_json_f64(&j, "avg", bu_hist_mean(r->hist) / bu_ticks_per_ns());
		bu_json_f64(&j, "p50", hist_ns(r->hist, 0.5));
		bu_json_f64(&j, "p99", hist_ns(r->hist, 0.99));
		bu_json_f64(&j, "p999", hist_ns(r->hist, 0.999));
		bu_json_f64(&j, "min", hist_ns(r->hist, 0));
		bu_json_f64(&j, "max", hist_ns(r->hist, 1));
		bu_json_obj_end(&j);
		if (m > 0)
			bu_json_f64(&j, "model_mops_per_mn", m);
		json_counters(&j, &r->cnt);
		ut_json(&j, &r->util, 1, 1);
		if (r->have_raw && r->verbs && r->raw_verbs) {
			double api = r->busy_ns / (double)r->verbs;
			double raw = r->raw_busy_ns / (double)r->raw_verbs;

			bu_json_obj_begin(&j, "raw");
			bu_json_str(&j, "basis", "thread CPU time per verb");
			bu_json_f64(&j, "api_ns_per_verb", api);
			bu_json_f64(&j, "raw_ns_per_verb", raw);
			bu_json_f64(&j, "ratio", raw > 0 ? api / raw : 0);
			if (r->have_floor && r->floor_verbs) {
				double fl = r->floor_busy_ns / (double)r->floor_verbs;

				bu_json_u64(&j, "floor_verbs", r->floor_verbs);
				bu_json_f64(&j, "floor_ns_per_verb", fl);
				bu_json_f64(&j, "floor_ratio", raw > 0 ? fl / raw : 0);
			}
			bu_json_obj_end(&j);
		}
		bu_json_obj_end(&j);
	}
	bu_json_arr_end(&j);
	bu_json_obj_end(&j);
	if (bu_json_finish(&j) | fclose(f)) {
		fprintf(stderr, "remora verbs: --json: writing '%s' failed\n", o->json);
		return 1;
	}
	return 0;
}

/* ---- the verbs benchmark --------------------------------------------------------------- */

static int run_op(struct bench *b, enum remora_op op, struct op_result *r)
{
	int rc;

	b->op = op;
	b->stride = op == REMORA_OP_READ || op == REMORA_OP_WRITE ? round8(b->o->size) : 8;
	b->nslots = b->pool_bytes / b->stride;
	r->op = op;
	b->raw = false;
	rc = run_pass(b, r);
	if (rc) {
		fprintf(stderr, "remora verbs: %s failed: %s\n", remora_op_name(op),
			remora_strerror(rc));
		return 1;
	}
	if (b->o->raw && b->base && !interrupted) {
		b->raw = true;
		rc = run_pass(b, r);
		if (rc) {
			fprintf(stderr, "remora verbs: raw %s failed: %s\n", remora_op_name(op),
				remora_strerror(rc));
			return 1;
		}
		r->have_raw = true;
	}
	if (b->o->floor && r->have_raw && !interrupted) {
		b->floor = true;
		rc = run_pass(b, r);
		b->floor = false;
		if (rc) {
			fprintf(stderr, "remora verbs: floor %s failed: %s\n", remora_op_name(op),
				remora_strerror(rc));
			return 1;
		}
		r->have_floor = true;
	}
	return 0;
}

static int run_verbs(const struct verbs_opts *o)
{
	struct bench b = { .o = o };
	struct op_result res[REMORA_OP__COUNT];
	const struct rt_cost_profile *prof;
	unsigned nres = 0;
	int rc;

	memset(res, 0, sizeof(res));
	if (o->batch * round8(o->size) > VERBS_MAX_LOCAL) {
		fprintf(stderr, "remora verbs: --size: --size x --batch needs more than 1 GiB of "
				"local buffer per thread\n");
		return 2;
	}
	if (o->prefetch && o->coros < 2) {
		fprintf(stderr, "remora verbs: --prefetch-yield: needs --coros 2 or more (it hides "
				"one coroutine's memory latency behind the others')\n");
		return 2;
	}
	bu_ticks_calibrate();
	rc = bench_open_pool(&b);
	if (!rc)
		rc = bench_open_workers(&b);
	if (!rc)
		rc = prefault_attached(&b);
	if (rc)
		goto close;
	if (!o->ops_all && !(b.caps.ops & o->ops)) {
		char want[16];

		ops_list(o->ops, want, sizeof(want));
		fprintf(stderr, "remora verbs: --op: backend %s does not support %s here\n",
			remora_transport_backend(b.tp), want);
		rc = 1;
		goto close;
	}
	if (o->raw && !b.base)
		fprintf(stderr, "remora verbs: --raw: this backend has no local mapping; skipped\n");
	prof = rt_cost_profile_find(remora_transport_profile(b.tp));
	scale = remora_transport_mn_scale(b.tp);
	print_header(&b, prof);
	for (unsigned i = 0; i < REMORA_OP__COUNT && !interrupted; i++) {
		enum remora_op op = (enum remora_op)i;

		if (!(o->ops & (1u << i)))
			continue;
		if (!(b.caps.ops & (1u << i))) {
			printf("%-5s not supported by this backend configuration: skipped\n",
			       remora_op_name(op));
			continue;
		}
		res[nres].hist = bu_hist_new();
		if (!res[nres].hist) {
			rc = 1;
			break;
		}
		rc = run_op(&b, op, &res[nres]);
		nres++;
		if (rc)
			break;
		print_row(&res[nres - 1], prof, o->threads);
		fflush(stdout);
	}
	if (!rc && o->raw)
		print_raw(res, nres);
	if (interrupted)
		fprintf(stderr, "remora verbs: interrupted\n");
	if (!rc && o->json)
		rc = write_json(&b, prof, res, nres);
	for (unsigned i = 0; i < nres; i++)
		free(res[i].hist);
close:
	bench_close(&b);
	return rc ? rc : interrupted ? 1 : 0;
}

/* ---- coroutine switch ------------------------------------------------------------------ */

static uint64_t switch_yields;

static void switch_body(void *arg)
{
	(void)arg;
	for (uint64_t i = 0; i < switch_yields; i++)
		remora_yield();
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

/*
 * Two coroutines on one scheduler take turns through remora_yield(): each yield is one
 * switch (save, run-queue push and pop, restore). Rounds are repeated because the machine is
 * shared: the minimum is the cost, the median shows the noise.
 */
static int run_coro_switch(const struct verbs_opts *o)
{
	double ns[VERBS_SWITCH_ROUNDS];

	switch_yields = o->iters ? o->iters : 5000000;
	for (unsigned r = 0; r < VERBS_SWITCH_ROUNDS && !interrupted; r++) {
		struct remora_sched *s;
		uint64_t t0, t1;
		int rc = remora_sched_create(NULL, 0, &s);

		if (!rc)
			rc = remora_sched_spawn(s, switch_body, NULL);
		if (!rc)
			rc = remora_sched_spawn(s, switch_body, NULL);
		if (rc) {
			fprintf(stderr, "remora verbs: scheduler: %s\n", remora_strerror(rc));
			return 1;
		}
		t0 = bu_now_ns();
		rc = remora_sched_run(s);
		t1 = bu_now_ns();
		remora_sched_destroy(s);
		if (rc) {
			fprintf(stderr, "remora verbs: scheduler: %s\n", remora_strerror(rc));
			return 1;
		}
		ns[r] = (double)(t1 - t0) / (2.0 * (double)switch_yields);
	}
	qsort(ns, VERBS_SWITCH_ROUNDS, sizeof(ns[0]), cmp_double);
	printf("coroutine switch (remora_yield between 2 coroutines, %" PRIu64 " switches x %d "
	       "rounds): min %.2f ns, median %.2f ns\n",
	       2 * switch_yields, VERBS_SWITCH_ROUNDS, ns[0], ns[VERBS_SWITCH_ROUNDS / 2]);
	if (o->json) {
		struct bu_json j;
		FILE *f = json_begin(o->json, "remora verbs --coro-switch", &j);

		if (!f)
			return 1;
		bu_json_u64(&j, "switches_per_round", 2 * switch_yields);
		bu_json_u64(&j, "rounds", VERBS_SWITCH_ROUNDS);
		bu_json_f64(&j, "switch_ns_min", ns[0]);
		bu_json_f64(&j, "switch_ns_median", ns[VERBS_SWITCH_ROUNDS / 2]);
		bu_json_obj_end(&j);
		if (bu_json_finish(&j) | fclose(f)) {
			fprintf(stderr, "remora verbs: --json: writing '%s' failed\n", o->json);
			return 1;
		}
	}
	return 0;
}

/* ---- entry point ----------------------------------------------------------------------- */

int cmd_verbs(int argc, char **argv)
{
	struct sigaction sa = { .sa_handler = on_signal }, old_int, old_term;
	struct verbs_opts o;
	int rc;

	rc = parse_opts(argc, argv, &o);
	if (rc)
		return rc == 1 ? 0 : 2;
	interrupted = 0;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, &old_int);
	sigaction(SIGTERM, &sa, &old_term);
	if (o.rpc && !o.coro_switch) {
		struct verbs_rpc_opts ro = { o.backend, o.profile, o.duration, o.warmup };

		rc = verbs_rpc(&ro);
	} else {
		rc = o.coro_switch ? run_coro_switch(&o) : run_verbs(&o);
	}
	sigaction(SIGINT, &old_int, NULL);
	sigaction(SIGTERM, &old_term, NULL);
	return rc;
}
