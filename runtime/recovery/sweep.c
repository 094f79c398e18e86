/* SPDX-License-Identifier: MIT */
/* The lock sweep of whole-cluster recovery (sweep.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store/codec.h"
#include "sweep.h"

#define SWEEP_BATCH 256u /* verbs per store_exec */

struct sweep {
	const struct sweep_cfg *cfg;
	struct remora_wr wrs[SWEEP_BATCH];
	unsigned nwr;
};

static int sweep_flush(struct sweep *s)
{
	int rc = store_exec(s->cfg->ch, s->wrs, s->nwr);

	s->nwr = 0;
	if (rc && s->cfg->err && s->cfg->errlen)
		snprintf(s->cfg->err, s->cfg->errlen, "recover: verbs failed: %s",
			 remora_strerror(rc));
	return rc;
}

static int sweep_queue(struct sweep *s, struct remora_wr wr)
{
	if (s->nwr == SWEEP_BATCH) {
		int rc = sweep_flush(s);

		if (rc)
			return rc;
	}
	s->wrs[s->nwr++] = wr;
	return 0;
}

/* One READ, waited for. */
static int sweep_read(struct sweep *s, uint16_t node, uint64_t off, void *dst, uint32_t len)
{
	int rc = sweep_queue(s, store_wr_read(s->cfg->st, node, off, dst, len));

	return rc ? rc : sweep_flush(s);
}

static int sweep_persist(struct sweep *s, uint16_t node, uint64_t off, uint64_t len)
{
	int rc = remora_persist(s->cfg->ch, node, off, len);

	if (rc && s->cfg->err && s->cfg->errlen)
		snprintf(s->cfg->err, s->cfg->errlen, "recover: persisting node %u: %s", node,
			 remora_strerror(rc));
	return rc;
}

/* Record slots handed out so far in table t (the allocation cursor on node 0). */
static int sweep_used_records(struct sweep *s, const struct store_table *t, uint64_t *n)
{
	uint64_t cursor = 0;
	int rc = sweep_read(s, 0, t->ent.cursor_off, &cursor, 8);

	*n = cursor < t->ent.capacity ? cursor : t->ent.capacity;
	return rc;
}

/*
 * Marks in pub (one bit per record slot of t) the records node m's index points to. A record
 * no slot points to was never published (an insert cut before its slot CAS, or a backup that
 * never got its slot): whatever it holds, no read can reach it.
 */
static int sweep_published(struct sweep *s, uint16_t m, const struct store_table *t,
			   uint64_t *pub)
{
	const uint64_t per = s->cfg->buflen / sizeof(struct store_bucket);
	const struct store_bucket *bk = (const void *)s->cfg->buf;
	int rc = 0;

	for (uint64_t b0 = 0; b0 < t->ent.nbuckets && !rc; b0 += per) {
		uint64_t k = t->ent.nbuckets - b0 < per ? t->ent.nbuckets - b0 : per;

		rc = sweep_read(s, m, store_bucket_off(t, b0), s->cfg->buf,
				(uint32_t)(k * sizeof(*bk)));
		for (uint64_t b = 0; !rc && b < k; b++) {
			for (unsigned j = 0; j < REMORA_STORE_BUCKET_SLOTS; j++) {
				uint64_t off = bk[b].slot[j] & REMORA_STORE_SLOT_OFF_MASK, i;

				if (!bk[b].slot[j] || !store_rec_valid(t, off))
					continue;
				i = (off - t->ent.rec_off) / t->geom.stride;
				pub[i / 64] |= UINT64_C(1) << (i % 64);
			}
		}
	}
	return rc;
}

/* Counts record first + i as torn when it holds something its codec cannot decode. */
static void sweep_torn(struct sweep *s, const struct store_table *t, const unsigned char *img,
		       uint64_t n, const uint64_t *pub)
{
	struct codec_rec rec;

	if (!codec_slot_used(&t->geom, img) || s->cfg->st->codec->decode(&t->geom, img, 0, &rec) == 0)
		return;
	if ((pub[n / 64] >> (n % 64)) & 1)
		s->cfg->rep->torn++;
	else
		s->cfg->rep->torn_unpublished++;
}

/* Scans records [first, first + k) of t on node m (already read into cfg->buf). */
static int sweep_chunk(struct sweep *s, uint16_t m, const struct store_table *t,
		       uint64_t first, uint64_t k, const uint64_t *pub, uint64_t *olds,
		       bool *released)
{
	const struct codec_geom *g = &t->geom;
	struct recovery_report *rep = s->cfg->rep;
	uint64_t *want = olds + k;
	unsigned nc = 0;
	int rc;

	for (uint64_t i = 0; i < k; i++) {
		const unsigned char *img = s->cfg->buf + i * g->stride;
		uint64_t lock;

		memcpy(&lock, img + g->lock_off, 8);
		sweep_torn(s, t, img, first + i, pub);
		if (!lock)
			continue;
		rep->locks++;
		if (s->cfg->check)
			continue;
		want[nc] = lock;
		rc = sweep_queue(s, store_wr_cas(s->cfg->st, m, store_rec_off(t, first + i) +
						 g->lock_off, lock, 0, &olds[nc]));
		if (rc)
			return rc;
		nc++;
	}
	rc = sweep_flush(s);
	for (unsigned i = 0; !rc && i < nc; i++) {
		rep->locks_released += olds[i] == want[i];
		*released = true;
	}
	return rc;
}

static int sweep_table(struct sweep *s, uint16_t m, const struct store_table *t)
{
	const uint32_t stride = t->geom.stride;
	uint64_t used, per = s->cfg->buflen / stride, *olds, *pub;
	bool released = false;
	int rc;

	rc = sweep_used_records(s, t, &used);
	if (rc)
		return rc;
	olds = calloc(2 * per, sizeof(*olds));
	pub = calloc(t->ent.capacity / 64 + 1, sizeof(*pub));
	if (!olds || !pub) {
		free(olds);
		free(pub);
		if (s->cfg->err && s->cfg->errlen)
			snprintf(s->cfg->err, s->cfg->errlen, "recover: out of memory");
		return -ENOMEM;
	}
	rc = sweep_published(s, m, t, pub);
	for (uint64_t first = 0; first < used && !rc; first += per) {
		uint64_t k = used - first < per ? used - first : per;

		s->cfg->rep->records += k;
		rc = sweep_read(s, m, store_rec_off(t, first), s->cfg->buf, (uint32_t)(k * stride));
		if (!rc)
			rc = sweep_chunk(s, m, t, first, k, pub, olds, &released);
	}
	free(olds);
	free(pub);
	/* Unlocks went out as plain CAS: one persist point for the whole area instead. */
	if (!rc && released)
		rc = sweep_persist(s, m, t->ent.rec_off, used * stride);
	return rc;
}

int sweep_release_locks(const struct sweep_cfg *cfg)
{
	struct sweep *s = calloc(1, sizeof(*s));
	int rc = 0;

	if (!s)
		return -ENOMEM;
	s->cfg = cfg;
	for (uint16_t m = 0; m < cfg->st->n_mn && !rc; m++)
		for (unsigned i = 0; i < REMORA_MAX_TABLES && !rc; i++)
			if (cfg->st->tab[i].present)
				rc = sweep_table(s, m, &cfg->st->tab[i]);
	free(s);
	return rc;
}
