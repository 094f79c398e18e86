/* SPDX-License-Identifier: MIT */
/*
 * CREST (cell-level concurrency control for disaggregated transactions): records are split into
 * cells, each with a lock bit and an epoch in the record's 64-byte header (store/codec_cell.c).
 * One masked-CAS locks every cell a transaction writes in a record, one READ of the header
 * validates every cell it read there. docs/crest.md has the protocol and its decisions.
 */
#ifndef REMORA_TXN_CREST_H
#define REMORA_TXN_CREST_H

#include <stdbool.h>
#include <stdint.h>

#include "txn/protocol.h"
#include "txn/txn.h"

/* The EN wraparound guard: past this many microseconds since the first READ, validation
 * compares whole version words (EN:16 | TS:48) instead of the 16-bit epochs. */
#define CREST_EN_WRAP_US 65536u

struct crest_db {
	bool cell_level;  /* false: crest_record, every access takes every cell */
	bool localized;   /* localized execution (crest_localized; never for crest_record) */
	uint32_t writers_max; /* crest_local_writers: admissions per hold (0: no bound) */
	bool node_cache;  /* crest_node_cache: one record cache per node (else per worker) */
	uint64_t clock;   /* Lamport clock of commit timestamps (atomic max) */
	struct crest_cache *cache; /* the compute node's record cache (localized), or NULL */
};

/* ---- localized execution (local.c; docs/crest.md, "Localized execution") ---------------- */

#define CREST_DEPS_MAX 32u /* dependencies one transaction may gather; more: it aborts */

/* LOST: committed (logged), but its write-back failed: left to recovery. */
enum crest_vstate {
	CREST_V_PENDING,
	CREST_V_COMMITTED,
	CREST_V_APPLIED,
	CREST_V_ABORTED,
	CREST_V_LOST,
};

/*
 * An uncommitted or committed-but-unwritten local version of some cells of a record: made by
 * a transaction when its execution ends, read by later local transactions instead of the
 * memory node. Reference counted: the record's list, its creator (until the version is
 * written back, the creator's log must not be overwritten; a LOST one stays for good), and
 * each dependent.
 */
struct crest_lver {
	struct crest_lver *older;      /* next older version in the record's list */
	uint64_t txid;                 /* its creator's transaction id (logged by dependents) */
	uint64_t cells;                /* cells it wrote */
	uint64_t ts_exec;              /* its creator's execution timestamp */
	uint64_t ts;                   /* commit timestamp (COMMITTED and later) */
	uint32_t refs;
	uint8_t state;                 /* enum crest_vstate */
	uint64_t ver[CODEC_CELL_MAX];  /* version word of each written cell (TS once committed) */
	unsigned char val[];           /* the value layout; only its cells are meaningful */
};

/*
 * The record cache entry of the compute node (guarded by its cache's lock): the remote cell
 * locks held for every local writer at once, the record as read when they were taken, the
 * local lock, and the version list, newest first.
 */
struct crest_lobj {
	struct crest_lobj *next;       /* hash chain */
	const struct store_table *t;
	uint32_t table;
	uint16_t primary;
	bool applying;                 /* a write-back is in flight */
	bool lost;                     /* a write-back failed: left as it is to recovery */
	uint64_t key, off;
	uint32_t refs;                 /* transactions using it */
	uint32_t writers;              /* admitted read-write transactions not finished */
	uint32_t admitted;             /* admissions under the current hold (gap 5 bound) */
	uint64_t held;                 /* cell lock bits held on the primary for this node */
	const struct remora_tx *owner; /* the local lock: the admitted writer executing */
	struct crest_lver *newest;
	unsigned char *base;           /* the record as READ when held cells were taken */
	unsigned char *wb;             /* the write-back image */
};

/*
 * The compute node's record cache, shared by its workers. Its lock is owned by a coroutine
 * (or a thread outside one) and is re-entrant; crest.c holds it while it runs and lets it go
 * at every point where it may yield (a doorbell, a wait), where the coroutines of one worker
 * could always interleave. So the workers of a node interleave at exactly those points, as one
 * worker's coroutines do, and the protocol's rules need no second argument. A node with one
 * worker takes no lock (shared false).
 */
struct crest_cache {
	struct crest_lobj **bucket;
	uint32_t mask;
	uint64_t ts_exec;              /* execution timestamps of this compute node */
	uint32_t live;                 /* entries (tests: none left after a run) */
	bool shared;                   /* more than one worker: the lock is taken */
	const void *owner;             /* the lock's holder, or NULL (atomic) */
	uint32_t depth;                /* its re-entries (written by the holder only) */
	uint64_t releases;             /* times the lock was let go (atomic) */
};

struct crest_obj {
	uint64_t locked;     /* cell lock bits this transaction holds */
	uint64_t want;       /* bits the lock masked-CAS of this round asks for */
	uint64_t mcas_old;   /* its result */
	uint64_t unlock_old; /* result of the unlock masked-CAS (tracked) */
	uint64_t have;       /* cells whose epoch and version were recorded */
	uint64_t used;       /* the header's used word as fetched */
	uint64_t slot_word;  /* insert: the index slot value */
	uint64_t ver[CODEC_CELL_MAX]; /* version words of the cells as fetched */
	unsigned char *val;  /* the value as fetched, assembled from the cells */
	unsigned char *chk;  /* validation READ target (header line, or the record) */
	uint64_t vmask;      /* cells that validation READ checks */
	uint64_t lmask;      /* cells that validation checks in the worker's cache */
	uint32_t retries;    /* torn or inconsistent READs in a row */
	struct crest_lobj *lo; /* localized: the record's cache entry (a reference), or NULL */
	struct crest_lver *mine; /* localized: the version this transaction made of it */
	bool writer;         /* localized: admitted as a writer of lo */
	bool alone;          /* localized off for this object (insert, delete: it locks alone) */
};

