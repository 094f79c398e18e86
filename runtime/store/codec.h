/* SPDX-License-Identifier: MIT */
/*
 * Record codecs: how a protocol family lays out the entry an index slot points to. Tables,
 * index, allocation, replication and logs are shared; the codec alone knows where the lock
 * word, the version(s) and the value sit, and how to tell a torn READ from a clean one.
 *
 * An entry is made of nparts parts. The lock+version codec (FORD, Pandora) has one part, the
 * whole record. An MVCC codec (Motor, LOTUS) makes each version cell a part whose record lives
 * in the table's side area; a cell codec (CREST) makes each column cell a part. See
 * docs/engine.md, "Codecs".
 */
#ifndef REMORA_STORE_CODEC_H
#define REMORA_STORE_CODEC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <remora/tx.h>

enum codec_id {
	REMORA_CODEC_NONE = 0,
	REMORA_CODEC_LOCKVER = 1, /* {lock, version} header + key + flags + value: ford, pandora */
	REMORA_CODEC_CVT = 2,     /* consecutive version table (full per version or deltas): motor */
	REMORA_CODEC_FOOTER = 3,  /* key + value then {version, lock} footer: oocc */
	REMORA_CODEC_CELL = 4,    /* 64 B header with lock bitmap + cells: crest */
};

#define REMORA_CODEC_NO_OFF UINT32_MAX /* field not in MN memory (e.g. LOTUS locks) */
#define REMORA_CODEC_MAX_PARTS 24

enum codec_rec_flags {
	REMORA_REC_VALID = 1u << 0,   /* the key is present */
	REMORA_REC_DELETED = 1u << 1, /* absent because a transaction deleted it */
};

/* Geometry of one table's entries, computed once from its definition. */
struct codec_geom {
	uint32_t stride;       /* bytes of one entry (8-byte multiple) */
	uint32_t value_size;
	uint32_t lock_off;     /* 8-byte lock word that CAS / masked-CAS target, or NO_OFF */
	uint32_t version_off;  /* 8-byte version word of part 0, or NO_OFF */
	uint32_t check_off;    /* validation window: one READ of these bytes gives lock + version */
	uint32_t check_len;
	uint32_t write_off;    /* a commit WRITE covers [write_off, stride): the lock stays held */
	uint32_t nparts;
	uint32_t part_off[REMORA_CODEC_MAX_PARTS]; /* where part i starts in the entry */
	uint32_t part_len[REMORA_CODEC_MAX_PARTS];
	uint64_t side_bytes;   /* bytes of side area per record slot (version records), or 0 */
	uint32_t full_off;     /* cvt delta layout: the newest full value's area; 0: none */
	uint64_t cells;        /* the table's cells (codec_cells_pack); 0: one cell */
};

/* One decoded part of an entry. */
struct codec_rec {
	uint64_t lock;       /* lock word (or bitmap) as read */
	uint64_t version;    /* version / commit timestamp of this part */
	uint64_t key;
	uint32_t table;
	uint32_t flags;      /* enum codec_rec_flags */
	uint64_t aux;        /* codec-specific: side-record offset (CVT), epoch (cells) */
	const void *value;   /* into the image; NULL when the value lives elsewhere (CVT) */
	uint32_t value_len;
};

struct codec_ops {
	uint32_t size;     /* sizeof(struct codec_ops) the codec was built with */
	uint32_t id;       /* enum codec_id */
	const char *name;
	/* Geometry for table t; -REMORA_ECONFIG when the codec cannot hold it (too wide). */
	int (*geom)(const struct remora_table_def *t, struct codec_geom *g);
	/* Writes part `part` of r into the entry image img (g->stride bytes) and reseals it. */
	void (*encode)(const struct codec_geom *g, void *img, unsigned part,
		       const struct codec_rec *r);
	/*
	 * Decodes part `part` of img. Returns 0; -EAGAIN when the image is torn (a READ overlapped
	 * a WRITE: read again); -REMORA_ELAYOUT when the bytes are no entry of this codec.
	 */
	int (*decode)(const struct codec_geom *g, const void *img, unsigned part,
		      struct codec_rec *r);
	/*
	 * Appended (size rule). Writes part `part` of r into side, the record slot's side area
	 * (g->side_bytes bytes: the full version records of an MVCC codec). NULL, or side_bytes
	 * 0: the codec keeps nothing there. The loader calls encode and encode_side for every part
	 * 0 .. nparts-1 of a new record, with the record as loaded (version 0, VALID): the codec
	 * decides what part i holds of it (a cell's share of the value, an empty old version).
	 */
	void (*encode_side)(const struct codec_geom *g, void *side, unsigned part,
			    const struct codec_rec *r);
	/*
	 * Appended (size rule): geom for a table split into cells (the packed word of
	 * codec_cells_pack). NULL: the codec keeps a record whole; codec_geometry() then calls
	 * geom and only notes the cells in g->cells.
	 */
	int (*geom_cells)(const struct remora_table_def *t, uint64_t cells, struct codec_geom *g);
};

