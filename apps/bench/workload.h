/* SPDX-License-Identifier: MIT */
/*
 * Workloads: one registry of the transaction mixes `remora bench` and the checks run.
 *
 * A workload is a table of functions (struct wl_desc):
 *   knobs     its flags (name, default, help), e.g. --keys, --theta
 *   init      parses the knobs into a struct wl; a bad value is a one-line error
 *   tables    the table definitions, sized by the knobs (formatted once, before the run)
 *   load      writes records [begin, end) of its load order (parallel loaders split the range)
 *   gen       draws the inputs of one transaction (type, keys, amounts)
 *   exec      runs one attempt of a transaction on an open handle, up to (not including) commit
 *   commit    accounts for a committed transaction (deltas, history records)
 *   verify    after the run: reads the store and checks the workload's invariant
 *
 * The retry policy lives here, in the application layer (wl_run_txn): an attempt that ends in
 * -REMORA_EABORT is retried with the same inputs until it commits, counting each abort by the
 * reason the engine gives (remora_worker_last_abort). A transaction the application aborts on
 * purpose (SmallBank's SendPayment without funds) is final and counted apart.
 */
#ifndef REMORA_APPS_WORKLOAD_H
#define REMORA_APPS_WORKLOAD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <remora/tx.h>

#include "rng.h"
#include "zipf.h"

#define WL_MAX_TYPES 8     /* transaction types of one workload */
#define WL_MAX_KEYS 16     /* keys one generated transaction names */
#define WL_MAX_ACC 4       /* workload accumulators summed over the cluster (see wl_acc) */
#define WL_MAX_KNOBS 24    /* knob values one workload instance holds */
#define WL_ERR_MAX 256

struct wl;
struct wl_coord;

/* One workload flag: --name VALUE. */
struct wl_knob {
	const char *name;
	const char *def;
	const char *help;
};

/* Knob values as given on the command line: name -> text (NULL: not given). */
struct wl_args {
	unsigned n;
	const char *name[WL_MAX_KNOBS];
	const char *value[WL_MAX_KNOBS];
};

/* The inputs of one transaction, drawn before its first attempt and kept across retries. */
struct wl_input {
	uint32_t type;              /* index into wl_desc.type_names */
	uint32_t nkeys;             /* keys used in key[] (or a scan length, workload-defined) */
	uint64_t key[WL_MAX_KEYS];
	uint32_t write_mask;        /* bit i: key[i] is written (workload-defined use) */
	uint32_t _pad;
	int64_t arg;                /* amount, value seed, ... */
};

/* What an attempt produced, passed to the workload's commit hook. */
struct wl_result {
	int64_t delta;              /* SmallBank: change of the bank's total, in cents */
	uint64_t seen[WL_MAX_KEYS]; /* kvs history: writer id of the version read per key */
	uint32_t found_mask;        /* bit i: key[i] existed */
	uint32_t integrity_errors;  /* values that failed their self-check (torn or misplaced) */
	uint32_t not_found;         /* reads of absent keys that are part of the mix (YCSB D/E) */
	uint32_t _pad;
};

/*
 * exec returns 0 (commit it), WL_USER_ABORT (abort it; final), WL_RETRY (the application saw
 * a conflict the engine does not report as an abort, e.g. a racing insert: abort and retry,
 * counted as REMORA_ABORT_NOT_FOUND), -REMORA_EABORT (retry), or a failure.
 */
#define WL_USER_ABORT 2
#define WL_RETRY 3

struct wl_desc {
	const char *name;
	const char *summary;          /* one line for --help */
	const char *source;           /* where the mix comes from (docs/workloads.md has more) */
	const struct wl_knob *knobs;  /* terminated by a NULL name */
	unsigned ntypes;
	const char *type_names[WL_MAX_TYPES];
	const char *acc_names[WL_MAX_ACC]; /* names of the accumulators this workload uses */
	uint8_t acc_max[WL_MAX_ACC];       /* 1: merged by maximum (a detail), 0: by sum */

