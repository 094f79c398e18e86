/* SPDX-License-Identifier: MIT */
/*
 * Motor (Zhang et al., OSDI'24): multi-version transactions over consecutive version tables
 * (the cvt codec, runtime/store/codec_cvt.c), serializable (SR) or snapshot isolation (SI).
 * docs/motor.md describes the protocol, its round trips and what differs from the paper.
 */
#ifndef REMORA_TXN_MOTOR_H
#define REMORA_TXN_MOTOR_H

#include <stdbool.h>
#include <stdint.h>

#include "txn/protocol.h"
#include "txn/txn.h"

enum motor_isolation {
	MOTOR_SR,
	MOTOR_SI,
};

/*
 * The cluster-wide GC horizon (gc.c; docs/motor.md, "Garbage collection"). Every value is a
 * lower bound of the T_start of every transaction running now or later: on this compute node
 * (local) or on the others (remote, as read from node 0's control area).
 */
struct motor_gc {
	uint64_t *active;   /* per local coordinator: 1 + T_start (or a bound below it) of its
			     * running transaction, 0: none (atomic) */
	unsigned ncoords;
	uint64_t seen;      /* newest timestamp this node took: later T_starts are above (atomic) */
	uint64_t remote;    /* the other nodes' horizon as last read (atomic, only grows) */
	uint64_t published; /* what this node last wrote to gc_horizon[cn] (atomic) */
};

/* Per database (db->proto_priv). */
struct motor_db {
	enum motor_isolation iso;
	struct ts_service ts; /* the memory-node counter (docs/motor.md, "Timestamps") */
	struct motor_gc gc;
};

/* Per object (o->priv). */
struct motor_obj {
	uint64_t cas_old;   /* lock CAS result */
	uint64_t ts;        /* timestamp of the version read (0: loaded, or absent) */
	uint64_t newest;    /* newest committed timestamp in the CVT when read */
	uint64_t slot_word; /* insert: the index slot value (source of the backup WRITEs) */
	uint64_t check;     /* phantom validation: the index slot as re-read */
	unsigned char *vimg; /* SR validation READ target (stride bytes, arena) */
	unsigned char *cell; /* commit: the new cell image (arena) */
	unsigned char *vbuf; /* deltas: an older version rebuilt (value_size bytes, arena) */
	uint32_t reuse;     /* cell the commit writes (a free one, else the oldest) */
	bool reclaim;       /* reuse holds a version: GC must allow it (gc.c) */
	bool empty;         /* the CVT held no version (a placeholder): the commit rewrites its
			     * header too */
	uint64_t next_ts;   /* ... the timestamp of the next newer version than that one */
	uint32_t retries;   /* torn READs in a row */
	uint32_t waits;     /* READs that found the CVT locked by another transaction */
};

struct motor_tx {
	uint64_t lock;     /* lock word: sequence << 16 | coordinator id */
	uint64_t t_start;
	uint64_t t_commit;
};

struct motor_coord {
	unsigned char *logbuf; /* the redo log is built here (log_slot_bytes) */
	uint64_t gc_word;      /* source of the GC horizon WRITE (gc.c), posted without waiting:
				* a newer value written over it is a valid bound too */
};

/*
 * GC horizon (gc.c). init publishes this node's first bound and reads the others' (at db
 * open, on a channel of its own); fini withdraws it. enter/started/leave frame a transaction
 * of tx's coordinator (before and after its T_start FAA, and at its end); took notes any other
 * timestamp it took (T_commit). may_reclaim says
 * whether a version whose next newer version has timestamp next may go: no running snapshot
 * on any compute node can need it. refresh re-reads the other nodes' bounds (one READ of node
 * 0, waited for). publish adds a WRITE of this node's bound to b (at most one) when it moved
 * far enough since the last one.
 */
int motor_gc_init(struct remora_db *db, struct motor_db *m);
void motor_gc_fini(struct remora_db *db, struct motor_db *m);
void motor_gc_enter(struct remora_tx *tx);
void motor_gc_started(struct remora_tx *tx);
void motor_gc_took(struct remora_tx *tx, uint64_t ts);
void motor_gc_leave(struct remora_tx *tx);
bool motor_gc_may_reclaim(struct remora_tx *tx, uint64_t next);
int motor_gc_refresh(struct remora_tx *tx);
struct txb;
void motor_gc_publish(struct remora_tx *tx, struct txb *b);

/* "sr" | "si" (NULL or empty: sr); -REMORA_ECONFIG otherwise. */
int motor_isolation_parse(const char *s, enum motor_isolation *out);

/* Whole-cluster recovery from the redo logs (recover.c). */
int motor_recover_cluster(const struct store_db *st, struct remora_chan *ch, uint32_t flags,
			  struct recovery_report *rep, char *err, size_t errlen);
/* Online recovery of dead, fenced compute nodes while the others run (recover.c). */
int motor_recover_online(struct remora_db *db, const uint16_t *failed_cn, unsigned n);

#endif
