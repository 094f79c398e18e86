/* SPDX-License-Identifier: MIT */
/*
 * Layout computation, format and open of the pools. Everything goes through verbs, so it runs
 * the same on every backend; the memory nodes' CPUs do nothing.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "mutate/mutate.h"
#include "store.h"
#include "transport/core.h"
#include "transport/direct.h"

/* Bytes of zeros or bucket images one format WRITE carries. */
#define FORMAT_CHUNK (64u * 1024)

static int errf(char *err, size_t len, int code, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

static int errf(char *err, size_t len, int code, const char *fmt, ...)
{
	va_list ap;

	if (err && len) {
		va_start(ap, fmt);
		vsnprintf(err, len, fmt, ap);
		va_end(ap);
	}
	return code;
}

static uint64_t align_up(uint64_t v, uint64_t a)
{
	return (v + a - 1) / a * a;
}

/*
 * The transport keeps what each attached node registered; the store needs the key of the
 * region that covers the pool from offset 0. The public API has no getter for an attached
 * node's regions yet, so this reads the transport core's table (read-only, after attach).
 */
int store_node_key(struct remora_transport *tp, uint16_t node, uint32_t *key,
			  uint64_t *bytes)
{
	const struct rt_node *n;

	if (node >= REMORA_MAX_MN)
		return -REMORA_ENODE;
	n = &tp->nodes[node];
	if (!__atomic_load_n(&n->attached, __ATOMIC_ACQUIRE))
		return -REMORA_ENODE;
	for (uint32_t i = 0; i < n->nregions; i++) {
		if (n->regions[i].off == 0) {
			*key = n->regions[i].key;
			*bytes = n->regions[i].len;
			return 0;
		}
	}
	return -REMORA_EBADKEY;
}

uint16_t store_default_replicas(uint16_t n_mn, uint16_t r)
{
	if (r)
		return r;
	return n_mn >= 3 ? 3 : n_mn;
}

uint32_t store_chunk_records(const struct store_table *t)
{
	uint64_t c = t->ent.max_records / 4096;

	return c < 1 ? 1 : c > 64 ? 64 : (uint32_t)c;
}

int store_post_nowait(struct remora_chan *ch, struct remora_wr *wrs, unsigned n,
			     struct remora_waiter *track)
{
	unsigned done = 0;
	int rc = 0;

	for (unsigned i = 0; i < n; i++)
		wrs[i].wr_id = (uint64_t)(uintptr_t)track;
	while (done < n) {
		unsigned k = n - done < REMORA_STORE_NOWAIT_BATCH ? n - done :
								      REMORA_STORE_NOWAIT_BATCH;

		rc = remora_post(ch, wrs + done, k);
		if (rc == -EAGAIN)
			return store_exec(ch, wrs + done, n - done); /* full: wait instead */
		if (rc)
			return rc;
		if (track)
			track->pending += k;
		done += k;
	}
	return 0;
}

/* The ctl_no_mirror mutation, read from $REMORA_MUTATE once per process. */
static bool ctl_unmirrored(void)
{
	static int on = -1;
	int v = __atomic_load_n(&on, __ATOMIC_RELAXED);
	uint64_t m = 0;

	if (v < 0) {
		if (mut_from_env(MUT_TXN, &m, NULL, 0))
			m = 0; /* bad names: none (db open reports them) */
		v = mut_on(m, MUT_CTL_NO_MIRROR);
		__atomic_store_n(&on, v, __ATOMIC_RELAXED);
	}
	return v;
}

int store_ctl_faa(const struct store_db *st, struct remora_chan *ch, uint64_t off, uint64_t n,
		  uint64_t *old, uint32_t flags)
{
	const uint16_t acting = store_ctl_node(st);
	struct remora_wr last = store_wr_faa(st, acting, off, n, old, flags);
	int rc = 0;

	/* From the last copy down, one at a time: a claim cut part-way leaves each copy at least
	 * as far as the one before it, so any later successor is ahead of what was handed out. */
	uint32_t mirrors = ctl_unmirrored() ? 0 : store_ctl_copies(st) & ~(1u << acting);

	for (uint16_t m = 32; m-- > 0 && !rc;) {
		uint64_t sink = 0;
		struct remora_wr wr = store_wr_faa(st, m, off, n, &sink, flags);

		if (mirrors >> m & 1u)
			rc = store_exec(ch, &wr, 1);
	}
	return rc ? rc : store_exec(ch, &last, 1);
}

int store_alloc(const struct store_db *st, struct remora_chan *ch,
		       const struct store_table *t, struct store_chunk *c,
		       uint32_t nrec, uint64_t *idx)
{
	uint64_t first = 0;
	int rc;

	if (c->next >= c->end) {
		/* DURABLE: a cursor lost at power failure would hand out record slots again. */
		rc = store_ctl_faa(st, ch, t->ent.cursor_off, nrec, &first, REMORA_WR_DURABLE);
		if (rc)
			return rc;
		/* A claim that runs past the end keeps the part that fits; later claims fail. */
		if (first >= t->ent.capacity)
			return -REMORA_EFULL;
		c->next = first;
		c->end = first + nrec < t->ent.capacity ? first + nrec : t->ent.capacity;
	}
	*idx = c->next++;
	return 0;
}

/* ---- layout ---------------------------------------------------------------------------- */

struct layout {
	struct store_sb sb;
	uint64_t tail_end; /* node 0: zero [store_tail_off, tail_end) too */
	struct store_tabent tab[REMORA_MAX_TABLES];
	struct codec_geom geom[REMORA_MAX_TABLES];
};

static int check_tables(const struct remora_db_format_cfg *cfg, char *err, size_t errlen)
{
	uint32_t seen = 0;

	if (!cfg->tables || cfg->ntables == 0 || cfg->ntables > REMORA_MAX_TABLES)
		return errf(err, errlen, -REMORA_ECONFIG, "format: %u tables, need 1..%d",
			    cfg->ntables, REMORA_MAX_TABLES);
	for (unsigned i = 0; i < cfg->ntables; i++) {
		const struct remora_table_def *t = &cfg->tables[i];

		if (t->id >= REMORA_MAX_TABLES)
			return errf(err, errlen, -REMORA_ECONFIG,
				    "format: table id %u out of range 0..%d", t->id,
				    REMORA_MAX_TABLES - 1);
		if (seen & (1u << t->id))
			return errf(err, errlen, -REMORA_ECONFIG, "format: table id %u used twice",
				    t->id);
		seen |= 1u << t->id;
		if (!memchr(t->name, '\0', sizeof(t->name)) || t->name[0] == '\0')
			return errf(err, errlen, -REMORA_ECONFIG,
				    "format: table %u: name empty or longer than %d bytes", t->id,
				    REMORA_TABLE_NAME_MAX - 1);
		for (unsigned j = 0; j < i; j++)
			if (strcmp(cfg->tables[j].name, t->name) == 0)
				return errf(err, errlen, -REMORA_ECONFIG,
					    "format: table name '%s' used twice", t->name);
		if (t->max_records == 0 || t->max_records > (UINT64_C(1) << 36))
			return errf(err, errlen, -REMORA_ECONFIG,
				    "format: table '%s': max_records %llu out of range 1..2^36",
				    t->name, (unsigned long long)t->max_records);
	}
	return 0;
}

/* Computes the whole layout; the same on every node but for sb.node. */
/* The packed cells of table d (0: declared without cells); one line in err when malformed. */
static int table_cells(const struct remora_db_format_cfg *cfg, const struct remora_table_def *d,
		       uint64_t *cells, char *err, size_t errlen)
{
	*cells = 0;
	for (unsigned i = 0; cfg->cells && i < cfg->ncells; i++) {
		if (cfg->cells[i].table != d->id)
			continue;
		if (*cells || codec_cells_pack(&cfg->cells[i], d->value_size, cells))
			return errf(err, errlen, -REMORA_ECONFIG,
				    "format: table '%s': bad cells (1..%u cells, starts 0 then "
				    "ascending 8-byte multiples below min(value_size, 2048), once)",
				    d->name, REMORA_MAX_CELLS);
	}
	return 0;
}

static int layout_compute(const struct remora_db_format_cfg *cfg, const struct codec_ops *codec,
			  struct layout *lo, char *err, size_t errlen)
{
	uint64_t off, ncoords, log_bytes;
	int rc;

	memset(lo, 0, sizeof(*lo));
	if (cfg->n_mn == 0 || cfg->n_mn > REMORA_MAX_MN)
		return errf(err, errlen, -REMORA_ECONFIG, "format: %u memory nodes, need 1..%d",
			    cfg->n_mn, REMORA_MAX_MN);
	if (cfg->replicas > cfg->n_mn)
		return errf(err, errlen, -REMORA_ECONFIG,
			    "format: %u replicas but only %u memory nodes", cfg->replicas,
			    cfg->n_mn);
	if (cfg->max_cn > REMORA_MAX_CN)
		return errf(err, errlen, -REMORA_ECONFIG, "format: max_cn %u above %d", cfg->max_cn,
			    REMORA_MAX_CN);
	if (cfg->coords_per_cn >= REMORA_STORE_COORD_SLOTS)
		return errf(err, errlen, -REMORA_ECONFIG,
			    "format: coords_per_cn %u, at most %u", cfg->coords_per_cn,
			    REMORA_STORE_COORD_SLOTS - 1);
	if (cfg->log_slot_bytes && (cfg->log_slot_bytes < 4096 || cfg->log_slot_bytes % 64 ||
				    cfg->log_slot_bytes > (64u << 20)))
		return errf(err, errlen, -REMORA_ECONFIG,
			    "format: log_slot_bytes %u: need a multiple of 64 in 4 KiB..64 MiB",
			    cfg->log_slot_bytes);
	rc = check_tables(cfg, err, errlen);
	if (rc)
		return rc;

	lo->sb.magic = REMORA_STORE_MAGIC;
	lo->sb.layout_version = REMORA_STORE_LAYOUT_VERSION;
	lo->sb.sb_bytes = sizeof(lo->sb);
	lo->sb.n_mn = cfg->n_mn;
	lo->sb.replicas = store_default_replicas(cfg->n_mn, cfg->replicas);
	lo->sb.codec = (uint16_t)codec->id;
	lo->sb.ntables = cfg->ntables;
	lo->sb.max_cn = cfg->max_cn ? cfg->max_cn : REMORA_STORE_DEFAULT_MAX_CN;
	lo->sb.coords_per_cn = cfg->coords_per_cn ? cfg->coords_per_cn :
						    REMORA_STORE_DEFAULT_COORDS_PER_CN;
	lo->sb.log_slot_bytes = cfg->log_slot_bytes ? cfg->log_slot_bytes :
						      REMORA_STORE_DEFAULT_LOG_SLOT;
	lo->sb.bucket_bytes = sizeof(struct store_bucket);
	lo->sb.catalog_off = REMORA_STORE_CATALOG_OFF;
	lo->sb.catalog_bytes = REMORA_STORE_CATALOG_BYTES;
	lo->sb.control_off = REMORA_STORE_CONTROL_OFF;
	lo->sb.control_bytes = REMORA_STORE_CONTROL_BYTES;
	lo->sb.log_off = REMORA_STORE_LOG_OFF;
	ncoords = (uint64_t)lo->sb.max_cn * lo->sb.coords_per_cn;
	log_bytes = ncoords * lo->sb.log_slot_bytes;
	lo->sb.log_bytes = log_bytes;
	off = align_up(lo->sb.log_off + log_bytes, REMORA_STORE_ALIGN);
	lo->sb.data_off = off;

	for (unsigned i = 0; i < cfg->ntables; i++) {
		const struct remora_table_def *d = &cfg->tables[i];
		struct store_tabent *e = &lo->tab[d->id];
		struct codec_geom *g = &lo->geom[d->id];
		struct store_table tmp;
		uint64_t chunk, nb;

		rc = table_cells(cfg, d, &e->cells, err, errlen);
		if (rc)
			return rc;
		rc = codec_geometry(codec, d, e->cells, g);
		if (rc && codec->id == REMORA_CODEC_CVT && !codec_cvt_cells())
			return errf(err, errlen, rc, "format: REMORA_CVT_CELLS must be 2..8");
		if (rc && codec->id == REMORA_CODEC_CVT && codec_cvt_delta() < 0)
			return errf(err, errlen, rc, "format: REMORA_CVT_DELTA must be 0 or 1");
		if (rc)
			return errf(err, errlen, rc,
				    "format: table '%s': value_size %u not supported by codec %s",
				    d->name, d->value_size, codec->name);
		memcpy(e->name, d->name, sizeof(e->name));
		e->id = d->id;
		e->value_size = d->value_size;
		e->max_records = d->max_records;
		e->stride = g->stride;
		e->flags = REMORA_STORE_TAB_PRESENT;
		tmp.ent = *e;
		chunk = store_chunk_records(&tmp);
		/* Room for per-coordinator chunks left partly used, loader chunks, tombstones. */
		e->capacity = d->max_records + d->max_records / 4 + chunk * ncoords + 1024;
		nb = (e->capacity + 7) / 8; /* 15 slots per bucket: the index stays about half full */
		nb = align_up(nb < cfg->n_mn ? cfg->n_mn : nb, cfg->n_mn);
		e->nbuckets = nb;
		e->index_off = off;
		e->index_bytes = nb * sizeof(struct store_bucket);
		off = align_up(off + e->index_bytes, REMORA_STORE_ALIGN);
		e->rec_off = off;
		e->rec_bytes = e->capacity * g->stride;
		off = align_up(off + e->rec_bytes, REMORA_STORE_ALIGN);
		e->side_off = off;
		e->side_bytes = e->capacity * g->side_bytes;
		off = align_up(off + e->side_bytes, REMORA_STORE_ALIGN);
		e->cursor_off = REMORA_STORE_CONTROL_OFF +
				offsetof(struct store_control, cursor) + 8ull * d->id;
	}
	lo->sb.data_bytes = off - lo->sb.data_off;
	lo->sb.layout_bytes = off;
	return 0;
}

static uint64_t sb_csum(const struct store_sb *sb)
{
	return store_csum(REMORA_STORE_SB_CSUM_SEED, sb,
				 offsetof(struct store_sb, csum));
}

static uint64_t new_format_id(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return store_mix64((uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec) ^
	       store_mix64((uint64_t)getpid() << 20);
}

/* ---- format ---------------------------------------------------------------------------- */

struct fmt {
	struct remora_chan *ch;
	struct remora_wr *wrs;
	unsigned n, cap;
	void *zero; /* FORMAT_CHUNK bytes of zeros */
};

static int fmt_flush(struct fmt *f)
{
	int rc = store_exec(f->ch, f->wrs, f->n);

	f->n = 0;
	return rc;
}

static int fmt_write(struct fmt *f, uint16_t node, uint32_t key, uint64_t off, const void *src,
		     uint32_t len)
{
	if (f->n == f->cap) {
		int rc = fmt_flush(f);

		if (rc)
			return rc;
	}
	f->wrs[f->n++] = (struct remora_wr){
		.raddr = store_addr(node, off), .rkey = key, .len = len,
		.op = REMORA_OP_WRITE, .local = (void *)(uintptr_t)src,
	};
	return 0;
}

static int fmt_zero(struct fmt *f, uint16_t node, uint32_t key, uint64_t off, uint64_t len)
{
	while (len) {
		uint32_t k = len < FORMAT_CHUNK ? (uint32_t)len : FORMAT_CHUNK;
		int rc = fmt_write(f, node, key, off, f->zero, k);

		if (rc)
			return rc;
		off += k;
		len -= k;
	}
	return 0;
}

/*
 * Bucket images carry their own index in the header, so they are built per WRITE into one of
 * nbufs buffers; a buffer is reused only after the batch holding its WRITE was flushed.
 */
static int fmt_index(struct fmt *f, uint16_t node, uint32_t key, const struct store_tabent *e,
		     struct store_bucket *bufs, unsigned nbufs)
{
	const uint64_t per = FORMAT_CHUNK / sizeof(struct store_bucket);
	unsigned used = 0;
	int rc;

	for (uint64_t b = 0; b < e->nbuckets; b += per) {
		uint64_t k = e->nbuckets - b < per ? e->nbuckets - b : per;
		struct store_bucket *img;

		if (used == nbufs) {
			rc = fmt_flush(f);
			if (rc)
				return rc;
			used = 0;
		}
		img = bufs + (uint64_t)used++ * per;
		memset(img, 0, k * sizeof(*img));
		for (uint64_t i = 0; i < k; i++)
			img[i].hdr = store_bucket_hdr(e->id, b + i);
		rc = fmt_write(f, node, key, e->index_off + b * sizeof(*img), img,
			       (uint32_t)(k * sizeof(*img)));
		if (rc)
			return rc;
	}
	return fmt_flush(f); /* the next table reuses the buffers */
}

/* Marks the last queued WRITE durable (pmem: persistent before it completes). */
static void fmt_durable(struct fmt *f)
{
	f->wrs[f->n - 1].flags |= REMORA_WR_DURABLE;
}

static int format_node(struct fmt *f, const struct layout *lo, uint16_t node, uint32_t key,
		       struct store_sb *sb_img, struct store_bucket *bufs,
		       unsigned nbufs)
{
	static const struct store_sb blank;
	int rc;

	/*
	 * First make the pool unopenable, so a format that dies halfway leaves no valid db; on
	 * pmem durably, or a power failure could bring the old superblock back over new bytes.
	 */
	rc = fmt_write(f, node, key, REMORA_STORE_SB_OFF, &blank, sizeof(blank));
	if (!rc) {
		fmt_durable(f);
		rc = fmt_flush(f);
	}
	if (!rc)
		rc = fmt_zero(f, node, key, REMORA_STORE_CATALOG_OFF,
			      REMORA_STORE_CATALOG_BYTES + REMORA_STORE_CONTROL_BYTES);
	if (!rc)
		rc = fmt_zero(f, node, key, lo->sb.log_off, lo->sb.log_bytes);
	if (!rc && node == 0 && lo->tail_end > store_tail_off(&lo->sb))
		rc = fmt_zero(f, node, key, store_tail_off(&lo->sb),
			      lo->tail_end - store_tail_off(&lo->sb));
	for (unsigned i = 0; !rc && i < REMORA_MAX_TABLES; i++)
		if (lo->tab[i].flags & REMORA_STORE_TAB_PRESENT)
			rc = fmt_index(f, node, key, &lo->tab[i], bufs, nbufs);
	if (!rc)
		rc = fmt_flush(f);
	if (!rc)
		rc = fmt_write(f, node, key, REMORA_STORE_CATALOG_OFF, lo->tab, sizeof(lo->tab));
	if (!rc)
		rc = fmt_flush(f);
	/* Everything below the superblock persistent (pmem) before the superblock says "db". */
	if (!rc)
		rc = remora_persist(f->ch, node, REMORA_STORE_SB_BYTES,
				    lo->sb.layout_bytes - REMORA_STORE_SB_BYTES);
	if (!rc && node == 0 && lo->tail_end > store_tail_off(&lo->sb)) /* the protocol's tail */
		rc = remora_persist(f->ch, node, store_tail_off(&lo->sb),
				    lo->tail_end - store_tail_off(&lo->sb));
	if (rc)
		return rc;
	*sb_img = lo->sb;
	sb_img->node = node;
	sb_img->csum = sb_csum(sb_img);
	rc = fmt_write(f, node, key, REMORA_STORE_SB_OFF, sb_img, sizeof(*sb_img));
	if (rc)
		return rc;
	fmt_durable(f);
	return fmt_flush(f);
}

/* The end of node 0's protocol tail: what fits a pool of bytes; no tail under the mutation. */
static uint64_t format_tail_end(const struct store_sb *sb, uint64_t tail_bytes, uint64_t bytes)
{
	uint64_t end = store_tail_off(sb) + tail_bytes, m = 0;

	if (mut_from_env(MUT_TXN, &m, NULL, 0))
		m = 0; /* bad names: none (db open reports them) */
	if (mut_on(m, MUT_FORMAT_KEEPS_TAIL))
		return 0;
	return end < bytes ? end : bytes;
}

int store_format(struct remora_transport *tp, const struct remora_db_format_cfg *cfg,
		 uint32_t codec_id, uint64_t tail_bytes, char *err, size_t errlen)
{
	const struct codec_ops *codec = codec_get(codec_id);
	const unsigned nbufs = 16;
	struct store_bucket *bufs = NULL;
	struct store_sb sb_img;
	struct layout *lo;
	struct fmt f = { .cap = 64 };
	uint32_t key[REMORA_MAX_MN];
	int rc;

	if (!codec)
		return errf(err, errlen, -REMORA_ECONFIG, "format: codec %u not built in", codec_id);
	lo = calloc(1, sizeof(*lo));
	if (!lo)
		return errf(err, errlen, -ENOMEM, "format: out of memory");
	rc = layout_compute(cfg, codec, lo, err, errlen);
	if (rc)
		goto out_lo;
	lo->sb.format_id = new_format_id();
	for (uint16_t m = 0; m < cfg->n_mn; m++) {
		uint64_t bytes;

		rc = store_node_key(tp, m, &key[m], &bytes);
		if (rc) {
			errf(err, errlen, rc, "format: memory node %u is not attached (or has no region at offset 0)", m);
			goto out_lo;
		}
		if (bytes < lo->sb.layout_bytes) {
			rc = errf(err, errlen, -REMORA_EFULL,
				  "format: the tables need %llu bytes per memory node, node %u has %llu",
				  (unsigned long long)lo->sb.layout_bytes, m,
				  (unsigned long long)bytes);
			goto out_lo;
		}
		if (m == 0)
			lo->tail_end = format_tail_end(&lo->sb, tail_bytes, bytes);
	}
	rc = remora_chan_open(tp, &f.ch);
	if (rc) {
		errf(err, errlen, rc, "format: cannot open a channel: %s", remora_strerror(rc));
		goto out_lo;
	}
	f.wrs = calloc(f.cap, sizeof(*f.wrs));
	f.zero = calloc(1, FORMAT_CHUNK);
	bufs = calloc(nbufs, FORMAT_CHUNK);
	if (!f.wrs || !f.zero || !bufs) {
		rc = errf(err, errlen, -ENOMEM, "format: out of memory");
		goto out_bufs;
	}
	for (uint16_t m = 0; m < cfg->n_mn && !rc; m++) {
		rc = format_node(&f, lo, m, key[m], &sb_img, bufs, nbufs);
		if (rc)
			errf(err, errlen, rc, "format: memory node %u: %s", m, remora_strerror(rc));
	}
out_bufs:
	free(bufs);
	free(f.zero);
	free(f.wrs);
	remora_chan_close(f.ch);
out_lo:
	free(lo);
	return rc;
}

/* ---- open ------------------------------------------------------------------------------ */

static int check_sb(const struct store_sb *sb, uint16_t m, char *err, size_t errlen)
{
	if (sb->magic != REMORA_STORE_MAGIC)
		return errf(err, errlen, -REMORA_ELAYOUT,
			    "memory node %u: no remora database (magic %#llx); format it first", m,
			    (unsigned long long)sb->magic);
	if (sb->layout_version != REMORA_STORE_LAYOUT_VERSION || sb->sb_bytes != sizeof(*sb))
		return errf(err, errlen, -REMORA_ELAYOUT,
			    "memory node %u: layout version %u, this build reads version %u", m,
			    sb->layout_version, REMORA_STORE_LAYOUT_VERSION);
	if (sb->csum != sb_csum(sb))
		return errf(err, errlen, -REMORA_ELAYOUT, "memory node %u: superblock checksum mismatch",
			    m);
	if (sb->node != m)
		return errf(err, errlen, -REMORA_ELAYOUT,
			    "memory node %u: pool was formatted as memory node %u", m, sb->node);
	return 0;
}

static int read_node(struct store_db *st, struct remora_chan *ch, uint16_t m,
		     struct store_sb *sb, void *catalog)
{
	struct remora_wr wrs[2] = {
		store_wr_read(st, m, REMORA_STORE_SB_OFF, sb, sizeof(*sb)),
		store_wr_read(st, m, REMORA_STORE_CATALOG_OFF, catalog,
				     REMORA_MAX_TABLES * sizeof(struct store_tabent)),
	};

	return store_exec(ch, wrs, 2);
}

static const char *codec_name(uint32_t id)
{
	const struct codec_ops *c = codec_get(id);

	return c ? c->name : "unknown";
}

static int load_catalog(struct store_db *st, const struct store_tabent *cat,
			char *err, size_t errlen)
{
	unsigned n = 0;

	for (unsigned i = 0; i < REMORA_MAX_TABLES; i++) {
		const struct store_tabent *e = &cat[i];
		struct store_table *t = &st->tab[i];
		struct remora_table_def d = { .id = e->id, .value_size = e->value_size,
					      .max_records = e->max_records };

		if (!(e->flags & REMORA_STORE_TAB_PRESENT))
			continue;
		if (e->id != i || !memchr(e->name, '\0', sizeof(e->name)) ||
		    codec_geometry(st->codec, &d, e->cells, &t->geom) || t->geom.stride != e->stride ||
		    e->nbuckets == 0 || e->nbuckets % st->n_mn ||
		    e->rec_off + e->rec_bytes > st->sb.layout_bytes)
			return errf(err, errlen, -REMORA_ELAYOUT, "catalog entry %u is corrupt", i);
		t->ent = *e;
		t->present = true;
		n++;
	}
	if (n != st->sb.ntables)
		return errf(err, errlen, -REMORA_ELAYOUT, "catalog holds %u tables, superblock says %u",
			    n, st->sb.ntables);
	return 0;
}

/*
 * The memory nodes a failover declared dead: mnf_dead, ORed over every node this process has
 * not detached. The failover publishes it on every live node, so a node that died first
 * (node 0 too) holds an older mask, which the OR makes harmless. An open after a failover (a
 * check, a tool) places data on the live copies too.
 */
int store_read_dead(struct store_db *st, struct remora_chan *ch, char *err, size_t errlen)
{
	uint32_t down = st->tp ? rt_transport_down_mask(st->tp) : 0;
	uint64_t all = 0;
	unsigned read = 0;
	int rc = -REMORA_ENODE;

	/* One node at a time: a node that died unseen here (on rdma its READ fails) is skipped,
	 * and the live ones, which the failover wrote, say it is dead. */
	for (uint16_t m = 0; m < st->n_mn; m++) {
		uint64_t word = 0;
		struct remora_wr wr = store_wr_read(st, m, REMORA_STORE_CONTROL_OFF +
						    offsetof(struct store_control, mnf_dead),
						    &word, 8);

		if (down >> m & 1u)
			continue;
		rc = store_exec(ch, &wr, 1);
		if (rc)
			continue;
		all |= word;
		read++;
	}
	if (!read)
		return errf(err, errlen, rc, "reading the memory nodes' control areas: %s",
			    remora_strerror(rc));
	/* Not this process's own detaches: a placement that moves only by the published mask
	 * keeps every open behind the failover barrier (runtime/txn/failover.c). */
	store_set_dead(st, (uint32_t)all);
	return 0;
}

int store_open(struct store_db *st, struct remora_transport *tp,
		      struct remora_chan *ch, uint16_t n_mn, uint16_t replicas, uint32_t codec,
		      char *err, size_t errlen)
{
	const size_t catbytes = REMORA_MAX_TABLES * sizeof(struct store_tabent);
	struct store_tabent *cat0, *cat;
	uint32_t down = tp ? rt_transport_down_mask(tp) : 0;
	uint64_t bytes[REMORA_MAX_MN] = { 0 };
	struct store_sb sb;
	int rc = 0;

	memset(st, 0, sizeof(*st));
	st->tp = tp;
	st->n_mn = n_mn;
	if (n_mn == 0 || n_mn > REMORA_MAX_MN)
		return errf(err, errlen, -REMORA_ECONFIG, "n_mn %u: need 1..%d", n_mn, REMORA_MAX_MN);
	cat0 = calloc(2, catbytes);
	if (!cat0)
		return errf(err, errlen, -ENOMEM, "out of memory");
	cat = cat0 + REMORA_MAX_TABLES;
	for (uint16_t m = 0; m < n_mn; m++) {
		if (down >> m & 1u)
			continue;
		rc = store_node_key(tp, m, &st->rkey[m], &bytes[m]);
		if (rc) {
			errf(err, errlen, rc, "memory node %u is not attached", m);
			goto out;
		}
	}
	/* The nodes a failover declared dead first: their pools, which nobody serves any more,
	 * are not read (on rdma their READs would fail). */
	rc = store_read_dead(st, ch, err, errlen);
	if (rc)
		goto out;
	down |= store_dead(st); /* skipped below, placed by the published mask alone */
	if ((down & ((UINT64_C(1) << n_mn) - 1)) == (UINT64_C(1) << n_mn) - 1) {
		rc = errf(err, errlen, -REMORA_ENODE, "every memory node failed over");
		goto out;
	}
	for (uint16_t m = 0, have = 0; m < n_mn; m++) {
		bool first = !have;

		/* The first live node's superblock and catalog are the reference (every node holds
		 * the same but for sb.node). */
		if (down >> m & 1u)
			continue;
		have = 1;
		rc = read_node(st, ch, m, &sb, first ? cat0 : cat);
		if (rc) {
			errf(err, errlen, rc, "memory node %u: reading the superblock: %s", m,
			     remora_strerror(rc));
			goto out;
		}
		rc = check_sb(&sb, m, err, errlen);
		if (rc)
			goto out;
		if (first) {
			st->sb = sb;
			st->sb.node = 0;
		} else if (sb.format_id != st->sb.format_id || memcmp(cat, cat0, catbytes)) {
			rc = errf(err, errlen, -REMORA_ELAYOUT,
				  "memory node %u belongs to another format than memory node %u", m,
				  (unsigned)__builtin_ctz(~down));
			goto out;
		}
		if (bytes[m] < sb.layout_bytes) {
			rc = errf(err, errlen, -REMORA_ELAYOUT,
				  "memory node %u: pool has %llu bytes, the layout needs %llu", m,
				  (unsigned long long)bytes[m], (unsigned long long)sb.layout_bytes);
			goto out;
		}
	}
	if (st->sb.n_mn != n_mn) {
		rc = errf(err, errlen, -REMORA_ECONFIG,
			  "database was formatted for %u memory nodes, opened with %u", st->sb.n_mn,
			  n_mn);
		goto out;
	}
	if (replicas && replicas != st->sb.replicas) {
		rc = errf(err, errlen, -REMORA_ECONFIG,
			  "database was formatted with %u replicas, opened with %u", st->sb.replicas,
			  replicas);
		goto out;
	}
	if (codec != REMORA_CODEC_NONE && st->sb.codec != codec) {
		rc = errf(err, errlen, -REMORA_ELAYOUT,
			  "database was formatted for the %s record codec, this protocol needs %s",
			  codec_name(st->sb.codec), codec_name(codec));
		goto out;
	}
	st->replicas = st->sb.replicas;
	st->codec = codec_get(st->sb.codec);
	if (!st->codec) {
		rc = errf(err, errlen, -REMORA_ELAYOUT,
			  "database was formatted for the %s record codec, which this build lacks",
			  codec_name(st->sb.codec));
		goto out;
	}
	rc = load_catalog(st, cat0, err, errlen);
out:
	free(cat0);
	return rc;
}
