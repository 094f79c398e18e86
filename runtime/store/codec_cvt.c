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
 * Part i is cell i. By default each version keeps its full value inline in its cell: LOTUS's
 * "full record per version" layout, where reading an old version needs no delta replay (the
 * delta layout below is Motor's). The data address of cell i is the cell's own value (decode gives its
 * offset in aux). N comes from $REMORA_CVT_CELLS (2 .. 8, default 2) when the geometry is
 * computed: format and open must agree (a different N is a different stride: -ELAYOUT).
 *
 * With $REMORA_CVT_DELTA=1 at format (the meta word's DELTA bit says so), the CVT keeps the
 * newest committed value full, in an area between the header and cell 0, and each cell keeps, instead
 * of a full value, the undo delta from its version to the next older one: the byte ranges that
 * differ, with the older bytes ({u16 n; n x {u16 off, u16 len, bytes}}; n = CVT_NO_OLDER: the
 * cell's version had no older one). A commit encodes the new version into a reused cell with the
 * delta against the full value it replaces, and the full value: one WRITE from the full area
 * through that cell. An older version is the full value with the deltas of every newer cell
 * applied, newest first. GC reclaims the oldest version only, whose cell no reconstruction of
 * a newer version reads: a reclaimed version is never needed for a visible one.
 *
 *   +32  full   16 B {ts, flags, pad, csum over ts, flags, key, table, value} + value (padded)
 *   then cell 0 .. N-1, each 16 B header + delta area of value_size (padded) + 8 bytes
 *
 * Torn READs: a commit WRITE rewrites one cell, and a READ may overlap it in any byte order
 * (memcpy, RDMA READs above 8 B). Every cell carries its own checksum, so a cell that mixes two
 * images fails decode with -EAGAIN. With deltas, decode also wants every cell whole and the full
 * area at the newest cell's timestamp (a READ may pair a whole old full area with a whole new
 * cell). decode fills r even then, so a caller that ignores -EAGAIN
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
#define CVT_META_DELTA 1u      /* cvt_meta.reserved: the delta layout */
#define CVT_NO_OLDER 0xffffu   /* a delta's count: no older version to undo to */
#define CVT_RANGE_HDR 4u
#define CVT_MERGE_GAP 4u       /* equal bytes shorter than a range header join two ranges */

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

int codec_cvt_delta(void)
{
	const char *e = cfg_knob(CFG_KNOB_CVT_DELTA);

	if (!e || !strcmp(e, "0"))
		return 0;
	return !strcmp(e, "1") ? 1 : -1;
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
	int delta = codec_cvt_delta();
	uint32_t vpad = (t->value_size + 7u) & ~7u, cell, first = CVT_CELLS_OFF;

	if (t->value_size == 0 || t->value_size > CVT_MAX_VALUE || n == 0 || delta < 0 ||
	    (delta && t->value_size >= CVT_NO_OLDER))
		return -REMORA_ECONFIG;
	memset(g, 0, sizeof(*g));
	cell = CVT_CELL_HDR + vpad + (delta ? 8u : 0u);
	if (delta) {
		g->full_off = CVT_CELLS_OFF;
		first += CVT_CELL_HDR + vpad;
	}
	g->value_size = t->value_size;
	g->stride = first + n * cell;
	g->lock_off = CVT_LOCK_OFF;
	g->version_off = REMORA_CODEC_NO_OFF; /* one per cell */
	g->check_off = 0;                     /* validation READs the whole CVT */
	g->check_len = g->stride;
	g->write_off = CVT_CELLS_OFF;
	g->nparts = n;
	for (unsigned i = 0; i < n; i++) {
		g->part_off[i] = first + i * cell;
		g->part_len[i] = cell;
	}
	g->side_bytes = 0;
	return 0;
}

/* Bytes of a cell's data that its checksum covers: the value, or the delta area. */
static uint32_t cell_data(const struct codec_geom *g)
{
	return g->full_off ? g->part_len[0] - CVT_CELL_HDR : g->value_size;
}

/*
 * Writes into d (cap bytes) the undo delta from value nv to the older value ov: the ranges
 * where they differ, with ov's bytes. Ranges closer than a range header are merged; a delta
 * that does not fit becomes one range over the whole value (cap leaves room for it).
 */
static void delta_make(unsigned char *d, uint32_t cap, const unsigned char *nv,
		       const unsigned char *ov, uint32_t size)
{
	uint32_t at = 2, i = 0;
	uint16_t n = 0;

	while (i < size) {
		uint32_t start, end, same = 0;
		uint16_t hdr[2];

		if (nv[i] == ov[i]) {
			i++;
			continue;
		}
		start = end = i;
		for (; i < size && same < CVT_MERGE_GAP; i++) {
			same = nv[i] == ov[i] ? same + 1 : 0;
			if (!same)
				end = i + 1;
		}
		if (at + CVT_RANGE_HDR + (end - start) > cap) {
			n = 0, at = 2, start = 0, end = size, i = size;
		}
		hdr[0] = (uint16_t)start;
		hdr[1] = (uint16_t)(end - start);
		memcpy(d + at, hdr, sizeof(hdr));
		memcpy(d + at + CVT_RANGE_HDR, ov + start, end - start);
		at += CVT_RANGE_HDR + (end - start);
		n++;
		i = i > end ? i : end;
	}
	memcpy(d, &n, 2);
	memset(d + at, 0, cap - at);
}

/* Applies the undo delta d (cap bytes) to v; -EAGAIN when it is not a delta of this size. */
static int delta_apply(unsigned char *v, uint32_t size, const unsigned char *d, uint32_t cap)
{
	uint32_t at = 2;
	uint16_t n;

	memcpy(&n, d, 2);
	if (n == CVT_NO_OLDER)
		return -EAGAIN;
	for (uint16_t k = 0; k < n; k++) {
		uint16_t hdr[2];

		if (at + CVT_RANGE_HDR > cap)
			return -EAGAIN;
		memcpy(hdr, d + at, sizeof(hdr));
		if ((uint32_t)hdr[0] + hdr[1] > size || at + CVT_RANGE_HDR + hdr[1] > cap)
			return -EAGAIN;
		memcpy(v + hdr[0], d + at + CVT_RANGE_HDR, hdr[1]);
		at += CVT_RANGE_HDR + hdr[1];
	}
	return 0;
}

/* Seals the cell header h at c (checksum over it, the header's key and table, len data bytes). */
static void cell_seal(unsigned char *b, unsigned char *c, struct cvt_cell h, uint32_t len)
{
	memcpy(c, &h, sizeof(h));
	h.csum = cvt_csum(b, c, len);
	memcpy(c, &h, sizeof(h));
}

/*
 * Delta layout: a used cell gets the undo delta from r's value to the full value it replaces
 * (none when the full area holds no version), then the full area gets r. A free cell 0 frees
 * the full area too (a placeholder CVT).
 */
static void delta_encode(const struct codec_geom *g, unsigned char *b, unsigned char *c,
			 struct cvt_cell cell, const struct codec_rec *r, unsigned part)
{
	unsigned char *f = b + g->full_off;
	uint32_t cap = cell_data(g);
	struct cvt_cell fh;
	uint16_t none = CVT_NO_OLDER;

	memcpy(&fh, f, sizeof(fh));
	memset(c + CVT_CELL_HDR, 0, cap);
	if (cell.flags && (fh.flags & REMORA_CVT_USED) && r->value)
		delta_make(c + CVT_CELL_HDR, cap, r->value, f + CVT_CELL_HDR, g->value_size);
	else if (cell.flags)
		memcpy(c + CVT_CELL_HDR, &none, 2);
	cell_seal(b, c, cell, cap);
	if (!cell.flags && part != 0)
		return;
	if (cell.flags && r->value)
		memmove(f + CVT_CELL_HDR, r->value, g->value_size);
	else
		memset(f + CVT_CELL_HDR, 0, g->value_size);
	cell_seal(b, f, cell, g->value_size);
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
	struct cvt_meta m = { .table = (uint16_t)r->table, .ncells = (uint16_t)g->nparts,
			      .reserved = g->full_off ? CVT_META_DELTA : 0 };
	struct cvt_cell cell = { 0 };
	/* Deltas keep no marker: a reclaimed cell there is encoded free. */
	bool reclaimed = r->flags == REMORA_CVT_RECLAIMED && !g->full_off;
	bool used = r->flags != 0 && r->flags != REMORA_CVT_RECLAIMED &&
		    (part == 0 || r->version != 0);

	memcpy(b + CVT_LOCK_OFF, &r->lock, 8);
	memcpy(b + CVT_KEY_OFF, &r->key, 8);
	memcpy(b + CVT_META_OFF, &m, sizeof(m));
	memset(b + 24, 0, 8);
	if (used) {
		cell.ts = r->version;
		cell.flags = (uint16_t)(REMORA_CVT_USED | (r->flags & 0xffu));
	} else if (reclaimed) {
		cell.ts = r->version;
		cell.flags = REMORA_CVT_RECLAIMED;
	}
	if (g->full_off) {
		delta_encode(g, b, c, cell, r, part);
		return;
	}
	if (used && r->value && r->value != c + CVT_CELL_HDR)
		memcpy(c + CVT_CELL_HDR, r->value, g->value_size);
	else if (!used || !r->value)
		memset(c + CVT_CELL_HDR, 0, g->value_size);
	memset(c + CVT_CELL_HDR + g->value_size, 0, g->part_len[part] - CVT_CELL_HDR - g->value_size);
	cell_seal(b, c, cell, g->value_size);
}

/* Cell timestamp of cell i, or 0 with *used false when the cell is free. */
static uint64_t cell_ts_of(const struct codec_geom *g, const unsigned char *b, unsigned i,
			   bool *used)
{
	struct cvt_cell h;

	memcpy(&h, b + g->part_off[i], sizeof(h));
	*used = (h.flags & REMORA_CVT_USED) != 0;
	return h.ts;
}

/*
 * Deltas: every cell is whole (a version's value depends on the deltas of the newer cells) and
 * the full area holds the newest cell's version (or nothing, when no cell is used). A READ that
 * overlapped a commit's WRITE may pair a whole old full area with a whole new cell, each with a
 * good checksum: this catches that too.
 */
static bool full_is_newest(const struct codec_geom *g, const unsigned char *b,
			   const struct cvt_cell *fh)
{
	uint64_t newest = 0;
	bool any = false, used;

	for (unsigned i = 0; i < g->nparts; i++) {
		const unsigned char *c = b + g->part_off[i];
		uint64_t ts = cell_ts_of(g, b, i, &used);
		struct cvt_cell h;

		memcpy(&h, c, sizeof(h));
		if (h.csum != cvt_csum(b, c, cell_data(g)))
			return false;
		if (used && (!any || ts > newest))
			newest = ts, any = true;
	}
	return any ? (fh->flags & REMORA_CVT_USED) && fh->ts == newest :
		     !(fh->flags & REMORA_CVT_USED);
}

static int cvt_decode(const struct codec_geom *g, const void *img, unsigned part,
		      struct codec_rec *r)
{
	const unsigned char *b = img, *c, *f;
	struct cvt_meta m;
	struct cvt_cell cell, fh;
	int rc = 0;

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
	if (g->full_off) { /* the value is the full one only for the newest cell */
		f = b + g->full_off;
		memcpy(&fh, f, sizeof(fh));
		r->value = (cell.flags & REMORA_CVT_USED) && fh.ts == cell.ts ? f + CVT_CELL_HDR :
										     NULL;
		if (fh.csum != cvt_csum(b, f, g->value_size) || !full_is_newest(g, b, &fh))
			rc = -EAGAIN;
	}
	if (cell.csum != cvt_csum(b, c, cell_data(g)))
		rc = -EAGAIN;
	if (rc)
		return rc;
	if (m.ncells != g->nparts || (m.reserved & CVT_META_DELTA) != (g->full_off ? 1u : 0u))
		return -REMORA_ELAYOUT;
	return 0;
}

void codec_cvt_span(const struct codec_geom *g, unsigned part, uint32_t *off, uint32_t *len)
{
	*off = g->full_off ? g->full_off : g->part_off[part];
	*len = g->part_off[part] + g->part_len[part] - *off;
}

unsigned codec_cvt_pieces(const struct codec_geom *g, unsigned part, uint32_t off[2],
			  uint32_t len[2])
{
	unsigned n = 0;

	if (g->full_off) {
		off[n] = g->full_off;
		len[n++] = g->part_off[0] - g->full_off;
	}
	off[n] = g->part_off[part];
	len[n++] = g->part_len[part];
	return n;
}

int codec_cvt_value(const struct codec_geom *g, const void *img, unsigned part, void *buf,
		    const void **value, bool skip_one)
{
	const unsigned char *b = img;
	struct cvt_cell fh;
	uint64_t target, above = UINT64_MAX;
	bool used, first = true;

	if (!g->full_off) {
		*value = b + g->part_off[part] + CVT_CELL_HDR;
		return 0;
	}
	memcpy(&fh, b + g->full_off, sizeof(fh));
	target = cell_ts_of(g, b, part, &used);
	memcpy(buf, b + g->full_off + CVT_CELL_HDR, g->value_size);
	*value = buf;
	if (!used || !(fh.flags & REMORA_CVT_USED) || fh.ts < target)
		return -EAGAIN;
	for (;;) { /* the newer cells, newest first: each undoes its version */
		int next = -1;
		uint64_t nts = 0;

		for (unsigned i = 0; i < g->nparts; i++) {
			uint64_t ts = cell_ts_of(g, b, i, &used);

			if (used && ts > target && ts < above && (next < 0 || ts > nts))
				next = (int)i, nts = ts;
		}
		if (next < 0)
			break;
		if (first && nts != fh.ts)
			return -EAGAIN; /* the full value is not the newest cell's */
		if (!(first && skip_one) &&
		    delta_apply(buf, g->value_size, b + g->part_off[next] + CVT_CELL_HDR,
				cell_data(g)))
			return -EAGAIN;
		first = false;
		above = nts;
	}
	return first && fh.ts != target ? -EAGAIN : 0;
}

bool codec_cvt_cell_intact(const struct codec_geom *g, const void *img, unsigned part)
{
	const unsigned char *b = img, *c = b + g->part_off[part];
	struct cvt_cell h, fh;

	memcpy(&h, c, sizeof(h));
	if (h.csum != cvt_csum(b, c, cell_data(g)))
		return false;
	if (!g->full_off)
		return true;
	memcpy(&fh, b + g->full_off, sizeof(fh));
	return fh.csum == cvt_csum(b, b + g->full_off, g->value_size) && fh.ts == h.ts;
}

const struct codec_ops codec_cvt = {
	.size = sizeof(struct codec_ops),
	.id = REMORA_CODEC_CVT,
	.name = "cvt",
	.geom = cvt_geom,
	.encode = cvt_encode,
	.decode = cvt_decode,
};
