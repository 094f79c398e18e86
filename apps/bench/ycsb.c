// SPDX-License-Identifier: MIT
/*
 * YCSB core workloads A-F (Cooper et al., SoCC'10; the workloads/workload[a-f] files of the
 * YCSB distribution), one table "usertable" of --records records of --value-size bytes
 * (YCSB: 10 fields x 100 B), as transactions:
 *
 *   A  50% Read, 50% Update                        zipfian
 *   B  95% Read,  5% Update                        zipfian
 *   C 100% Read                                    zipfian
 *   D  95% Read,  5% Insert                        latest (recent inserts are hot)
 *   E  95% Scan,  5% Insert                        zipfian start, length uniform 1..--max-scan
 *   F  50% Read, 50% ReadModifyWrite               zipfian
 *
 * A scan reads consecutive keys in one transaction (the store is hashed, so a scan is a batch
 * of point reads). --ops-per-txn N makes every Read/Update/ReadModifyWrite touch N distinct
 * records in one transaction (CREST's YCSB: N = 4). Update writes the whole value (the tx API
 * fetches a record before writing it), so Update and ReadModifyWrite cost the same verbs.
 *
 * --history DIR (mixes A, B, C, F): every cell starts with {key, writer}, a transaction reads
 * or writes one cell per record, and each committed transaction is recorded with the writer
 * of every cell it read (apps/bench/history.h; cell c of key k is history key k * cells + c),
 * so --check runs the serializability checker over cells.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "history.h"
#include "rng.h"
#include "workload.h"

#define YCSB_TABLE 0

enum ycsb_type { Y_READ, Y_UPDATE, Y_INSERT, Y_SCAN, Y_RMW, Y__TYPES };

struct ycsb {
	uint64_t records;
	uint64_t capacity;     /* records + room for inserts */
	uint32_t value_size;
	unsigned ncells;        /* 0: record-level; else equal cells (an update writes one) */
	unsigned ops;
	unsigned max_scan;
	unsigned mix[Y__TYPES]; /* cumulative percentages */
	bool latest;
	const char *history;    /* --history directory, or NULL */
	struct wl_keydist dist;
};

struct ycsb_coord {
	uint8_t *buf;          /* max(ops, max_scan) values */
	bool *found;
	uint64_t inserted;     /* inserts this coordinator committed (keys: wl_coord.drawn) */
	struct hist_log log;   /* --history */
	bool logging;
};

/* The first 16 bytes of every cell (of the value when it has none): its key (a misplaced
 * record shows) and its writer. */
struct ycsb_hdr {
	uint64_t key;
	uint64_t writer;
};

static const struct wl_knob ycsb_knobs[] = {
	{ "mix", "A", "YCSB core workload: A | B | C | D | E | F" },
	{ "records", "100000", "records loaded before the run" },
	{ "value-size", "1000", "bytes per record value (YCSB: 10 fields x 100 B)" },
	{ "dist", "zipf", "key popularity of A-C, E, F: uniform | zipf (D is always latest)" },
	{ "theta", "0.99", "Zipf skew" },
	{ "ops-per-txn", "1", "records per Read/Update/ReadModifyWrite transaction" },
	{ "cells", "0", "cells (column groups) per record, 0: none; an update writes one (CREST: "
			"4 x 40 B, --value-size 160)" },
	{ "max-scan", "100", "longest scan of workload E (YCSB: 100)" },
	{ "insert-room", "", "records D and E may insert; empty: as many as --records" },
	{ "write-pct", "", "instead of --mix: this percent of transactions Update, the rest Read "
			   "(CREST's 0-100% writes)" },
	{ "history", "", "record every committed transaction under this directory (mixes A, B, C, "
			 "F; one cell per record), checked for serializability by --check" },
	{ NULL, NULL, NULL },
};

/* Percentages Read, Update, Insert, Scan, ReadModifyWrite per workload A-F. */
static const unsigned ycsb_mixes[6][Y__TYPES] = {
	{ 50, 50, 0, 0, 0 }, { 95, 5, 0, 0, 0 }, { 100, 0, 0, 0, 0 },
	{ 95, 0, 5, 0, 0 },  { 0, 0, 5, 95, 0 }, { 50, 0, 0, 0, 50 },
};