	int (*init)(struct wl *wl);
	void (*fini)(struct wl *wl);
	/* Writes up to REMORA_MAX_TABLES definitions; returns how many. */
	unsigned (*tables)(const struct wl *wl, struct remora_table_def *defs);
	/*
	 * Once per run, in the process that formats and loads, before any compute node starts
	 * (may be NULL): e.g. clear files a previous run left. 0 or a negative code.
	 */
	int (*prepare)(const struct wl *wl);
	/* Records in load order; load(begin, end) writes that slice (0 or a negative code). */
	uint64_t (*load_count)(const struct wl *wl);
	int (*load)(const struct wl *wl, struct remora_worker *w, uint64_t begin, uint64_t end);
	/* Per-coordinator state (may be NULL). */
	int (*coord_init)(const struct wl *wl, struct wl_coord *c);
	void (*coord_fini)(const struct wl *wl, struct wl_coord *c);
	void (*gen)(const struct wl *wl, struct wl_coord *c, struct wl_input *in);
	unsigned (*tx_flags)(const struct wl *wl, const struct wl_input *in);
	/*
	 * The key whose home compute node a routed transaction runs on (its first lock; runner
	 * cfg route). May be NULL: key[0], and no routing when nkeys is 0.
	 */
	bool (*home_key)(const struct wl *wl, const struct wl_input *in, uint64_t *key);
	int (*exec)(const struct wl *wl, struct wl_coord *c, struct remora_tx *tx,
		    const struct wl_input *in, struct wl_result *res);
	void (*commit)(const struct wl *wl, struct wl_coord *c, const struct wl_input *in,
		       const struct wl_result *res, uint64_t txid);
	/* The commit after exec failed without a verdict (not an abort): whether it committed
	 * is the recovery's to decide. May be NULL. */
	void (*undecided)(const struct wl *wl, struct wl_coord *c);
	/*
	 * After the run, with acc = the cluster's summed accumulators: 0 when the invariant
	 * holds, 1 when it is violated (msg says how), or a negative code when it could not be
	 * checked. May be NULL (nothing to check).
	 */
	int (*verify)(const struct wl *wl, struct remora_worker *w, const int64_t *acc, char *msg,
		      size_t msglen);
	/* The tables it splits into cells (column groups): up to REMORA_MAX_TABLES definitions,
	 * returns how many (NULL or 0: every table is one cell). */
	unsigned (*cells)(const struct wl *wl, struct remora_cell_def *defs);
};


/* A configured workload instance. */
struct wl {
	const struct wl_desc *desc;
	struct wl_args args;
	uint64_t seed;
	unsigned total_coords;        /* coordinators in the whole cluster */
	bool si;                      /* the run is snapshot isolation (--isolation si): checks
				       * allow what SI allows (write skew). Set after wl_setup. */
	bool acc_partial;	      /* a compute node died in the run: its accumulators died
				       * with it, so a check that sums them (SmallBank's deltas,
				       * TATP's rows, L3's increments) cannot be exact and is left
				       * out; the rest (leaked locks, state invariants) is checked */
	char err[WL_ERR_MAX];
	void *priv;
};

/* Per-coordinator context, owned by the caller (bench, check); the workload fills priv. */
struct wl_coord {
	struct remora_worker *w;
	struct wl_rng rng;
	uint16_t cn;
	uint16_t thread;
	uint16_t coro;
	uint16_t _pad;
	uint32_t global_index;        /* 0 .. total_coords-1, unique in the cluster */
	uint32_t _pad2;
	uint64_t seq;                 /* transactions started by this coordinator */
	uint64_t drawn;               /* numbered inputs drawn (TPC-C's payments, YCSB's inserts):
				       * unlike seq, also counts those run at another node (routing) */
	int64_t acc[WL_MAX_ACC];      /* accumulators of every committed transaction */
	void *priv;
};

/* Outcome counters of the transactions a coordinator ran (summed per thread and cluster). */
struct wl_counts {
	uint64_t committed;
	uint64_t attempts;
	uint64_t user_aborts;
	uint64_t aborts[REMORA_ABORT__COUNT];
	uint64_t committed_by_type[WL_MAX_TYPES];
	uint64_t integrity_errors;
	uint64_t not_found;
	uint64_t routed;     /* handed to their home compute node (remora_route_send) */
	uint64_t served;     /* handed here by another compute node and run */
	uint64_t route_lost; /* handed over, but no answer came back in time */
};

