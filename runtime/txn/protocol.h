/* SPDX-License-Identifier: MIT */
/*
 * Protocol plug-ins: one versioned ops table per protocol (libfabric style: size first, slots
 * only ever appended; a missing slot is filled with a stub at db open, so none is NULL but
 * recover, whose absence means "cannot recover a crashed database").
 *
 * The generic layer (tx.c) owns the API rules (staging, poisoning, own-write visibility), the
 * object set and the index lookups. A protocol owns everything that touches concurrency
 * control: which verbs fetch an object, how locks, versions and timestamps work, validation,
 * logging, commit and abort. docs/engine.md ("Protocol interface") says how each of ford,
 * pandora, motor, lotus, oocc, crest and the declock lock service plug in.
 *
 * Hook contract:
 *   begin   tx->id, tx->seq and tx->lock are set; take a start timestamp, reset state.
 *   fetch   objs are resolved (OBJ_HAVE_REC with off, or absent); bring each one's image into
 *           o->img (OBJ_FETCHED, OBJ_FOUND), taking locks for OBJ_WANT_RW ones as the protocol
 *           does at execution time. Return 0, -EAGAIN when some object turned out to hold
 *           another key (txn_unresolve() was called: the caller resolves and calls again), or
 *           an abort/failure (the hook has released what it holds).
 *   write   o is fetched RW and present; stage value (usually: copy to o->newval).
 *   insert  o is fetched RW (locked if a record exists) and absent; create/claim its record.
 *   remove  o is fetched RW and present; stage a delete.
 *   commit  validate, log, write, unlock; 0 or -REMORA_EABORT (everything released) or failure.
 *   abort   release everything (the handle may be poisoned already).
 *   coord_init / coord_fini   per coordinator, at worker creation / destruction.
 *   before_resolve   at each fetch, before any index lookup (lock-first protocols).
 * Private state: the protocol declares its sizes (tx_priv_size, obj_priv_size,
 * coord_priv_size); the generic layer allocates and zeroes it (see the struct).
 */
#ifndef REMORA_TXN_PROTOCOL_H
#define REMORA_TXN_PROTOCOL_H

#include <stddef.h>
#include <stdint.h>

#include "txn.h"

/* What a protocol needs from the cluster; checked at db open (txn_proto_check). */
enum txn_proto_flags {
	REMORA_PROTO_NEEDS_TS = 1u << 0,   /* uses the timestamp service per transaction */
	REMORA_PROTO_NEEDS_MSG = 1u << 1,  /* sends compute-node messages (CN lock tables) */
	REMORA_PROTO_NEEDS_MCAS = 1u << 2, /* locks with masked-CAS */
};

#include <stdbool.h>

#include <remora/transport.h>

#include "recovery/recovery.h"

