/* SPDX-License-Identifier: MIT */
/*
 * Helpers of the transaction-engine suite: an in-process cluster (1-3 shm pools attached to
 * one transport), a formatted and opened database, workers, and small transaction shortcuts.
 */
#ifndef REMORA_TESTS_TTX_H
#define REMORA_TESTS_TTX_H

#include <stdint.h>

#include <remora/tx.h>

#include "tutil.h"

#define TTX_MAX_WORKERS 4
#define TTX_POOL_BYTES (8u << 20)

struct ttx {
	struct tu_ctx tu;
	struct remora_db *db;
	struct remora_worker *w[TTX_MAX_WORKERS];
	unsigned nw;
	unsigned nmn;
};

struct ttx_opts {
	const char *protocol;   /* NULL: ford */
	unsigned nmn;           /* 0: 1 */
	uint16_t replicas;      /* 0: default */
	unsigned workers;       /* 0: 1 */
	unsigned coords;        /* per worker; 0: 1 */
	uint64_t pool_bytes;    /* 0: TTX_POOL_BYTES */
	const struct remora_table_def *tables; /* NULL: one table "t" (id 0, 8-byte values, 1024) */
	unsigned ntables;
	unsigned max_cn;        /* compute nodes the database is formatted for; 0: 2 */
	const char *isolation;  /* remora_db_cfg.isolation (NULL: not given) */
	const char *failed_locks; /* remora_db_cfg.failed_locks (NULL: not given) */
	const struct remora_cell_def *cells; /* tables split into cells (NULL: none) */
	unsigned ncells;
};

/* Opens pools, formats, opens the db (protocol o->protocol) and creates the workers. */
void ttx_open(struct ttx *t, const struct ttx_opts *o);
/* Destroys workers and db, then the pools (also runs from the suite's .fini). */
void ttx_close(struct ttx *t);
/* Another compute node on t's transport: database cn_id (protocol, 1 worker of 1
 * coordinator, REMORA_MUTATE as set now) in *db; returns its worker. */
struct remora_worker *ttx_open_cn(struct ttx *t, const char *protocol, uint16_t cn_id,
				  struct remora_db **db);
/* Destroys the workers only (the db stays open, e.g. for remora_db_locks_unreleased). */
void ttx_close_workers(struct ttx *t);
void ttx_fini(void);

/* One-shot transactions on worker w (outside coroutines: coordinator 0). */
void ttx_put(struct ttx *t, unsigned w, uint32_t table, uint64_t key, uint64_t value);
/* 0 with *value set, or -REMORA_ENOTFOUND. */
int ttx_get(struct ttx *t, unsigned w, uint32_t table, uint64_t key, uint64_t *value);

/* Verb counters of worker w's channel. */
struct remora_counters ttx_counters(struct ttx *t, unsigned w);
/* Verbs of class op over all nodes in the difference b - a. */
uint64_t ttx_verbs(const struct remora_counters *a, const struct remora_counters *b,
		   enum remora_op op);

/* Verbs of each class, doorbells and READ bytes over all nodes in the difference b - a. */
struct ttx_vc {
	uint64_t read, write, cas, faa, doorbells, read_bytes;
};
struct ttx_vc ttx_vc(const struct remora_counters *a, const struct remora_counters *b);

/* Asserts the exact verbs of v: READs, WRITEs, CASes, FAAs and doorbells. */
#define TTX_VC_EQ(v, r, w, c, f, db)                                                             \
	do {                                                                                       \
		cr_assert_eq((v).read, (r), "READ %llu != %d", (unsigned long long)(v).read, (r));   \
		cr_assert_eq((v).write, (w), "WRITE %llu != %d", (unsigned long long)(v).write, (w)); \
		cr_assert_eq((v).cas, (c), "CAS %llu != %d", (unsigned long long)(v).cas, (c));       \
		cr_assert_eq((v).faa, (f), "FAA %llu != %d", (unsigned long long)(v).faa, (f));       \
		cr_assert_eq((v).doorbells, (db), "doorbells %llu != %d",                             \
			     (unsigned long long)(v).doorbells, (db));                                \
	} while (0)

#endif
