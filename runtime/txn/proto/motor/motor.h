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

/* Per database (db->proto_priv). */
struct motor_db {
	enum motor_isolation iso;
	struct ts_service ts; /* the memory-node counter (docs/motor.md, "Timestamps") */
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
	uint32_t reuse;     /* cell the commit writes (a free one, else the oldest) */
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
};

/* "sr" | "si" (NULL or empty: sr); -REMORA_ECONFIG otherwise. */
int motor_isolation_parse(const char *s, enum motor_isolation *out);

/* Whole-cluster recovery from the redo logs (recover.c). */
int motor_recover_cluster(const struct store_db *st, struct remora_chan *ch, uint32_t flags,
			  struct recovery_report *rep, char *err, size_t errlen);

#endif