struct txn_proto_ops {
	uint32_t size;    /* sizeof(struct txn_proto_ops) the protocol was built with */
	const char *name;
	uint32_t codec;   /* enum codec_id of its records */
	uint32_t flags;   /* enum txn_proto_flags */
	int (*db_init)(struct remora_db *db);
	void (*db_fini)(struct remora_db *db);
	int (*begin)(struct remora_tx *tx);
	int (*fetch)(struct remora_tx *tx, struct txn_obj *const *objs, unsigned n);
	int (*write)(struct remora_tx *tx, struct txn_obj *o, const void *value);
	int (*insert)(struct remora_tx *tx, struct txn_obj *o, const void *value);
	int (*remove)(struct remora_tx *tx, struct txn_obj *o);
	int (*commit)(struct remora_tx *tx);
	void (*abort)(struct remora_tx *tx);
	/*
	 * Private state the generic layer allocates for the protocol, so that no protocol's
	 * fields live in the shared structs: per transaction (tx->priv, zeroed at every begin),
	 * per object (o->priv, zeroed when the object joins the set; it lives in the arena) and
	 * per coordinator (c->priv, zeroed once when the worker is created). 0: none (NULL).
	 */
	uint32_t tx_priv_size;
	uint32_t obj_priv_size;
	uint32_t coord_priv_size;
	/* After c->priv exists: set up what it points to (buffers sized by the db); 0 or -errno.
	 * coord_fini undoes it (also after a failed coord_init) before c->priv is freed. */
	int (*coord_init)(struct txn_coord *c);
	void (*coord_fini)(struct txn_coord *c);
	/*
	 * Recovery. The protocol owns its log body (what a log record holds: undo images, redo
	 * images, metadata, dependency lists), the checksum and VALID rule that makes a log count,
	 * and these two entry points:
	 *   recover         whole cluster (every compute node died; recovery_run /
	 *                   `remora recover`): st is the opened database (any codec: the one it
	 *                   was formatted with), ch a channel to every memory node, flags enum
	 *                   recovery_flags; fills rep; 0 or a code with one line in err.
	 *                   NULL: this protocol cannot recover a crashed database.
	 *   recover_online  on a live cluster, after compute nodes failed_cn[0..n-1] were
	 *                   declared dead: release and decide what their coordinators left.
	 *                   -EOPNOTSUPP when the protocol has none (the stub).
	 */
	int (*recover)(const struct store_db *st, struct remora_chan *ch, uint32_t flags,
		       struct recovery_report *rep, char *err, size_t errlen);
	int (*recover_online)(struct remora_db *db, const uint16_t *failed_cn, unsigned n);
	/*
	 * Lock-first fetch: runs before the index is consulted for objs (those a fetch is about
	 * to resolve and fetch; none is resolved by this fetch yet), so a protocol that must hold
	 * its locks before any memory-node READ (LOTUS: compute-node lock tables) takes them here.
	 * 0, or an abort/failure (the hook has released what it holds). Stub: nothing.
	 */
	int (*before_resolve)(struct remora_tx *tx, struct txn_obj *const *objs, unsigned n);
	/*
	 * Compute-node messages. A protocol with REMORA_PROTO_NEEDS_MSG, or whose db_init set
	 * db->wants_msg, gets one RPC layer per db (db->rpc, <remora/rpc.h>) and one endpoint
	 * per worker, whose dispatcher runs in the
	 * worker's scheduler (txn_rpc_ep). rpc_init runs once at db open, after db_init and before
	 * any endpoint opens: it registers the protocol's handlers. 0 or -errno. Stub: nothing.
	 */
	int (*rpc_init)(struct remora_db *db, struct remora_rpc *rpc);
	/*
	 * Bytes of the protocol's own state on memory node 0 past the store layout, at
	 * store_tail_off (declock: its lock table). Format zeroes them (what fits the pool), so a
	 * kept pool formatted again starts with that state fresh. 0: none.
	 */
	uint64_t tail_bytes;
	/*
	 * Runs in remora_worker_destroy once the worker's coordinators are done, before its
	 * endpoint closes: a protocol whose compute nodes serve each other's requests (LOTUS's
	 * lock tables) keeps serving here until its peers are done too. Stub: nothing.
	 */
	void (*worker_drain)(struct remora_worker *w);
	/*
	 * Diagnostics: lock word w in words (its owner, and whether it counts as failed here),
	 * for remora_worker_last_lock. Stub: the word in hex.
	 */
	void (*describe_lock)(const struct remora_db *db, uint64_t w, char *buf, size_t len);
	/*
	 * The compute node that owns key's locks, for routing (<remora/route.h>): 0 with *cn
	 * set. Stub: -EOPNOTSUPP (the protocol's locks are not on compute nodes).
	 */
	int (*key_home)(const struct remora_db *db, uint32_t table, uint64_t key, uint16_t *cn);
};

/*
 * The protocols built into this binary, NULL-terminated: generated by meson from the
 * plug-ins each runtime/txn/proto/<folder>/meson.build adds to protocol_names.
 */
extern const struct txn_proto_ops *const txn_proto_registry[];

/* The registry's names joined by sep ("ford|pandora"); returns the length it needed. */
size_t txn_proto_names(char *buf, size_t len, const char *sep);

/* The flags as words ("timestamps, messages, masked-CAS"; "-" when none). */
void txn_proto_flags_str(uint32_t flags, char *buf, size_t len);

/*
 * Whether protocol p can run on a transport with capabilities caps, timestamps from the
 * memory-node counter or not: NEEDS_MCAS wants the masked-CAS verb (native, or emulated by
 * the backend, which counts the verbs it adds), NEEDS_MSG compute-node messages, NEEDS_TS
 * with counter timestamps FAA. Returns 0, or -REMORA_ECONFIG with one line in err.
 */
int txn_proto_check(const struct txn_proto_ops *p, const struct remora_caps *caps,
		    bool ts_counter, char *err, size_t errlen);

/* Test hook (internal): one more protocol txn_proto_select() finds by its name. */
extern const struct txn_proto_ops *txn_proto_test;

/*
 * The protocol named name (NULL: $REMORA_PROTOCOL, else "ford"), merged over stubs into *out.
 * Returns 0, or -REMORA_ECONFIG with err naming the protocols this binary has.
 */
int txn_proto_select(const char *name, struct txn_proto_ops *out, char *err, size_t errlen);

#endif
