/* SPDX-License-Identifier: MIT */
/*
 * What the protocols over lock+version records that fetch in rounds and keep a log of the
 * engine's format (the OCC core: FORD, Pandora; OOCC and its ablations) share: settling a
 * fetch round's images, and building the log record. Locks, steps and policies stay theirs.
 */
#include <errno.h>
#include <string.h>

#include "batch.h"
#include "store/codec.h"
#include "txn.h"

int txn_fetch_decode(struct remora_tx *tx, struct txn_obj *o, struct codec_rec *r)
{
	int rc = txn_db(tx)->st.codec->decode(&o->t->geom, o->img, 0, r);

	if (rc == -EAGAIN)
		return rc;
	if (rc)
		return txn_errf(tx, rc, "table %u: record at %#llx is corrupt", o->table,
				(unsigned long long)o->off);
	if (r->key != o->key || r->table != o->table) {
		if (o->flags & OBJ_LOCKED) {
			txb_unlock_now(tx, o); /* locked another key's record: give it back */
			tx->c->locks_given++;
		}
		txn_unresolve(tx, o);
		return 1;
	}
	return 0;
}

void txn_fetch_take(struct txn_obj *o, const struct codec_rec *r)
{
	o->value = r->value;
	o->flags |= OBJ_FETCHED;
	if (r->flags & REMORA_REC_VALID)
		o->flags |= OBJ_FOUND;
	else
		o->flags &= ~OBJ_FOUND;
	if (o->flags & OBJ_WANT_RW)
		o->flags |= OBJ_RW_DONE;
}

int txn_settle_round(struct remora_tx *tx, struct txn_obj *const *objs, unsigned n,
		     const enum txn_step *steps, txn_settle_fn settle, bool *again)
{
	for (unsigned i = 0; i < n; i++) {
		int rc;

		if (steps[i] == TXN_STEP_NONE)
			continue;
		rc = settle(tx, objs[i], steps[i]);
		if (rc == 1)
			*again = true;
		else if (rc < 0 && rc != -EAGAIN)
			return rc;
	}
	return 0;
}

uint8_t txn_log_op(const struct txn_obj *o)
{
	return (o->flags & OBJ_INSERT)	 ? REMORA_STORE_LOG_INS
	       : (o->flags & OBJ_DELETE) ? REMORA_STORE_LOG_DEL
					 : REMORA_STORE_LOG_UPD;
}

int txn_log_append(struct remora_tx *tx, unsigned char *buf, uint32_t *at, uint32_t cap,
		   const struct txn_obj *o, uint64_t old_version, const unsigned char *img)
{
	struct store_log_ent e = { 0 };
	uint32_t len = o->t->geom.stride;

	if (*at + sizeof(e) + len > cap)
		return txn_errf(tx, -REMORA_EFULL,
				"log: the write set needs more than the %u-byte log slot", cap);
	e.table = o->table;
	e.op = txn_log_op(o);
	e.key = o->key;
	e.off = o->off;
	e.old_version = old_version;
	e.new_version = tx->id;
	e.img_len = len;
	memcpy(buf + *at, &e, sizeof(e));
	memcpy(buf + *at + sizeof(e), img, len);
	*at += sizeof(e) + len;
	return 0;
}

void txn_log_seal(struct remora_tx *tx, unsigned char *buf, uint32_t len, uint16_t n,
		  uint64_t lock)
{
	struct store_log_hdr *h = (void *)buf;

	memset(h, 0, sizeof(*h));
	h->tx_id = tx->id;
	h->lock = lock;
	h->flags = REMORA_STORE_LOG_VALID;
	h->coord = tx->c->id;
	h->n = n;
	h->len = len;
	h->codec = txn_db(tx)->st.codec->id;
	h->csum = store_csum(REMORA_STORE_LOG_CSUM_SEED, h, len);
}