struct crest_tx {
	uint64_t ts_seen;    /* largest TS of a cell read */
	uint64_t t_first_us; /* first READ of the transaction (0: none yet) */
	uint64_t ts_exec;    /* localized: drawn after the first block's local locks (0: not yet) */
	uint32_t blocks;     /* fetches so far: the first may wait for local locks, later ones not */
	uint32_t ndeps;
	struct crest_lver *deps[CREST_DEPS_MAX]; /* versions read that were not committed */
};

/* What the commit doorbell writes for one object (crest.c, plan_wb). */
struct crest_wb {
	unsigned char *img;     /* image whose cells and epochs go out, or NULL */
	uint64_t cells;         /* which */
	uint64_t unlock;        /* lock bits cleared on the primary after them */
	struct crest_lobj *lo;  /* a write-back of the worker's cache entry, or NULL */
};

struct crest_coord {
	unsigned char *logbuf;
	int stranded;
	struct crest_cache *cache; /* the compute node's (crest_db), or the worker's
				    * (crest_node_cache false) */
	struct crest_lver **pins;  /* its last commit's versions not written back yet */
	uint32_t npins, pins_cap;
};

/*
 * A crest log: the header {tx id, VALID, coordinator, entries n, length, checksum;
 * reserved[0] = commit timestamp, reserved[1] = dependencies d}, n entries, then the d
 * transaction ids this one read uncommitted local versions of (all committed before it
 * logged, so recovery needs them for nothing but the record).
 */
#define CREST_LOG_DEPS(h) ((h)->reserved[1])

/* Bytes of a log entry's image for these written cells: the used word, then per cell its
 * version and value padded to 8 bytes. */
static inline uint32_t crest_log_len(const struct codec_geom *g, uint64_t cells)
{
	uint32_t len = 8;

	for (unsigned c = 0; c < g->nparts; c++) {
		uint32_t off, clen;

		if (!(cells >> c & 1))
			continue;
		codec_cell_span(g->cells, g->value_size, c, &off, &clen);
		len += 8 + ((clen + 7) & ~7u);
	}
	return len;
}

/* Test hooks: microseconds added to the clock the EN wraparound guard reads, and its
 * threshold (CREST_EN_WRAP_US; a test of the epoch check alone sets it out of reach, since a
 * loaded machine may take 65 ms between a READ and validation). */
extern uint64_t crest_clock_skew_us;
extern uint64_t crest_en_wrap_us;

int crest_cache_create(struct crest_cache **out, bool shared);
void crest_cache_destroy(struct crest_cache *c);
/* The cache's lock (NULL c or an unshared cache: nothing): take it, or enter it again. */
void crest_cache_lock(struct crest_cache *c);
void crest_cache_unlock(struct crest_cache *c);
/* Lets it go entirely before a yield, returning the depth to give crest_cache_resume after
 * (0: the caller did not hold it). */
uint32_t crest_cache_suspend(struct crest_cache *c);
void crest_cache_resume(struct crest_cache *c, uint32_t depth);
/* A wait's turn: lets the lock go, yields until another holder has let it go too (or just
 * yields, unshared), takes it back. */
void crest_cache_wait(struct crest_cache *c);
/* The entry of o's record; create: make one (a reference is taken either way). NULL: none
 * (or out of memory when create). */
struct crest_lobj *crest_lobj_get(struct crest_cache *c, const struct txn_obj *o, bool create);
void crest_lobj_put(struct crest_cache *c, struct crest_lobj *lo);
/* Cell c as this worker sees it while lo holds it: the newest live version that wrote it, or
 * the base. Copies the value into val (unless NULL), returns the version word, *from: the
 * version or NULL. */
uint64_t crest_lobj_cell(const struct crest_lobj *lo, unsigned c, void *val,
			 struct crest_lver **from);
struct crest_lver *crest_lver_new(struct crest_lobj *lo, uint64_t txid, uint64_t cells,
				  uint64_t ts_exec, const void *val, const uint64_t *ver);
void crest_lver_put(struct crest_lver *v);
/* Takes v out of lo's list (it aborted), dropping the list's reference. */
void crest_lobj_unlink(struct crest_lobj *lo, struct crest_lver *v);
/* The write-back image in lo->wb: the base with each cell's newest committed version and its
 * epoch; returns the cells it changed. */
uint64_t crest_lobj_wb_image(struct crest_lobj *lo);
/* After a write-back landed: its versions APPLIED and out of the list, the hold ended. */
void crest_lobj_written_back(struct crest_lobj *lo);

int crest_recover_cluster(const struct store_db *st, struct remora_chan *ch, uint32_t flags,
			  struct recovery_report *rep, char *err, size_t errlen);

#endif
