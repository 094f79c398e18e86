/* SPDX-License-Identifier: MIT */
/*
 * The lock+version codec of FORD and Pandora:
 *
 *   +0   lock     8 B   CAS target; 0 free. Only the primary's word is ever used.
 *   +8   version  8 B   id of the transaction that wrote this image (0: loaded)
 *   +16  key      8 B
 *   +24  table    2 B   flags 2 B (enum codec_rec_flags)   csum 4 B
 *   +32  value    value_size bytes, padded to 8
 *
 * Lock and version are adjacent so a validation READ of 16 bytes at +0 returns both. A commit
 * WRITE covers [+8, stride) and leaves the lock word alone, so the writer keeps its lock until
 * a separate unlock. READs are not atomic (transport contract), so csum covers version, key,
 * table, flags and value: a READ that overlapped a commit WRITE mixes two images and fails the
 * check whatever order the bytes were copied in (an ordering-based scheme such as a version at
 * both ends would need the backend to copy in address order, which memcpy does not promise).
 */
#include <errno.h>
#include <string.h>

#include "codec.h"
#include "hash.h"

#define LV_LOCK_OFF 0u
#define LV_VERSION_OFF 8u
#define LV_KEY_OFF 16u
#define LV_META_OFF 24u
#define LV_VALUE_OFF 32u
#define LV_MAX_VALUE (1u << 20)

struct lv_meta {
	uint16_t table;
	uint16_t flags;
	uint32_t csum;
};
_Static_assert(sizeof(struct lv_meta) == 8, "lockver meta layout");

static uint32_t lv_csum(const unsigned char *img, uint32_t value_size)
{
	uint64_t h = store_csum(0x6c6f636b76657231u, img + LV_VERSION_OFF, 20);

	h = store_csum(h, img + LV_VALUE_OFF, value_size);
	return (uint32_t)(h ^ (h >> 32));
}

static int lv_geom(const struct remora_table_def *t, struct codec_geom *g)
{
	if (t->value_size == 0 || t->value_size > LV_MAX_VALUE)
		return -REMORA_ECONFIG;
	memset(g, 0, sizeof(*g));
	g->value_size = t->value_size;
	g->stride = LV_VALUE_OFF + ((t->value_size + 7u) & ~7u);
	g->lock_off = LV_LOCK_OFF;
	g->version_off = LV_VERSION_OFF;
	g->check_off = LV_LOCK_OFF;
	g->check_len = 16;
	g->write_off = LV_VERSION_OFF;
	g->nparts = 1;
	g->part_off[0] = 0;
	g->part_len[0] = g->stride;
	g->side_bytes = 0;
	return 0;
}

static void lv_encode(const struct codec_geom *g, void *img, unsigned part,
		      const struct codec_rec *r)
{
	unsigned char *b = img;
	struct lv_meta m = { .table = (uint16_t)r->table, .flags = (uint16_t)r->flags };
	uint32_t pad = g->stride - LV_VALUE_OFF - g->value_size;

	(void)part;
	memcpy(b + LV_LOCK_OFF, &r->lock, 8);
	memcpy(b + LV_VERSION_OFF, &r->version, 8);
	memcpy(b + LV_KEY_OFF, &r->key, 8);
	memcpy(b + LV_META_OFF, &m, sizeof(m));
	if (r->value && r->value != b + LV_VALUE_OFF)
		memcpy(b + LV_VALUE_OFF, r->value, g->value_size);
	else if (!r->value)
		memset(b + LV_VALUE_OFF, 0, g->value_size);
	memset(b + LV_VALUE_OFF + g->value_size, 0, pad);
	m.csum = lv_csum(b, g->value_size);
	memcpy(b + LV_META_OFF, &m, sizeof(m));
}

static int lv_decode(const struct codec_geom *g, const void *img, unsigned part,
		     struct codec_rec *r)
{
	const unsigned char *b = img;
	struct lv_meta m;

	if (part != 0)
		return -REMORA_ELAYOUT;
	memcpy(&m, b + LV_META_OFF, sizeof(m));
	if (m.csum != lv_csum(b, g->value_size))
		return -EAGAIN;
	memcpy(&r->lock, b + LV_LOCK_OFF, 8);
	memcpy(&r->version, b + LV_VERSION_OFF, 8);
	memcpy(&r->key, b + LV_KEY_OFF, 8);
	r->table = m.table;
	r->flags = m.flags;
	r->aux = 0;
	r->value = b + LV_VALUE_OFF;
	r->value_len = g->value_size;
	return 0;
}

const struct codec_ops codec_lockver = {
	.size = sizeof(struct codec_ops),
	.id = REMORA_CODEC_LOCKVER,
	.name = "lockver",
	.geom = lv_geom,
	.encode = lv_encode,
	.decode = lv_decode,
};

const struct codec_ops *codec_test;

const struct codec_ops *codec_get(uint32_t id)
{
	switch (id) {
	case REMORA_CODEC_LOCKVER:
		return &codec_lockver;
	case REMORA_CODEC_FOOTER:
		return &codec_footer;
	case REMORA_CODEC_CVT:
		return &codec_cvt;
	case REMORA_CODEC_CELL:
		return &codec_cell;
	default:
		return codec_test && codec_test->id == id ? codec_test : NULL;
	}
}
