/* SPDX-License-Identifier: MIT */
/*
 * Protocol plug-ins: one versioned ops table per protocol (libfabric style: size first, slots
 * only ever appended; a missing slot is filled with a stub at db open, so none is NULL).
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
 */
#ifndef REMORA_TXN_PROTOCOL_H
#define REMORA_TXN_PROTOCOL_H

#include <stddef.h>
#include <stdint.h>

#include "txn.h"

enum remora_proto_flags {
	REMORA_PROTO_NEEDS_TS = 1u << 0,   /* uses the timestamp service per transaction */
	REMORA_PROTO_NEEDS_MSG = 1u << 1,  /* sends compute-node messages (CN lock tables) */
	REMORA_PROTO_NEEDS_MCAS = 1u << 2, /* locks with masked-CAS */
};

struct remora_proto_ops {
	uint32_t size;    /* sizeof(struct remora_proto_ops) the protocol was built with */
	const char *name;
	uint32_t codec;   /* enum remora_codec_id of its records */
	uint32_t flags;   /* enum remora_proto_flags */
	int (*db_init)(struct remora_db *db);
	void (*db_fini)(struct remora_db *db);
	int (*begin)(struct remora_tx *tx);
	int (*fetch)(struct remora_tx *tx, struct txn_obj *const *objs, unsigned n);
	int (*write)(struct remora_tx *tx, struct txn_obj *o, const void *value);
	int (*insert)(struct remora_tx *tx, struct txn_obj *o, const void *value);
	int (*remove)(struct remora_tx *tx, struct txn_obj *o);
	int (*commit)(struct remora_tx *tx);
	void (*abort)(struct remora_tx *tx);
};

extern const struct remora_proto_ops remora_proto_ford;
extern const struct remora_proto_ops remora_proto_pandora;

/*
 * The protocol named name (NULL: $REMORA_PROTOCOL, else "ford"), merged over stubs into *out.
 * Returns 0, or -REMORA_ECONFIG with err naming the protocols (unknown, or not built yet).
 */
int remora_proto_select(const char *name, struct remora_proto_ops *out, char *err, size_t errlen);

#endif