/*
 * --write-pct P: Read 100 - P, Update P (mix[] otherwise the chosen workload's; which becomes
 * A's index, so that the keys are not D's "latest").
 */
static int write_pct_mix(struct wl *wl, unsigned *which, unsigned *mix)
{
	const char *p = wl_knob_str(wl, "write-pct");
	uint64_t v;
	int rc;

	memcpy(mix, ycsb_mixes[*which], sizeof(ycsb_mixes[0]));
	if (!p || !*p)
		return 0;
	rc = wl_knob_u64(wl, "write-pct", 0, 100, &v);
	if (rc)
		return rc;
	memset(mix, 0, sizeof(ycsb_mixes[0]));
	mix[Y_READ] = 100 - (unsigned)v;
	mix[Y_UPDATE] = (unsigned)v;
	*which = 0;
	return 0;
}

/* --history: only mixes without inserts and scans, and a transaction's cells fit a record. */
static int history_init(struct wl *wl, struct ycsb *y, const unsigned *mix)
{
	const char *dir = wl_knob_str(wl, "history");

	if (!dir || !*dir)
		return 0;
	if (mix[Y_INSERT] || mix[Y_SCAN])
		return wl_fail(wl, "--history needs mix A, B, C or F (no inserts or scans)");
	if (y->ops > HIST_MAX_OPS)
		return wl_fail(wl, "--history records at most %u records per transaction",
			       HIST_MAX_OPS);
	if (mkdir(dir, 0777) && errno != EEXIST)
		return wl_fail(wl, "--history %s: %s", dir, strerror(errno));
	y->history = dir;
	return 0;
}

static int ycsb_init(struct wl *wl)
{
	static const char *const mixes[] = { "A", "B", "C", "D", "E", "F", NULL };
	static const char *const mixes_lc[] = { "a", "b", "c", "d", "e", "f", NULL };
	struct ycsb *y = calloc(1, sizeof(*y));
	const char *room, *m = wl_knob_str(wl, "mix");
	unsigned which = 0, acc = 0, mix[Y__TYPES];
	uint64_t v, extra;
	int rc;

	if (!y)
		return wl_fail(wl, "out of memory");
	wl->priv = y;
	for (which = 0; mixes_lc[which]; which++)
		if (m && !strcmp(m, mixes_lc[which]))
			break;
	if (!mixes_lc[which]) {
		rc = wl_knob_choice(wl, "mix", mixes, &which);
		if (rc)
			return rc;
	}
	rc = write_pct_mix(wl, &which, mix);
	if (rc)
		return rc;
	for (unsigned i = 0; i < Y__TYPES; i++) {
		acc += mix[i];
		y->mix[i] = acc;
	}
	y->latest = which == 3;
	rc = wl_knob_u64(wl, "records", 1, UINT64_C(1) << 40, &y->records);
	if (!rc)
		rc = wl_knob_u64(wl, "value-size", sizeof(struct ycsb_hdr), 65536, &v);
	if (rc)
		return rc;
	y->value_size = (uint32_t)v;
	rc = wl_knob_u64(wl, "cells", 0, REMORA_MAX_CELLS, &v);
	if (rc)
		return rc;
	y->ncells = (unsigned)v;
	if (y->ncells > 1 && (y->value_size % (8 * y->ncells) ||
			      y->value_size / y->ncells < sizeof(struct ycsb_hdr)))
		return wl_fail(wl, "--cells %u needs a --value-size that splits into %u cells of "
			       "8-byte multiples of at least 16 B", y->ncells, y->ncells);
	rc = wl_knob_u64(wl, "ops-per-txn", 1, WL_MAX_KEYS, &v);
	if (rc)
		return rc;
	y->ops = (unsigned)v;
	if (y->ops > y->records)
		return wl_fail(wl, "--ops-per-txn %u needs at least that many --records", y->ops);
	rc = wl_knob_u64(wl, "max-scan", 1, 10000, &v);
	if (rc)
		return rc;
	y->max_scan = (unsigned)v;
	extra = y->records;
	room = wl_knob_str(wl, "insert-room");
	if (room && *room) {
		rc = wl_knob_u64(wl, "insert-room", 0, UINT64_C(1) << 40, &extra);
		if (rc)
			return rc;
	}
	y->capacity = y->records + extra;
	rc = history_init(wl, y, mix);
	if (rc)
		return rc;
	if (y->latest)
		return wl_keydist_init(wl, &y->dist, y->records, 0.99, false);
	return wl_keydist_setup(wl, &y->dist, y->records, "dist", "theta", true);
}