/*
 * Cells of a table, packed in one catalog word: bits 63:56 the cell count (0: the table was
 * declared without cells, one cell), byte i (0 .. 6) the start of cell i + 1 in 8-byte units.
 */
static inline unsigned codec_ncells(uint64_t cells)
{
	return cells ? (unsigned)(cells >> 56) : 1u;
}

/* Value bytes [*off, *off + *len) of cell c (c < codec_ncells). */
static inline void codec_cell_span(uint64_t cells, uint32_t value_size, unsigned c,
				   uint32_t *off, uint32_t *len)
{
	unsigned n = codec_ncells(cells);
	uint32_t a = c ? 8u * (uint32_t)((cells >> (8 * (c - 1))) & 0xff) : 0;
	uint32_t b = c + 1 < n ? 8u * (uint32_t)((cells >> (8 * c)) & 0xff) : value_size;

	*off = a;
	*len = b - a;
}

/* Every cell of a table with these cells, as a mask. */
static inline uint64_t codec_all_cells(uint64_t cells)
{
	unsigned n = codec_ncells(cells);

	return n >= 64 ? UINT64_MAX : (UINT64_C(1) << n) - 1;
}

/* Packs d (for a table of value_size bytes) into *out; -REMORA_ECONFIG when it is malformed. */
int codec_cells_pack(const struct remora_cell_def *d, uint32_t value_size, uint64_t *out);

/* The geometry of table t split as cells says (0: whole records). */
static inline int codec_geometry(const struct codec_ops *c, const struct remora_table_def *t,
				 uint64_t cells, struct codec_geom *g)
{
	int rc;

	if (c->size > offsetof(struct codec_ops, geom_cells) && c->geom_cells)
		return c->geom_cells(t, cells, g);
	rc = c->geom(t, g);
	if (!rc)
		g->cells = cells;
	return rc;
}

/*
 * Whether a record slot's image holds a record: a byte outside its lock word is set (a slot
 * never handed out, or one only locked, is all zeros there). Every codec zeroes its slots at
 * format, so this needs nothing but the geometry.
 */
static inline bool codec_slot_used(const struct codec_geom *g, const unsigned char *img)
{
	for (uint32_t i = 0; i < g->stride; i++)
		if (img[i] && (g->lock_off == REMORA_CODEC_NO_OFF || i < g->lock_off ||
			       i >= g->lock_off + 8))
			return true;
	return false;
}

/* The codec with this id, or NULL when it is not built in. */
const struct codec_ops *codec_get(uint32_t id);

/* encode_side of c, or NULL when c has none (an older codec table, or no side area). */
static inline void (*codec_side_fn(const struct codec_ops *c))(
	const struct codec_geom *, void *, unsigned, const struct codec_rec *)
{
	return c->size > offsetof(struct codec_ops, encode_side) ? c->encode_side : NULL;
}

/*
 * Test hook (internal): a codec codec_get() returns for its id when no built-in codec
 * has that id, so tests can format and load with codecs the engine does not ship.
 */
extern const struct codec_ops *codec_test;

extern const struct codec_ops codec_lockver;
extern const struct codec_ops codec_footer;
extern const struct codec_ops codec_cvt;
extern const struct codec_ops codec_cell;