/* ---- registry --------------------------------------------------------------------------- */

/* NULL-terminated list of every workload. */
/* wl's cell definitions (wl_desc.cells), 0 when it has none. */
static inline unsigned wl_cells(const struct wl *wl, struct remora_cell_def *defs)
{
	return wl->desc->cells ? wl->desc->cells(wl, defs) : 0;
}

const struct wl_desc *const *wl_list(void);
const struct wl_desc *wl_find(const char *name);
/* Every distinct knob name of every workload, for the option parser; NULL-terminated. */
const char *const *wl_all_knob_names(void);
const struct wl_knob *wl_knob_find(const struct wl_desc *d, const char *name);

/*
 * Configures wl as workload d with the given knob values. Returns 0, or -REMORA_ECONFIG with
 * a one-line reason in wl->err (an unknown knob for this workload, a malformed value).
 */
int wl_setup(struct wl *wl, const struct wl_desc *d, const struct wl_args *args, uint64_t seed,
	     unsigned total_coords);
void wl_teardown(struct wl *wl);

/* Adds or replaces one knob value (the strings must outlive wl). 0 or -ENOSPC. */
int wl_args_set(struct wl_args *a, const char *name, const char *value);
/*
 * Takes argv[*i] when it is a workload option, "--<knob> VALUE" or "--<knob>=VALUE" of any
 * workload, into a: 1 taken (*i advanced), 0 not one, 2 after printing "remora <cmd>: ...".
 */
int wl_args_arg(struct wl_args *a, const char *cmd, int argc, char **argv, int *i);