static void ycsb_fini(struct wl *wl)
{
	free(wl->priv);
}

static int ycsb_prepare(const struct wl *wl)
{
	const struct ycsb *y = wl->priv;

	return y->history ? hist_dir_clear(y->history) : 0;
}

/* Cells of a record (1 without cells) and the bytes of each. */
static unsigned ncells_of(const struct ycsb *y)
{
	return y->ncells > 1 ? y->ncells : 1;
}

static uint32_t cell_bytes(const struct ycsb *y)
{
	return y->value_size / ncells_of(y);
}

static unsigned ycsb_tables(const struct wl *wl, struct remora_table_def *defs)
{
	const struct ycsb *y = wl->priv;

	memset(defs, 0, sizeof(*defs));
	snprintf(defs[0].name, sizeof(defs[0].name), "usertable");
	defs[0].id = YCSB_TABLE;
	defs[0].value_size = y->value_size;
	defs[0].max_records = y->capacity;
	return 1;
}

static unsigned ycsb_cells(const struct wl *wl, struct remora_cell_def *defs)
{
	const struct ycsb *y = wl->priv;

	if (y->ncells < 2)
		return 0;
	memset(defs, 0, sizeof(*defs));
	defs[0].table = YCSB_TABLE;
	defs[0].ncells = y->ncells;
	for (unsigned i = 0; i < y->ncells; i++)
		defs[0].start[i] = i * (y->value_size / y->ncells);
	return 1;
}

/* The cells an update of the i-th record of transaction txid writes: one, or all. */
static uint64_t ycsb_wr_cells(const struct ycsb *y, uint64_t txid, unsigned i)
{
	uint64_t x = txid + i;

	if (y->ncells < 2)
		return UINT64_MAX;
	return UINT64_C(1) << (wl_splitmix64(&x) % y->ncells);
}

/* The cell of the i-th record of transaction txid that an Update writes and a history
 * records (cell 0 of a record without cells). */
static unsigned ycsb_cell(const struct ycsb *y, uint64_t txid, unsigned i)
{
	return y->ncells > 1 ? (unsigned)__builtin_ctzll(ycsb_wr_cells(y, txid, i)) : 0;
}

static uint64_t ycsb_load_count(const struct wl *wl)
{
	return ((const struct ycsb *)wl->priv)->records;
}

static void fill_value(const struct ycsb *y, uint8_t *buf, uint64_t key, uint64_t writer)
{
	struct ycsb_hdr h = { .key = key, .writer = writer };
	uint32_t cb = cell_bytes(y);

	for (unsigned c = 0; c < ncells_of(y); c++) {
		memcpy(buf + c * cb, &h, sizeof(h));
		memset(buf + c * cb + sizeof(h), (int)('a' + (key + writer) % 26), cb - sizeof(h));
	}
}

/* The cell's {key, writer}. */
static struct ycsb_hdr cell_hdr(const struct ycsb *y, const uint8_t *val, unsigned c)
{
	struct ycsb_hdr h;

	memcpy(&h, val + (size_t)c * cell_bytes(y), sizeof(h));
	return h;
}

static int ycsb_load(const struct wl *wl, struct remora_worker *w, uint64_t begin, uint64_t end)
{
	const struct ycsb *y = wl->priv;
	uint8_t *buf = malloc(y->value_size);
	int rc = 0;

	if (!buf)
		return -ENOMEM;
	for (uint64_t key = begin; key < end && !rc; key++) {
		fill_value(y, buf, key, 0);
		rc = remora_db_load(w, YCSB_TABLE, key, buf);
	}
	free(buf);
	return rc;
}