/*
 * The cell codec (CREST, codec_cell.c). A record is a 64-byte header line, then its cells, each
 * starting on a 64-byte line. lock bit c is cell c's lock (masked-CAS); en[c] is the epoch the
 * last writer of cell c left, equal to EN(version) of the cell whenever the cell is unlocked.
 */
#define CODEC_CELL_MAX 20u
#define CODEC_CELL_LINE 64u
struct codec_cell_hdr {
	uint64_t key;
	uint64_t used;             /* flags 15:0 (VALID, DELETED), table 31:16, cells 47:32 */
	uint64_t lock;             /* bit c: cell c is locked */
	uint16_t en[CODEC_CELL_MAX];
};
_Static_assert(sizeof(struct codec_cell_hdr) == CODEC_CELL_LINE, "cell header is one line");
#define CODEC_CELL_LOCK_OFF 16u
#define CODEC_CELL_EN_OFF 24u
#define CODEC_CELL_TS_MASK ((UINT64_C(1) << 48) - 1)
/* A cell's version word: EN:16 | TS:48. */
static inline uint64_t codec_cell_version(uint16_t en, uint64_t ts)
{
	return (uint64_t)en << 48 | (ts & CODEC_CELL_TS_MASK);
}
static inline uint16_t codec_cell_en(uint64_t version)
{
	return (uint16_t)(version >> 48);
}
/* Copies cell c of the entry image img into value (the whole value's layout). */
void codec_cell_get(const struct codec_geom *g, const void *img, unsigned c, void *value);
/* Writes cell c of img from value (whole layout) with this version word, and reseals it. */
void codec_cell_put(const struct codec_geom *g, void *img, unsigned c, const void *value,
		    uint64_t version);

/* CVT cell flag: the cell holds a version (with VALID or DELETED from enum codec_rec_flags). */
#define REMORA_CVT_USED 0x100u
/* CVT cell flag: the cell held a version that was reclaimed (LOTUS's inline GC, or a crashed
 * writer's orphan). Free for a writer, but it keeps its timestamp: a reader that finds no
 * version below its snapshot can tell "absent then" from "overwritten or reclaimed since".
 * Encode a record with flags == REMORA_CVT_RECLAIMED (full-per-version layout only). */
#define REMORA_CVT_RECLAIMED 0x200u
/* Cells per CVT for tables formatted now: $REMORA_CVT_CELLS (2..8, default 2); 0 if invalid. */
unsigned codec_cvt_cells(void);
/* Version layout of CVTs formatted now: $REMORA_CVT_DELTA ("1": deltas, "0" or unset: full per
 * version); -1 if invalid. */
int codec_cvt_delta(void);

/*
 * The bytes a commit of cell `part` writes: the cell alone (full per version), or from the
 * newest full value's area through the cell (deltas: both change, in one WRITE).
 */
void codec_cvt_span(const struct codec_geom *g, unsigned part, uint32_t *off, uint32_t *len);

/*
 * What a redo log keeps of that commit: the bytes that changed, as pieces (returns 1 or 2):
 * the cell (full per version), or the full area and the cell (deltas; the cells between them
 * in the span are unchanged).
 */
unsigned codec_cvt_pieces(const struct codec_geom *g, unsigned part, uint32_t off[2],
			  uint32_t len[2]);

/*
 * The value of the version in cell `part` of the CVT image img. Full per version: *value points
 * into img. Deltas: the newest full value, with the undo deltas of every newer cell applied,
 * newest first, is built in buf (g->value_size bytes) and *value is buf. skip_one leaves out
 * the newest cell's delta (the delta_skip mutation). -EAGAIN when the full value and the
 * cells disagree (a READ that overlapped a commit): read again.
 */
int codec_cvt_value(const struct codec_geom *g, const void *img, unsigned part, void *buf,
		    const void **value, bool skip_one);

/*
 * Whether what a commit of cell `part` wrote is whole in img: the cell's checksum (under the
 * header's key and table), and with deltas the full area's, at the cell's timestamp. Only
 * those bytes: other cells may be torn by other commits (recovery repairs one log entry at a
 * time).
 */
bool codec_cvt_cell_intact(const struct codec_geom *g, const void *img, unsigned part);

#endif
