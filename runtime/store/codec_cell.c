/* SPDX-License-Identifier: MIT */
/*
 * The cell codec of CREST (docs/crest.md, "Record layout"):
 *
 *   +0   header line (struct codec_cell_hdr, 64 B):
 *          key 8 | used 8 (flags, table, cell count; 0: free slot) | lock 8 (bit c = cell c) |
 *          en[20] 2 B each (the epoch of cell c's last committed write)
 *   +64  cell 0 .. cell n-1, each on its own lines:
 *          line 0:  version 8 (EN:16 | TS:48) | csum 4 | pad 4 | 48 value bytes
 *          line j:  version 8 (a copy)        | 56 value bytes
 *
 * Part c is cell c. A cell of up to 48 bytes is one line, so one READ or WRITE covers its
 * version and value together; a larger cell repeats its version at the start of every line it
 * spans (FaRM's cache-line versions), so a READ that mixes lines of two writes shows two
 * versions. Neither RDMA nor memcpy promises that even one 64-byte line is copied atomically
 * (the digest's gap 2), so each cell also carries a checksum over its version, the record's
 * key and table, its index and its value: decode fails with -EAGAIN on a torn cell. Whether the
 * cells of a record belong together is the protocol's check (en[c] == EN(version of c), no read
 * cell locked), done on the decoded parts.
 */
#include <errno.h>
#include <string.h>

#include "codec.h"
#include "hash.h"

#define CELL_HDR0 16u               /* version + csum + pad at the start of line 0 */
#define CELL_DATA0 (CODEC_CELL_LINE - CELL_HDR0)
#define CELL_DATAN (CODEC_CELL_LINE - 8u)

struct cell_line0 {
	uint64_t version;
	uint32_t csum;
	uint32_t pad;
};
_Static_assert(sizeof(struct cell_line0) == CELL_HDR0, "cell line 0 header");

int codec_cells_pack(const struct remora_cell_def *d, uint32_t value_size, uint64_t *out)
{
	uint64_t w;
	uint32_t prev = 0;

	if (d->ncells < 1 || d->ncells > REMORA_MAX_CELLS || d->start[0] != 0)
		return -REMORA_ECONFIG;
	w = (uint64_t)d->ncells << 56;
	for (unsigned i = 1; i < d->ncells; i++) {
		uint32_t s = d->start[i];

		if (s <= prev || s % 8 || s >= value_size || s / 8 > 0xff)
			return -REMORA_ECONFIG;
		w |= (uint64_t)(s / 8) << (8 * (i - 1));
		prev = s;
	}
	*out = w;
	return 0;
}

/* Lines of a cell of len value bytes. */
static uint32_t cell_lines(uint32_t len)
{
	return len <= CELL_DATA0 ? 1u : 1u + (len - CELL_DATA0 + CELL_DATAN - 1) / CELL_DATAN;
}

static int cell_geom_cells(const struct remora_table_def *t, uint64_t cells, struct codec_geom *g)
{
	unsigned n = codec_ncells(cells);
	uint32_t at = CODEC_CELL_LINE;

	if (t->value_size == 0 || t->value_size > (1u << 16) || n > CODEC_CELL_MAX ||
	    n > REMORA_CODEC_MAX_PARTS)
		return -REMORA_ECONFIG;
	memset(g, 0, sizeof(*g));
	g->value_size = t->value_size;
	g->lock_off = CODEC_CELL_LOCK_OFF;
	g->version_off = REMORA_CODEC_NO_OFF; /* one per cell */
	g->check_off = 0;                     /* validation READs the header line */
	g->check_len = CODEC_CELL_LINE;
	g->write_off = CODEC_CELL_LINE;
	g->nparts = n;
	g->cells = cells;
	for (unsigned c = 0; c < n; c++) {
		uint32_t off, len;

		codec_cell_span(cells, t->value_size, c, &off, &len);
		g->part_off[c] = at;
		g->part_len[c] = cell_lines(len) * CODEC_CELL_LINE;
		at += g->part_len[c];
	}
	g->stride = at;
	g->side_bytes = 0;
	return 0;
}

static int cell_geom(const struct remora_table_def *t, struct codec_geom *g)
{
	return cell_geom_cells(t, 0, g);
}

