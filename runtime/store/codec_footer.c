/* SPDX-License-Identifier: MIT */
/*
 * The footer codec of OOCC: data first, {version, lock} last, the lock word at the highest
 * address, so that one READ returns value, version and lock together, and one WRITE of the
 * whole record updates the value, bumps the version and clears the lock:
 *
 *   +0         key      8 B
 *   +8         table 2 B, flags 2 B (enum codec_rec_flags), csum 4 B
 *   +16        value    value_size bytes, padded to 8
 *   stride-16  version  8 B   id of the transaction that wrote this image (0: loaded)
 *   stride-8   lock     8 B   0 free; OOCC_INTENT / OOCC_LOCKED state in bits 63:62
 *
 * Torn READs (docs/oocc.md, "Torn reads"): csum covers key, table, flags, value and version,
 * so a READ that mixes two committed images fails it. It cannot cover the lock word (the lock
 * changes by CAS and upgrade WRITE without touching the rest), so an image of old data with
 * the new, cleared lock passes the checksum; that case is excluded by the copy order of the
 * host backends (the lock word is stored last by a WRITE and loaded first by a READ,
 * transport/cpuverbs.h) and, on RDMA, by in-order placement of one WRITE (the FaRM assumption).
 */
#include <errno.h>
#include <string.h>

#include "codec.h"
#include "hash.h"

#define FT_KEY_OFF 0u
#define FT_META_OFF 8u
#define FT_VALUE_OFF 16u
#define FT_TAIL 16u /* version + lock */
#define FT_MAX_VALUE (1u << 20)

struct ft_meta {
	uint16_t table;
	uint16_t flags;
	uint32_t csum;
};
_Static_assert(sizeof(struct ft_meta) == 8, "footer meta layout");

static uint32_t ft_csum(const struct codec_geom *g, const unsigned char *img)
{
	uint64_t h = store_csum(0x666f6f7465723031u, img + FT_KEY_OFF, 12);

	h = store_csum(h, img + FT_VALUE_OFF, g->value_size);
	h = store_csum(h, img + g->version_off, 8);
	return (uint32_t)(h ^ (h >> 32));
}

static int ft_geom(const struct remora_table_def *t, struct codec_geom *g)
{
	if (t->value_size == 0 || t->value_size > FT_MAX_VALUE)
		return -REMORA_ECONFIG;
	memset(g, 0, sizeof(*g));
	g->value_size = t->value_size;
	g->stride = FT_VALUE_OFF + ((t->value_size + 7u) & ~7u) + FT_TAIL;
	g->lock_off = g->stride - 8;
	g->version_off = g->stride - 16;
	g->check_off = g->stride - FT_TAIL;
	g->check_len = FT_TAIL;
	g->write_off = 0; /* the commit WRITE carries the lock word: writing it unlocks */
	g->nparts = 1;
	g->part_off[0] = 0;
	g->part_len[0] = g->stride;
	return 0;
}

static void ft_encode(const struct codec_geom *g, void *img, unsigned part,
		      const struct codec_rec *r)
{
	unsigned char *b = img;
	struct ft_meta m = { .table = (uint16_t)r->table, .flags = (uint16_t)r->flags };
	uint32_t pad = g->version_off - FT_VALUE_OFF - g->value_size;

	(void)part;
	memcpy(b + FT_KEY_OFF, &r->key, 8);
	memcpy(b + FT_META_OFF, &m, sizeof(m));
	if (r->value && r->value != b + FT_VALUE_OFF)
		memcpy(b + FT_VALUE_OFF, r->value, g->value_size);
	else if (!r->value)
		memset(b + FT_VALUE_OFF, 0, g->value_size);
	memset(b + FT_VALUE_OFF + g->value_size, 0, pad);
	memcpy(b + g->version_off, &r->version, 8);
	memcpy(b + g->lock_off, &r->lock, 8);
	m.csum = ft_csum(g, b);
	memcpy(b + FT_META_OFF, &m, sizeof(m));
}

static int ft_decode(const struct codec_geom *g, const void *img, unsigned part,
		     struct codec_rec *r)
{
	const unsigned char *b = img;
	struct ft_meta m;

	if (part != 0)
		return -REMORA_ELAYOUT;
	memcpy(&m, b + FT_META_OFF, sizeof(m));
	if (m.csum != ft_csum(g, b))
		return -EAGAIN;
	memcpy(&r->key, b + FT_KEY_OFF, 8);
	memcpy(&r->version, b + g->version_off, 8);
	memcpy(&r->lock, b + g->lock_off, 8);
	r->table = m.table;
	r->flags = m.flags;
	r->aux = 0;
	r->value = b + FT_VALUE_OFF;
	r->value_len = g->value_size;
	return 0;
}

const struct codec_ops codec_footer = {
	.size = sizeof(struct codec_ops),
	.id = REMORA_CODEC_FOOTER,
	.name = "footer",
	.geom = ft_geom,
	.encode = ft_encode,
	.decode = ft_decode,
};
