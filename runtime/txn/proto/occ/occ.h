/* SPDX-License-Identifier: MIT */
/*
 * One-sided OCC over lock+version records: the machinery FORD and Pandora share. The two
 * plug-ins (ford.c, pandora.c) differ only in the policy below, which each sets at db open;
 * REMORA_MUTATE switches then bend it (docs/engine.md, "Mutation switches").
 */
#ifndef REMORA_TXN_OCC_H
#define REMORA_TXN_OCC_H

#include <stdbool.h>
#include <stddef.h>

#include "txn/protocol.h"
#include "txn/txn.h"

struct occ_policy {
	const char *name;
	bool pill;               /* PILL lock words (coordinator id + tx seq), stray stealing,
				  * aborts on live locks seen by reads */
	bool read_locks;         /* execution reads abort on a live lock (Pandora; FORD ignores) */
	bool validate_locks;     /* validation READs {lock, version} (16 B), not the version alone */
	bool log_after_validate; /* Pandora variant A: log only once validation passed; else FORD:
				  * log in the validation round trip */
	bool log_inserts;        /* inserts get undo entries */
	bool log_servers;        /* log to the coordinator's f+1 log servers (Pandora); else to
				  * every node holding a replica of a written record (FORD) */
};

/* db->proto_priv: the policy first (what pol() reads), then shared mutable state. */
struct occ_db {
	struct occ_policy pol;
	bool stall; /* failed_locks = stall: wait on a dead node's lock until it is recovered */
	uint64_t next_check_ns[REMORA_MAX_CN]; /* failed-ids READs, rate-limited per owner cn */
};

/* Byte offset, in every memory node's pool, of the failed-ids word holding coordinator id. */
static inline uint64_t occ_failed_word_off(uint16_t id)
{
	return REMORA_STORE_CONTROL_OFF + offsetof(struct store_control, failed_ids) +
	       (uint64_t)(id >> 6) * 8;
}

/* Installs policy p (adjusted by db->mutations) as db->proto_priv (a struct occ_db). */
int occ_db_init(struct remora_db *db, const struct occ_policy *p);
void occ_db_fini(struct remora_db *db);
void occ_describe_lock(const struct remora_db *db, uint64_t w, char *buf, size_t len);

int occ_coord_init(struct txn_coord *c);
void occ_coord_fini(struct txn_coord *c);
int occ_begin(struct remora_tx *tx);
int occ_fetch(struct remora_tx *tx, struct txn_obj *const *objs, unsigned n);
int occ_write(struct remora_tx *tx, struct txn_obj *o, const void *value);
int occ_insert(struct remora_tx *tx, struct txn_obj *o, const void *value);
int occ_remove(struct remora_tx *tx, struct txn_obj *o);
int occ_commit(struct remora_tx *tx);
void occ_abort(struct remora_tx *tx);

/* Recovery (recover.c): whole cluster from the undo logs; online not yet (-EOPNOTSUPP). */
int occ_recover_cluster(const struct store_db *st, struct remora_chan *ch, uint32_t flags,
			struct recovery_report *rep, char *err, size_t errlen);
int occ_recover_online(struct remora_db *db, const uint16_t *failed_cn, unsigned n);

/*
 * The OCC private state: OCC_PROTO_OPS declares the sizes, the generic layer allocates and
 * zeroes it (o->priv, tx->priv, c->priv).
 */
struct occ_obj {
	uint64_t version;    /* version as fetched */
	uint64_t cas_old;    /* lock CAS result */
	uint64_t steal_from; /* PILL: stray lock word to take over with the next CAS, or 0 */
	uint64_t slot_word;  /* insert: the index slot value (source of the backup WRITEs) */
	uint64_t check[2];   /* validation READ target: {lock, version} */
	uint32_t retries;    /* torn READs of this record in a row */
};

struct occ_tx {
	uint64_t lock; /* lock word value this transaction locks with */
};

struct occ_coord {
	unsigned char *logbuf; /* the log record is built here (log_slot_bytes) */
	int stranded; /* a commit failed after its log: no more transactions (its error) */
};

/*
 * The ops table of an OCC plug-in: every op is the shared occ_* one; only its name, db_init
 * (which installs its policy) and online recovery (NULL: none, so nobody claims a failed
 * node's recovery for nothing) are its own.
 */
#define OCC_PROTO_OPS(proto_name, proto_db_init, proto_recover_online)                             \
	{                                                                                          \
		.size = sizeof(struct txn_proto_ops),                                           \
		.name = (proto_name),                                                              \
		.codec = REMORA_CODEC_LOCKVER,                                                     \
		.flags = 0,                                                                        \
		.db_init = (proto_db_init),                                                        \
		.db_fini = occ_db_fini,                                                            \
		.begin = occ_begin,                                                                \
		.fetch = occ_fetch,                                                                \
		.write = occ_write,                                                                \
		.insert = occ_insert,                                                              \
		.remove = occ_remove,                                                              \
		.commit = occ_commit,                                                              \
		.abort = occ_abort,                                                                \
		.tx_priv_size = sizeof(struct occ_tx),                                             \
		.obj_priv_size = sizeof(struct occ_obj),                                           \
		.coord_priv_size = sizeof(struct occ_coord),                                       \
		.coord_init = occ_coord_init,                                                      \
		.coord_fini = occ_coord_fini,                                                      \
		.recover = occ_recover_cluster,                                                    \
		.recover_online = (proto_recover_online),                                          \
		.describe_lock = occ_describe_lock,                                                \
	}

#endif