static int ycsb_coord_init(const struct wl *wl, struct wl_coord *c)
{
	const struct ycsb *y = wl->priv;
	unsigned slots = y->ops > y->max_scan ? y->ops : y->max_scan;
	struct ycsb_coord *yc = calloc(1, sizeof(*yc));

	if (!yc)
		return -ENOMEM;
	yc->buf = malloc((size_t)slots * y->value_size);
	yc->found = calloc(slots, sizeof(*yc->found));
	if (!yc->buf || !yc->found) {
		free(yc->buf);
		free(yc->found);
		free(yc);
		return -ENOMEM;
	}
	if (y->history) {
		int rc = hist_log_open(&yc->log, y->history, c->cn, c->thread, c->coro, false);

		if (rc) {
			free(yc->buf);
			free(yc->found);
			free(yc);
			return rc;
		}
		yc->logging = true;
	}
	c->priv = yc;
	return 0;
}

static void ycsb_coord_fini(const struct wl *wl, struct wl_coord *c)
{
	struct ycsb_coord *yc = c->priv;

	(void)wl;
	if (!yc)
		return;
	if (yc->logging && hist_log_close(&yc->log))
		c->acc[1]++; /* a history that could not be written fails the check */
	free(yc->buf);
	free(yc->found);
	free(yc);
}

/*
 * Insert keys are dealt round-robin: coordinator g inserts records + g, records + g + total,
 * ... so no two coordinators (in any compute node) pick the same key.
 */
static uint64_t insert_key(const struct wl *wl, const struct wl_coord *c, uint64_t nth)
{
	const struct ycsb *y = wl->priv;

	return y->records + nth * wl->total_coords + c->global_index;
}

/* The cluster's insert frontier as this coordinator can estimate it without talking. */
static uint64_t frontier(const struct wl *wl, const struct wl_coord *c)
{
	const struct ycsb_coord *yc = c->priv;
	const struct ycsb *y = wl->priv;

	return y->records + yc->inserted * wl->total_coords;
}

static uint64_t pick_key(const struct wl *wl, struct wl_coord *c)
{
	const struct ycsb *y = wl->priv;
	uint64_t rank = wl_keydist_next(&y->dist, &c->rng);

	if (!y->latest)
		return rank;
	return frontier(wl, c) - 1 - rank; /* rank < records <= frontier */
}

static void ycsb_gen(const struct wl *wl, struct wl_coord *c, struct wl_input *in)
{
	const struct ycsb *y = wl->priv;
	unsigned p = (unsigned)wl_rng_below(&c->rng, 100);

	memset(in, 0, sizeof(*in));
	while (in->type + 1 < Y__TYPES && p >= y->mix[in->type])
		in->type++;
	if (in->type == Y_INSERT) {
		uint64_t key = insert_key(wl, c, c->drawn);

		if (key < y->capacity) {
			in->key[0] = key;
			in->nkeys = 1;
			c->drawn++;
			return;
		}
		in->type = y->latest ? Y_READ : Y_SCAN; /* out of insert room: keep reading */
	}
	if (in->type == Y_SCAN) {
		in->key[0] = pick_key(wl, c);
		in->nkeys = 1 + (uint32_t)wl_rng_below(&c->rng, y->max_scan);
		return;
	}
	for (unsigned i = 0; i < y->ops; i++) {
		bool dup;

		do {
			in->key[i] = pick_key(wl, c);
			dup = false;
			for (unsigned j = 0; j < i; j++)
				dup |= in->key[j] == in->key[i];
		} while (dup);
	}
	in->nkeys = y->ops;
}

static unsigned ycsb_tx_flags(const struct wl *wl, const struct wl_input *in)
{
	(void)wl;
	return in->type == Y_READ || in->type == Y_SCAN ? REMORA_TX_READ_ONLY : 0;
}