/* Knob accessors for init(): the given value, else the knob's default. */
const char *wl_knob_str(const struct wl *wl, const char *name);
/* Parse a knob; on a bad value they write wl->err and return -REMORA_ECONFIG. */
int wl_knob_u64(struct wl *wl, const char *name, uint64_t min, uint64_t max, uint64_t *out);
int wl_knob_double(struct wl *wl, const char *name, double min, double max, double *out);
int wl_knob_choice(struct wl *wl, const char *name, const char *const *choices, unsigned *out);
/* A knob whose value is "off" or "on" (wl_knob_choice's error otherwise). */
int wl_knob_onoff(struct wl *wl, const char *name, bool *out);
/* Sets wl->err (printf-style) and returns -REMORA_ECONFIG. */
int wl_fail(struct wl *wl, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* A parsed --dist/--theta pair: draws keys in [0, n). */
struct wl_keydist {
	struct wl_zipf zipf;
	uint64_t n;
	bool scramble; /* spread ranks over the key space with a bijection (YCSB's scrambling) */
	uint64_t mul, add;
};
/* theta 0: uniform. Returns 0 or -REMORA_ECONFIG (wl->err set). */
int wl_keydist_init(struct wl *wl, struct wl_keydist *kd, uint64_t n, double theta,
		    bool scramble);
/* From a uniform|zipf knob and a theta knob. */
int wl_keydist_setup(struct wl *wl, struct wl_keydist *kd, uint64_t n, const char *dist_knob,
		     const char *theta_knob, bool scramble);
uint64_t wl_keydist_next(const struct wl_keydist *kd, struct wl_rng *r);

/* ---- running ---------------------------------------------------------------------------- */

/* Seeds c->rng and sets its identity; call before coord_init. */
void wl_coord_prepare(const struct wl *wl, struct wl_coord *c, struct remora_worker *w,
		      uint16_t cn, uint16_t thread, uint16_t coro, uint32_t global_index);
int wl_coord_init(const struct wl *wl, struct wl_coord *c);
void wl_coord_fini(const struct wl *wl, struct wl_coord *c);

/* A transaction id unique in the cluster and never 0 (0 names the loaded version). */
uint64_t wl_txid(const struct wl_coord *c);
/* Unpacks a transaction id (for messages). */
void wl_txid_parts(uint64_t txid, unsigned *cn, unsigned *thread, unsigned *coro, uint64_t *seq);

/*
 * Runs the transaction with inputs in until it commits or is aborted by the application,
 * retrying aborts. Counts into cnt. Returns 0 (committed), WL_USER_ABORT, or a negative code
 * when the engine failed (not an abort): the run must stop. *stop (may be NULL; read
 * atomically) is checked between attempts: once non-zero, the transaction is given up and
 * -ECANCELED returned.
 */
int wl_run_txn(const struct wl *wl, struct wl_coord *c, const struct wl_input *in,
	       struct wl_counts *cnt, const int *stop);

void wl_counts_add(struct wl_counts *dst, const struct wl_counts *src);

/*
 * Runs fn(arg) on w outside any coroutine (the engine then uses the worker's coordinator 0
 * and spins on completions): for loaders and verify scans. Returns 0.
 */
int wl_on_worker(struct remora_worker *w, void (*fn)(void *arg), void *arg);

/*
 * The retry loop of the after-run reads: a transaction (tx_flags) in which stage() stages the
 * records (0 or a failure code), then fetches them and commits; an abort is retried, yielding
 * the CPU, until timeout_ms has passed (-ETIMEDOUT). Returns 0 or the engine's failure code.
 */
int wl_fetch_retry(struct remora_worker *w, unsigned tx_flags,
		   int (*stage)(struct remora_tx *tx, void *arg), void *arg, unsigned timeout_ms);

/*
 * For verify scans, on w outside coroutines: reads keys[0..n) of one table (values of vsize
 * bytes into vals, presence into found) in one read-only transaction, retrying aborts for up
 * to timeout_ms. Returns 0, -ETIMEDOUT when it never committed (a record stayed locked after
 * the run: a leaked lock), or the engine's failure code.
 */
int wl_read_keys(struct remora_worker *w, uint32_t table, const uint64_t *keys, unsigned n,
		 void *vals, uint32_t vsize, bool *found, unsigned timeout_ms);
#define WL_VERIFY_TIMEOUT_MS 3000

/*
 * For verify scans: locks keys[0..n) of one table (fetch for update) and commits without
 * writing, retrying aborts for up to timeout_ms. After a run every lock must be free; a
 * protocol whose read-only validation ignores locks (FORD) would not notice a leaked one in
 * wl_read_keys. Returns 0, -ETIMEDOUT (a record stayed locked) or the engine's failure code.
 */
int wl_probe_locks(struct remora_worker *w, uint32_t table, const uint64_t *keys, unsigned n,
		   void *vals, uint32_t vsize, bool *found, unsigned timeout_ms);
/* "; " and who holds the lock the last abort of w met (remora_worker_last_lock), or "": for
 * the message of a leaked lock. Returns buf. */
const char *wl_lock_note(const struct remora_worker *w, char *buf, size_t len);
#define WL_LOCK_NOTE_LEN 192
/* The verify message of a record among keys first..first+span-1 that stayed locked after the
 * run (wl_probe_locks gave -ETIMEDOUT), with wl_lock_note. Returns 1 (a failed check). */
int wl_leaked_lock_msg(const struct remora_worker *w, uint64_t first, unsigned span, char *msg,
		       size_t msglen);
/*
 * A verify scan's read-back: runs fn(arg) on w (wl_on_worker); the scan leaves its result in
 * *scan_rc and, while it probes locks, its batch's first key in *locked_key. 0 when the store
 * was read back; else the check's result with msg set: 1 for a record that stayed locked among
 * span keys from *locked_key (wl_leaked_lock_msg), or the failure code.
 */
int wl_read_back(struct remora_worker *w, void (*fn)(void *arg), void *arg, const int *scan_rc,
		 const uint64_t *locked_key, unsigned span, char *msg, size_t msglen);

/*
 * Loads records [begin, end) on w (outside coroutines), flushes the engine's load batches,
 * and calls progress (may be NULL) after every chunk with the records queued so far.
 */
int wl_load_range(const struct wl *wl, struct remora_worker *w, uint64_t begin, uint64_t end,
		  void (*progress)(void *arg, uint64_t done), void *arg);

#endif
