/* SPDX-License-Identifier: MIT */
/*
 * The consecutive version table (CVT) codec of Motor:
 *
 *   +0   lock     8 B   CAS target of writers; 0 free. Only the primary's word is used.
 *   +8   key      8 B
 *   +16  table    2 B   cells 2 B   reserved 4 B
 *   +24  reserved 8 B
 *   +32  cell 0 .. cell N-1, each:
 *          +0  ts     8 B   commit timestamp of the version (0: loaded)
 *          +8  flags  2 B   CVT_USED | enum codec_rec_flags (VALID, DELETED); 0: free cell
 *          +10 pad    2 B
 *          +12 csum   4 B   over ts, flags, the header's key and table, and the value
 *          +16 value  value_size bytes, padded to 8
 *
 * Part i is cell i. Each version keeps its full value inline in its cell (Motor keeps the
 * newest full value beside the CVT and older versions as deltas; this codec keeps every
 * version full, which is LOTUS's "full record per version" layout, so reading an old version
 * needs no delta replay). The data address of cell i is the cell's own value (decode gives its
 * offset in aux). N comes from $REMORA_CVT_CELLS (2 .. 8, default 2) when the geometry is
 * computed: format and open must agree (a different N is a different stride: -ELAYOUT).
 *
 * Torn READs: a commit WRITE rewrites one cell, and a READ may overlap it in any byte order
 * (memcpy, RDMA READs above 8 B). Every cell carries its own checksum, so a cell that mixes two
 * images fails decode with -EAGAIN. decode fills r even then, so a caller that ignores -EAGAIN
 * (the skip_torn_check mutation) sees the torn bytes.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "config/env.h"
#include "codec.h"
#include "hash.h"

#define CVT_LOCK_OFF 0u
#define CVT_KEY_OFF 8u
#define CVT_META_OFF 16u
#define CVT_CELLS_OFF 32u
#define CVT_CELL_HDR 16u
#define CVT_MAX_VALUE (1u << 16)
#define CVT_DEFAULT_CELLS 2u
#define CVT_MAX_CELLS 8u

struct cvt_meta {
	uint16_t table;
	uint16_t ncells;
	uint32_t reserved;
};

struct cvt_cell {
	uint64_t ts;
	uint16_t flags;
	uint16_t pad;
	uint32_t csum;
};
_Static_assert(sizeof(struct cvt_meta) == 8, "cvt meta layout");
_Static_assert(sizeof(struct cvt_cell) == CVT_CELL_HDR, "cvt cell layout");

unsigned codec_cvt_cells(void)
{
	const char *e = cfg_knob(CFG_KNOB_CVT_CELLS);
	char *end;
	long n;

	if (!e)
		return CVT_DEFAULT_CELLS;
	n = strtol(e, &end, 10);
	return !*end && n >= 2 && n <= (long)CVT_MAX_CELLS ? (unsigned)n : 0;
}

static uint32_t cvt_csum(const unsigned char *img, const unsigned char *cell, uint32_t value_size)
{
	uint64_t h = store_csum(0x6376743163656c6cu, cell, 10); /* ts, flags */

	h = store_csum(h, img + CVT_KEY_OFF, 10);                  /* key, table */
	h = store_csum(h, cell + CVT_CELL_HDR, value_size);
	return (uint32_t)(h ^ (h >> 32));
}

static int cvt_geom(const struct remora_table_def *t, struct codec_geom *g)
{
	unsigned n = codec_cvt_cells();
	uint32_t cell;

	if (t->value_size == 0 || t->value_size > CVT_MAX_VALUE || n == 0)
		return -REMORA_ECONFIG;
	memset(g, 0, sizeof(*g));
	cell = CVT_CELL_HDR + ((t->value_size + 7u) & ~7u);
	g->value_size = t->value_size;
	g->stride = CVT_CELLS_OFF + n * cell;
	g->lock_off = CVT_LOCK_OFF;
	g->version_off = REMORA_CODEC_NO_OFF; /* one per cell */
	g->check_off = 0;                     /* validation READs the whole CVT */
	g->check_len = g->stride;
	g->write_off = CVT_CELLS_OFF;
	g->nparts = n;
	for (unsigned i = 0; i < n; i++) {
		g->part_off[i] = CVT_CELLS_OFF + i * cell;
		g->part_len[i] = cell;
	}
	g->side_bytes = 0;
	return 0;
}

/*
 * Writes the header (key, table, lock, cell count) and cell `part`. A record as the loader
 * passes it (VALID) goes into cell 0 only; the other cells are encoded free. r->flags 0 makes
 * the cell free; otherwise it is a used cell with r's timestamp (version), flags and value.
 */
static void cvt_encode(const struct codec_geom *g, void *img, unsigned part,
		       const struct codec_rec *r)
{
	unsigned char *b = img, *c = b + g->part_off[part];
	struct cvt_meta m = { .table = (uint16_t)r->table, .ncells = (uint16_t)g->nparts };
	struct cvt_cell cell = { 0 };
	bool used = r->flags != 0 && (part == 0 || r->version != 0);

	memcpy(b + CVT_LOCK_OFF, &r->lock, 8);
	memcpy(b + CVT_KEY_OFF, &r->key, 8);
	memcpy(b + CVT_META_OFF, &m, sizeof(m));
	memset(b + 24, 0, 8);
	if (used) {
		cell.ts = r->version;
		cell.flags = (uint16_t)(REMORA_CVT_USED | (r->flags & 0xffu));
	}
	memcpy(c, &cell, sizeof(cell));
	if (used && r->value && r->value != c + CVT_CELL_HDR)
		memcpy(c + CVT_CELL_HDR, r->value, g->value_size);
	else if (!used || !r->value)
		memset(c + CVT_CELL_HDR, 0, g->value_size);
	memset(c + CVT_CELL_HDR + g->value_size, 0, g->part_len[part] - CVT_CELL_HDR - g->value_size);
	cell.csum = cvt_csum(b, c, g->value_size);
	memcpy(c, &cell, sizeof(cell));
}

static int cvt_decode(const struct codec_geom *g, const void *img, unsigned part,
		      struct codec_rec *r)
{
	const unsigned char *b = img, *c;
	struct cvt_meta m;
	struct cvt_cell cell;

	if (part >= g->nparts)
		return -REMORA_ELAYOUT;
	c = b + g->part_off[part];
	memcpy(&m, b + CVT_META_OFF, sizeof(m));
	memcpy(&cell, c, sizeof(cell));
	memcpy(&r->lock, b + CVT_LOCK_OFF, 8);
	memcpy(&r->key, b + CVT_KEY_OFF, 8);
	r->table = m.table;
	r->version = cell.ts;
	r->flags = cell.flags;
	r->aux = g->part_off[part] + CVT_CELL_HDR;
	r->value = c + CVT_CELL_HDR;
	r->value_len = g->value_size;
	if (cell.csum != cvt_csum(b, c, g->value_size))
		return -EAGAIN;
	if (m.ncells != g->nparts)
		return -REMORA_ELAYOUT;
	return 0;
}

const struct codec_ops codec_cvt = {
	.size = sizeof(struct codec_ops),
	.id = REMORA_CODEC_CVT,
	.name = "cvt",
	.geom = cvt_geom,
	.encode = cvt_encode,
	.decode = cvt_decode,
};