/* Calls fn for each line's share of cell c: (value offset, image offset, bytes). */
#define CELL_FOR_LINES(g, c, voff, ioff, n, body)                                               \
	do {                                                                                    \
		uint32_t v0_, len_, done_ = 0, line_ = 0;                                       \
		codec_cell_span((g)->cells, (g)->value_size, (c), &v0_, &len_);                \
		while (done_ < len_) {                                                          \
			uint32_t room_ = line_ ? CELL_DATAN : CELL_DATA0;                       \
			uint32_t voff = v0_ + done_;                                            \
			uint32_t ioff = (g)->part_off[c] + line_ * CODEC_CELL_LINE +            \
					(line_ ? 8u : CELL_HDR0);                               \
			uint32_t n = len_ - done_ < room_ ? len_ - done_ : room_;               \
			body;                                                                   \
			done_ += n;                                                             \
			line_++;                                                                \
		}                                                                               \
	} while (0)

void codec_cell_get(const struct codec_geom *g, const void *img, unsigned c, void *value)
{
	const unsigned char *b = img;
	unsigned char *v = value;

	CELL_FOR_LINES(g, c, vo, io, n, memcpy(v + vo, b + io, n));
}

static uint32_t cell_csum(const struct codec_geom *g, const unsigned char *b, unsigned c)
{
	const unsigned char *line0 = b + g->part_off[c];
	uint64_t h = store_csum(0x63656c6c63727374u ^ c, line0, 8); /* version */

	h = store_csum(h, b, 8);                                     /* key */
	h = store_csum(h, b + 10, 2);                                /* table */
	CELL_FOR_LINES(g, c, vo, io, n, (void)vo; h = store_csum(h, b + io, n));
	return (uint32_t)(h ^ (h >> 32));
}

void codec_cell_put(const struct codec_geom *g, void *img, unsigned c, const void *value,
		    uint64_t version)
{
	unsigned char *b = img;
	const unsigned char *v = value;
	struct cell_line0 h = { .version = version };
	uint32_t lines = g->part_len[c] / CODEC_CELL_LINE;

	memset(b + g->part_off[c], 0, g->part_len[c]);
	for (uint32_t l = 1; l < lines; l++)
		memcpy(b + g->part_off[c] + l * CODEC_CELL_LINE, &version, 8);
	if (v)
		CELL_FOR_LINES(g, c, vo, io, n, memcpy(b + io, v + vo, n));
	memcpy(b + g->part_off[c], &h, sizeof(h));
	h.csum = cell_csum(g, b, c);
	memcpy(b + g->part_off[c], &h, sizeof(h));
}

/*
 * Writes the header (key, used from r->flags and r->table, lock, en[part] = r->aux) and cell
 * `part` with version r->version and its share of r->value (the whole value; NULL: zeros).
 */
static void cell_encode(const struct codec_geom *g, void *img, unsigned part,
			const struct codec_rec *r)
{
	struct codec_cell_hdr h;

	memcpy(&h, img, sizeof(h));
	h.key = r->key;
	/* table and cell count also in a placeholder (flags 0): lookups check the table */
	h.used = (uint64_t)(r->flags & 0xffffu) | (uint64_t)(r->table & 0xffffu) << 16 |
		 (uint64_t)g->nparts << 32;
	h.lock = r->lock;
	h.en[part] = (uint16_t)r->aux;
	memcpy(img, &h, sizeof(h));
	codec_cell_put(g, img, part, r->value, r->version);
}

static int cell_decode(const struct codec_geom *g, const void *img, unsigned part,
		       struct codec_rec *r)
{
	const unsigned char *b = img;
	struct codec_cell_hdr h;
	struct cell_line0 l0;
	uint32_t lines;

	if (part >= g->nparts)
		return -REMORA_ELAYOUT;
	memcpy(&h, b, sizeof(h));
	memcpy(&l0, b + g->part_off[part], sizeof(l0));
	r->lock = h.lock;
	r->key = h.key;
	r->table = (uint32_t)(h.used >> 16) & 0xffffu;
	r->flags = (uint32_t)h.used & 0xffffu;
	r->version = l0.version;
	r->aux = h.en[part];
	r->value = NULL; /* spread over lines: codec_cell_get */
	r->value_len = g->part_len[part];
	lines = g->part_len[part] / CODEC_CELL_LINE;
	for (uint32_t l = 1; l < lines; l++) {
		uint64_t v;

		memcpy(&v, b + g->part_off[part] + l * CODEC_CELL_LINE, 8);
		if (v != l0.version)
			return -EAGAIN; /* lines of two writes */
	}
	if (l0.csum != cell_csum(g, b, part))
		return -EAGAIN;
	if (h.used && ((h.used >> 32) & 0xffffu) != g->nparts)
		return -REMORA_ELAYOUT;
	return 0;
}

const struct codec_ops codec_cell = {
	.size = sizeof(struct codec_ops),
	.id = REMORA_CODEC_CELL,
	.name = "cell",
	.geom = cell_geom,
	.encode = cell_encode,
	.decode = cell_decode,
	.geom_cells = cell_geom_cells,
};