static int ycsb_exec(const struct wl *wl, struct wl_coord *c, struct remora_tx *tx,
		     const struct wl_input *in, struct wl_result *res)
{
	const struct ycsb *y = wl->priv;
	struct ycsb_coord *yc = c->priv;
	bool scan = in->type == Y_SCAN;
	enum remora_access mode = in->type == Y_UPDATE || in->type == Y_RMW ? REMORA_RW : REMORA_RD;
	unsigned n = in->nkeys;
	int rc;

	if (in->type == Y_INSERT) {
		fill_value(y, yc->buf, in->key[0], wl_txid(c));
		return remora_tx_insert(tx, YCSB_TABLE, in->key[0], yc->buf);
	}
	if (scan && in->key[0] + n > y->capacity)
		n = (unsigned)(y->capacity - in->key[0]);
	for (unsigned i = 0; i < n; i++) {
		uint64_t key = scan ? in->key[0] + i : in->key[i];
		uint64_t one = ycsb_wr_cells(y, wl_txid(c), i);
		/* a history reads the one cell it records */
		uint64_t rd = mode == REMORA_RW ? 0 : y->history ? one : UINT64_MAX;

		rc = remora_tx_stage_cells(tx, YCSB_TABLE, key, rd, mode == REMORA_RW ? one : 0,
					   yc->buf + (size_t)i * y->value_size, &yc->found[i]);
		if (rc)
			return rc;
	}
	rc = remora_tx_fetch(tx);
	if (rc)
		return rc;
	for (unsigned i = 0; i < n; i++) {
		uint8_t *val = yc->buf + (size_t)i * y->value_size;
		uint64_t key = scan ? in->key[0] + i : in->key[i];
		unsigned c1 = ycsb_cell(y, wl_txid(c), i);

		if (!yc->found[i]) {
			res->not_found++; /* D/E read past the inserts that landed so far */
			continue;
		}
		for (unsigned k = 0; k < ncells_of(y); k++)
			if ((mode == REMORA_RW || y->history ? k == c1 : true) &&
			    cell_hdr(y, val, k).key != key)
				res->integrity_errors++;
		res->seen[i] = cell_hdr(y, val, c1).writer;
		if (mode == REMORA_RW) {
			fill_value(y, val, key, wl_txid(c));
			rc = remora_tx_write_cells(tx, YCSB_TABLE, key,
						   ycsb_wr_cells(y, wl_txid(c), i), val);
			if (rc)
				return rc;
		}
	}
	return 0;
}

/* The history record of a committed Read, Update or ReadModifyWrite: one cell per record. */
static void ycsb_record(const struct ycsb *y, struct hist_txn *t, const struct wl_input *in,
			const struct wl_result *res, uint64_t txid)
{
	bool wr = in->type == Y_UPDATE || in->type == Y_RMW;

	memset(t, 0, sizeof(*t));
	t->txid = txid;
	t->nops = in->nkeys;
	for (unsigned i = 0; i < in->nkeys; i++)
		t->op[i] = (struct hist_op){ .key = in->key[i] * ncells_of(y) + ycsb_cell(y, txid, i),
					     .seen = res->seen[i], .write = wr };
}

static void ycsb_commit(const struct wl *wl, struct wl_coord *c, const struct wl_input *in,
			const struct wl_result *res, uint64_t txid)
{
	struct ycsb_coord *yc = c->priv;
	struct hist_txn t;

	if (in->type == Y_INSERT)
		yc->inserted++;
	c->acc[0] += res->integrity_errors;
	if (!yc->logging)
		return;
	ycsb_record(wl->priv, &t, in, res, txid);
	if (hist_log_append(&yc->log, &t))
		c->acc[1]++;
}

/* --history's check: the writer of every cell in the store, then the history over cells. */
struct ycsb_scan {
	const struct ycsb *y;
	struct remora_worker *w;
	uint64_t *final; /* writer per history key */
	uint64_t locked_key;
	int rc;
};

#define SCAN_BATCH 16

