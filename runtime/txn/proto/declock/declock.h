/* SPDX-License-Identifier: MIT */
/*
 * declock: strict two-phase locking over the lock service (runtime/lock). Shared locks for
 * reads, exclusive for writes, all held until the commit WRITEs landed; records are read and
 * written with one-sided verbs; a redo log per written transaction (the footer records and
 * log of oocc, so oocc's whole-cluster recovery decides it). The lock type is the plug-in's:
 * declock (DecLock's CQL), declock_tf / declock_pf (hierarchical), declock_cas (CASLock),
 * declock_dslr (DSLR+). docs/declock.md, section 8.
 */
#ifndef REMORA_TXN_DECLOCK_H
#define REMORA_TXN_DECLOCK_H

#include <stdint.h>

#include "lock/lock.h"
#include "txn/protocol.h"
#include "txn/txn.h"

/* Locks of the table (keys map to them by hash: a lock stripes several keys). */
#define DL_LOCKS 8192u
/* CQL: C = 2^6 entries per lock; the hierarchical types need only C >= lock nodes. */
#define DL_CAP_LOG2 6u
/* Bytes reserved per lock whatever the type (the largest stride, CQL with C = 64). */
#define DL_STRIDE_MAX (8u + 8u * (1u << DL_CAP_LOG2))
/* The lock table past the store layout on memory node 0 (the protocol's tail_bytes). */
#define DL_TABLE_BYTES ((uint64_t)DL_LOCKS * DL_STRIDE_MAX)
/* RPC op codes: worker w's lock service takes DL_RPC_OP + 2w and the next one. */
#define DL_RPC_OP 32u
#define DL_MAX_WORKERS 16u
/*
 * A waiter's bound before it resets the lock. Long: a reset waits for every lock node to
 * answer, and a worker that finished its run (its endpoint closed) never does; deadlocks
 * cannot happen (ordered acquisition), so only a lost grant or a dead node needs a reset.
 */
#define DL_TIMEOUT_MS 20000u

struct dl_db {
	const char *type;     /* the lock service's type */
	uint64_t base_off;    /* the lock table, on memory node 0 */
	unsigned nodes;       /* lock-service nodes: max_cn x workers */
	struct lock_svc *svc[DL_MAX_WORKERS];
};

struct dl_obj {
	uint64_t version;   /* version as fetched */
	uint64_t slot_word; /* insert: the index slot value */
	uint64_t cas_old;   /* insert: the slot CAS result */
	uint64_t check;     /* revalidation of an absent key: its index slot */
	unsigned char *again; /* revalidation READ target (stride bytes) */
	uint32_t retries;
};

struct dl_need {
	uint32_t lock;
	uint8_t mode; /* enum lock_mode */
};

struct dl_coord {
	struct lock_cli *cli;
	struct lock_hold *holds; /* held locks, ascending by lock */
	unsigned nholds, holdcap;
	struct dl_need *need;
	unsigned needcap;
	unsigned char *logbuf;
	int stranded; /* a commit WRITE failed: no more transactions (its error) */
};

/* The lock of key (table, key): a hash over the table's lock stripes. */
uint32_t dl_lock_of(uint32_t table, uint64_t key);

#endif
