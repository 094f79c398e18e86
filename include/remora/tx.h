/* SPDX-License-Identifier: MIT */
/*
 * Transactions over disaggregated memory.
 *
 *   remora_db      a compute node's view of the database: catalog, protocol, transport.
 *   remora_worker  one per thread: a channel, a scheduler, and its coordinators (coroutines).
 *   remora_tx      one transaction; begin, stage/read/write, then commit or abort.
 *
 * Error rule: -REMORA_EABORT means the transaction aborted (a normal outcome; the application
 * may retry it), any other negative code is a failure (stop). After an abort or failure the
 * handle is poisoned: only remora_tx_abort() is allowed. Commit and abort consume the handle.
 * An output argument is written only on success.
 */
#ifndef REMORA_TX_H
#define REMORA_TX_H

#include <stdbool.h>
#include <stdint.h>

#include <remora/sched.h>
#include <remora/transport.h>

#ifdef __cplusplus
extern "C" {
#endif

struct remora_db;
struct remora_worker;
struct remora_tx;
struct remora_cell_def;

#define REMORA_MAX_TABLES 32
#define REMORA_TABLE_NAME_MAX 24

struct remora_table_def {
	char name[REMORA_TABLE_NAME_MAX];
	uint32_t id;          /* 0 .. REMORA_MAX_TABLES-1, unique */
	uint32_t value_size;  /* bytes of a record's value */
	uint64_t max_records; /* capacity; the index is sized from it */
};

struct remora_db_cfg {
	uint32_t size;             /* sizeof(struct remora_db_cfg) */
	struct remora_transport *tp; /* attached to every memory node */
	const char *protocol;      /* ford | pandora | ...; NULL: $REMORA_PROTOCOL, else "ford" */
	uint16_t cn_id;            /* this compute node */
	uint16_t n_mn;             /* memory nodes 0 .. n_mn-1 */
	uint16_t replicas;         /* copies of each record (1 + backups); 0: default */
	uint16_t coords_per_worker; /* coordinators (coroutines) per worker thread */
	uint32_t workers;          /* worker threads of this compute node */
	const char *timestamps;    /* clock | counter; NULL: clock */
	const char *isolation;     /* MVCC protocols (motor): sr | si; NULL: $REMORA_ISOLATION,
				      else sr. Other protocols ignore it. Appended: a caller whose
				      size ends before it gets the NULL behaviour. */
	const char *failed_locks;  /* pandora: abort | stall, what a transaction does on a lock
				      of a dead compute node not recovered yet; NULL: abort.
				      $REMORA_FAILED_LOCKS, when set, overrides it. Appended
				      (size rule, as isolation). */
	uint32_t route;            /* 1: the routing service (<remora/route.h>) is on; 0: off.
				      Appended (size rule). */
};

/* Opens the database on already-attached memory nodes; checks each superblock and layout. */
REMORA_API int remora_db_open(const struct remora_db_cfg *cfg, struct remora_db **out);
REMORA_API void remora_db_close(struct remora_db *db);
/* db NULL: the calling thread's last remora_db_open()/remora_db_format() error. */
REMORA_API const char *remora_db_errmsg(const struct remora_db *db);
REMORA_API const char *remora_db_protocol(const struct remora_db *db);
/*
 * True once a commit of one of db's coordinators failed after its log may have landed: that
 * coordinator stopped, and its locks and log are left to the recovery of this compute node.
 * remora_db_close() then leaves the open counted (a restart of the memory nodes asks for
 * recovery), and a compute node of a cluster must end as a crash does, without leaving: the
 * memory nodes declare it dead and a live compute node recovers it online.
 */
REMORA_API bool remora_db_stranded(const struct remora_db *db);
/*
 * Lock words (ford, pandora) that this process's transactions won and neither gave back nor
 * left to recovery, by the engine's own count over the workers destroyed so far: 0 unless the
 * engine lost track of a lock. A lock found held after a run with this at 0 was given back by
 * the engine and set again below it (docs/rdma.md, problem 2).
 */
REMORA_API int64_t remora_db_locks_unreleased(const struct remora_db *db);

/*
 * Formats every memory node's pool for this layout and these tables (done once, by one
 * process, before any compute node opens the database). Returns -REMORA_EFULL when the tables
 * do not fit the pools.
 */
REMORA_API int remora_db_format(struct remora_transport *tp, uint16_t n_mn, uint16_t replicas,
				const char *protocol, const struct remora_table_def *tables,
				unsigned ntables);
/* Looks a table up by name; returns its id or -REMORA_ENOTFOUND. */
REMORA_API int remora_db_table(const struct remora_db *db, const char *name);
/* The catalog's definition of table id (as formatted); -REMORA_ENOTFOUND when there is none. */
REMORA_API int remora_db_table_def(const struct remora_db *db, unsigned id,
				   struct remora_table_def *out);

/* Bulk loading without transactions (before the run): writes (key, value) on every replica. */
REMORA_API int remora_db_load(struct remora_worker *w, uint32_t table, uint64_t key,
			      const void *value);

/* One worker per thread; index is 0 .. cfg.workers-1. */
REMORA_API int remora_worker_create(struct remora_db *db, unsigned index,
				    struct remora_worker **out);
REMORA_API void remora_worker_destroy(struct remora_worker *w);
REMORA_API struct remora_sched *remora_worker_sched(struct remora_worker *w);
REMORA_API struct remora_chan *remora_worker_chan(struct remora_worker *w);

enum remora_tx_flags {
	REMORA_TX_READ_ONLY = 1u << 0,
};

enum remora_access {
	REMORA_RD = 0, /* read only */
	REMORA_RW = 1, /* will be written: lock-based protocols lock it when fetched */
};

/* Begins a transaction on the calling coroutine's coordinator. */
REMORA_API int remora_tx_begin(struct remora_worker *w, unsigned flags, struct remora_tx **out);

/*
 * Stages an access; nothing is sent until remora_tx_fetch(), which issues every staged access
 * in one doorbell batch per memory node. buf receives the value (value_size bytes); *found is
 * set false when the key is absent (may be NULL). -REMORA_EABORT if the tx aborted.
 */
REMORA_API int remora_tx_stage(struct remora_tx *tx, uint32_t table, uint64_t key,
			       enum remora_access mode, void *buf, bool *found);
REMORA_API int remora_tx_fetch(struct remora_tx *tx);

/* Stage + fetch of one key. -REMORA_ENOTFOUND when absent (not an abort). */
REMORA_API int remora_tx_read(struct remora_tx *tx, uint32_t table, uint64_t key, void *buf);
REMORA_API int remora_tx_read_for_update(struct remora_tx *tx, uint32_t table, uint64_t key,
					 void *buf);
/* Sets the new value of a key already fetched with REMORA_RW. */
REMORA_API int remora_tx_write(struct remora_tx *tx, uint32_t table, uint64_t key,
			       const void *value);
REMORA_API int remora_tx_insert(struct remora_tx *tx, uint32_t table, uint64_t key,
				const void *value);
REMORA_API int remora_tx_delete(struct remora_tx *tx, uint32_t table, uint64_t key);

/* Consumes tx. 0: committed; -REMORA_EABORT: aborted; other: failure. */
REMORA_API int remora_tx_commit(struct remora_tx *tx);
/* Consumes tx. */
REMORA_API void remora_tx_abort(struct remora_tx *tx);

/* Why the last abort on this worker happened (for abort-rate-by-reason statistics). */
enum remora_abort_reason {
	REMORA_ABORT_NONE,
	REMORA_ABORT_LOCKED,     /* lock held by a live transaction */
	REMORA_ABORT_VALIDATION, /* a read version changed or was locked */
	REMORA_ABORT_USER,       /* the application called remora_tx_abort */
	REMORA_ABORT_NOT_FOUND,  /* an update/delete of a missing key, insert of a present one */
	REMORA_ABORT__COUNT
};
REMORA_API const char *remora_abort_reason_name(enum remora_abort_reason r);
REMORA_API enum remora_abort_reason remora_worker_last_abort(const struct remora_worker *w);
/*
 * The lock that last aborted a transaction of this worker, in words (its owner, and whether
 * this process counts that owner as failed), for saying who holds a lock that never goes.
 * -REMORA_ENOTFOUND when no abort on a lock was recorded (protocols with lock words record it).
 */
REMORA_API int remora_worker_last_lock(const struct remora_worker *w, char *buf, size_t len);


/* ---- additions (v0.1): format options, loading, diagnostics ----------------------------- */

/* Format options; remora_db_format() is remora_db_format_ex() with zeros (defaults). */
struct remora_db_format_cfg {
	uint32_t size;           /* sizeof(struct remora_db_format_cfg) */
	uint16_t n_mn;           /* memory nodes 0 .. n_mn-1, all attached to tp */
	uint16_t replicas;       /* copies of each record; 0: min(3, n_mn) */
	const char *protocol;    /* picks the record codec; NULL: $REMORA_PROTOCOL, else ford */
	const struct remora_table_def *tables;
	unsigned ntables;
	uint16_t max_cn;         /* compute nodes that will open the db; 0: 4 */
	uint16_t coords_per_cn;  /* coordinators (workers x coords_per_worker) per CN; 0: 64 */
	uint32_t log_slot_bytes; /* log bytes per coordinator and log server; 0: 32 KiB */
	/* Appended: the tables that are split into cells (column groups); NULL / 0: none. */
	const struct remora_cell_def *cells;
	unsigned ncells;
};
REMORA_API int remora_db_format_ex(struct remora_transport *tp,
				   const struct remora_db_format_cfg *cfg);

/*
 * Cells (column groups) of a table: cell i holds value bytes [start[i], start[i+1]) (the last
 * one runs to value_size). start[0] is 0, starts are 8-byte multiples below 2048, ascending.
 * A protocol with cell-level concurrency control (crest) locks and validates each cell on its
 * own; the others treat the record as one unit. A table without a cell definition is one cell.
 */
#define REMORA_MAX_CELLS 8
struct remora_cell_def {
	uint32_t table;
	uint32_t ncells;                    /* 1 .. REMORA_MAX_CELLS */
	uint32_t start[REMORA_MAX_CELLS];
};

/*
 * Cell-granular accesses. rd and wr are cell masks (bit i = cell i; UINT64_MAX: every cell);
 * wr != 0 makes the access REMORA_RW and names the cells a cell-level protocol locks when it
 * fetches. buf receives the whole value, but only the cells in rd | wr are read consistently.
 * write_cells takes the cells of mask from value (the whole value's layout); they must be among
 * the cells the key was fetched with in wr (else -EINVAL). The whole-value calls are these with
 * every cell.
 */
REMORA_API int remora_tx_stage_cells(struct remora_tx *tx, uint32_t table, uint64_t key,
				     uint64_t rd, uint64_t wr, void *buf, bool *found);
REMORA_API int remora_tx_read_cells(struct remora_tx *tx, uint32_t table, uint64_t key,
				    uint64_t rd, uint64_t wr, void *buf);
REMORA_API int remora_tx_write_cells(struct remora_tx *tx, uint32_t table, uint64_t key,
				     uint64_t mask, const void *value);

/* Sends this worker's queued loads and waits for them. Returns 0 or the first error. */
REMORA_API int remora_db_load_flush(struct remora_worker *w);
/* Records loaded (flushed and acknowledged) by every worker of db so far; any thread. */
REMORA_API uint64_t remora_db_load_count(const struct remora_db *db);

/* The last error message of this worker (context-local). */
REMORA_API const char *remora_worker_errmsg(const struct remora_worker *w);
/* The transaction's cluster-unique id; it is also the version its writes leave on records. */
REMORA_API uint64_t remora_tx_id(const struct remora_tx *tx);

#ifdef __cplusplus
}
#endif
#endif