static void scan_coro(void *arg)
{
	struct ycsb_scan *s = arg;
	const struct ycsb *y = s->y;
	uint8_t *vals = malloc((size_t)SCAN_BATCH * y->value_size);
	bool found[SCAN_BATCH];
	uint64_t keys[SCAN_BATCH];

	if (!vals) {
		s->rc = -ENOMEM;
		return;
	}
	for (uint64_t at = 0; at < y->records && !s->rc; at += SCAN_BATCH) {
		unsigned n = y->records - at < SCAN_BATCH ? (unsigned)(y->records - at) : SCAN_BATCH;

		for (unsigned i = 0; i < n; i++)
			keys[i] = at + i;
		s->rc = wl_probe_locks(s->w, YCSB_TABLE, keys, n, vals, y->value_size, found,
				       WL_VERIFY_TIMEOUT_MS);
		if (s->rc == -ETIMEDOUT)
			s->locked_key = at;
		for (unsigned i = 0; i < n && !s->rc; i++)
			for (unsigned c = 0; c < ncells_of(y); c++) {
				struct ycsb_hdr h = cell_hdr(y, vals + (size_t)i * y->value_size, c);

				s->final[(at + i) * ncells_of(y) + c] =
					found[i] && h.key == at + i ? h.writer : UINT64_MAX;
			}
	}
	free(vals);
}

static int check_history(const struct wl *wl, struct remora_worker *w, char *msg,
			 size_t msglen)
{
	const struct ycsb *y = wl->priv;
	uint64_t nkeys = y->records * ncells_of(y);
	struct ycsb_scan s = { .y = y, .w = w, .final = calloc(nkeys, sizeof(uint64_t)) };
	struct hist_set hs = { 0 };
	struct hist_report rep;
	int rc;

	if (!s.final)
		return -ENOMEM;
	rc = wl_read_back(w, scan_coro, &s, &s.rc, &s.locked_key, SCAN_BATCH, msg, msglen);
	if (!rc && !(rc = hist_set_load_dir(&hs, y->history, msg, msglen))) {
		rc = wl->si ? hist_check_si(&hs, s.final, nkeys, &rep) :
			      hist_check(&hs, s.final, nkeys, &rep);
		if (rc >= 0)
			snprintf(msg, msglen, "%" PRIu64 " transactions over cells, %" PRIu64
				 " writes, edges wr %" PRIu64 " ww %" PRIu64 " rw %" PRIu64 ": %s",
				 rep.txns, rep.writes, rep.edges_wr, rep.edges_ww, rep.edges_rw,
				 rep.msg);
	}
	hist_set_free(&hs);
	free(s.final);
	return rc;
}

static int ycsb_verify(const struct wl *wl, struct remora_worker *w, const int64_t *acc,
		       char *msg, size_t msglen)
{
	const struct ycsb *y = wl->priv;

	if (acc[0]) {
		snprintf(msg, msglen, "%" PRId64 " committed transactions read a misplaced value",
			 acc[0]);
		return 1;
	}
	if (hist_lost_msg(acc[1], msg, msglen))
		return 1;
	if (y->history)
		return check_history(wl, w, msg, msglen);
	snprintf(msg, msglen, "no committed transaction read a misplaced value");
	return 0;
}

const struct wl_desc wl_ycsb = {
	.name = "ycsb",
	.summary = "YCSB core workloads A-F as transactions (E: scans of consecutive keys)",
	.source = "YCSB (SoCC'10) core workloads; CREST (2025) multi-record variant",
	.knobs = ycsb_knobs,
	.ntypes = Y__TYPES,
	.type_names = { "Read", "Update", "Insert", "Scan", "ReadModifyWrite" },
	.acc_names = { "integrity_errors", "history_lost" },
	.init = ycsb_init,
	.fini = ycsb_fini,
	.prepare = ycsb_prepare,
	.tables = ycsb_tables,
	.cells = ycsb_cells,
	.load_count = ycsb_load_count,
	.load = ycsb_load,
	.coord_init = ycsb_coord_init,
	.coord_fini = ycsb_coord_fini,
	.gen = ycsb_gen,
	.tx_flags = ycsb_tx_flags,
	.exec = ycsb_exec,
	.commit = ycsb_commit,
	.verify = ycsb_verify,
};
