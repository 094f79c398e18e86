/* SPDX-License-Identifier: MIT */
/*
 * CREST (docs/crest.md): the cell codec (header layout, cache-line versions, torn cells
 * refused), the exact verbs of each path (one masked-CAS locks k cells, RW fetch = masked-CAS
 * + READ in one doorbell, RO fetch = one READ, validation = one 64-byte READ per read-only
 * record, commit = log, then cells + epochs + unlock in one doorbell), unlock of our own bits
 * only, two compute nodes writing disjoint cells of one record, the snapshot check at fetch,
 * validation of epochs, the EN wraparound guard, the order data -> unlock, and recovery of a
 * re-insert whose cells landed without their epochs. Each check has
 * its mutation (runtime/mutate/mutate.h) as the negative control.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "recovery/recovery.h"
#include "store/codec.h"
#include "txn/proto/crest/crest.h"
#include "txn/txn.h"
#include "ttx.h"

TestSuite(txn_crest, .fini = ttx_fini, .timeout = TU_TIMEOUT);

static struct ttx T;

#define NCELL 4
#define VWORDS 20 /* 160 B: 4 cells of 40 B (YCSB's shape) */

static const struct remora_table_def tabs[] = {
	{ .name = "y", .id = 0, .value_size = VWORDS * 8, .max_records = 64 },
	{ .name = "wide", .id = 1, .value_size = 200, .max_records = 64 },
};
static const struct remora_cell_def cells[] = {
	{ .table = 0, .ncells = NCELL, .start = { 0, 40, 80, 120 } },
	{ .table = 1, .ncells = 2, .start = { 0, 16 } },
};

static void open_crest(const char *proto, const char *mutate, unsigned nmn, unsigned workers)
{
	struct ttx_opts o = { .protocol = proto, .nmn = nmn, .workers = workers, .tables = tabs,
			      .ntables = 2, .cells = cells, .ncells = 2, .max_cn = 4 };
	uint64_t v[VWORDS];

	if (mutate)
		setenv("REMORA_MUTATE", mutate, 1);
	ttx_open(&T, &o);
	unsetenv("REMORA_MUTATE");
	for (uint64_t k = 1; k <= 8; k++) {
		for (unsigned i = 0; i < VWORDS; i++)
			v[i] = k * 100 + i;
		cr_assert_eq(remora_db_load(T.w[0], 0, k, v), 0);
	}
	cr_assert_eq(remora_db_load_flush(T.w[0]), 0);
}

static uint64_t bit(unsigned c)
{
	return UINT64_C(1) << c;
}

static uint64_t mcas_of(const struct remora_counters *a, const struct remora_counters *b)
{
	return ttx_verbs(a, b, REMORA_OP_MCAS);
}

/* ---- codec ------------------------------------------------------------------------------- */

Test(txn_crest, codec_layout)
{
	struct remora_table_def t = tabs[1];
	struct codec_geom g;
	uint64_t w;

	cr_assert_eq(sizeof(struct codec_cell_hdr), 64);
	cr_assert_eq(offsetof(struct codec_cell_hdr, lock), CODEC_CELL_LOCK_OFF);
	cr_assert_eq(offsetof(struct codec_cell_hdr, en), CODEC_CELL_EN_OFF);
	cr_assert_eq(codec_cells_pack(&cells[0], 160, &w), 0);
	cr_assert_eq(codec_cell.geom_cells(&tabs[0], w, &g), 0);
	cr_assert_eq(g.nparts, 4);
	cr_assert_eq(g.stride, 64 + 4 * 64, "a 40 B cell is one line");
	cr_assert_eq(g.check_len, 64, "validation READs the header line");
	cr_assert_eq(codec_cells_pack(&cells[1], 200, &w), 0);
	cr_assert_eq(codec_cell.geom_cells(&t, w, &g), 0);
	cr_assert_eq(g.part_len[0], 64);
	cr_assert_eq(g.part_len[1], 4 * 64, "184 B: 48 + 3 x 56 over four versioned lines");
	for (unsigned c = 0; c < g.nparts; c++)
		cr_assert_eq(g.part_off[c] % 64, 0, "cells start on lines");
	{
		struct remora_cell_def bad = { .table = 0, .ncells = 2, .start = { 0, 12 } };

		cr_assert_eq(codec_cells_pack(&bad, 160, &w), -REMORA_ECONFIG);
	}
}

/* A READ that mixes two writes of a cell, at any 8-byte cut, is refused (-EAGAIN). */
Test(txn_crest, codec_torn_cell_refused)
{
	struct remora_table_def t = tabs[1];
	unsigned char va[200], vb[200], a[512], b[512], mix[512], out[200];
	struct codec_rec ra = { .key = 9, .table = 1, .flags = REMORA_REC_VALID }, rb, r;
	struct codec_geom g;
	uint64_t w;

	cr_assert_eq(codec_cells_pack(&cells[1], 200, &w), 0);
	cr_assert_eq(codec_cell.geom_cells(&t, w, &g), 0);
	cr_assert_leq(g.stride, sizeof(a));
	memset(va, 0xaa, sizeof(va));
	memset(vb, 0xbb, sizeof(vb));
	memset(a, 0, sizeof(a));
	rb = ra;
	ra.value = va;
	ra.version = codec_cell_version(1, 10);
	ra.aux = 1;
	rb.value = vb;
	rb.version = codec_cell_version(2, 20);
	rb.aux = 2;
	for (unsigned c = 0; c < g.nparts; c++)
		codec_cell.encode(&g, a, c, &ra);
	memcpy(b, a, g.stride);
	for (unsigned c = 0; c < g.nparts; c++)
		codec_cell.encode(&g, b, c, &rb);
	cr_assert_eq(codec_cell.decode(&g, a, 1, &r), 0);
	cr_assert_eq(r.version, ra.version);
	cr_assert_eq(r.aux, 1);
	codec_cell_get(&g, b, 1, out);
	cr_assert_eq(memcmp(out + 16, vb + 16, 184), 0);
	for (uint32_t cut = g.part_off[1] + 8; cut < g.part_off[1] + g.part_len[1]; cut += 8) {
		memcpy(mix, a, cut);
		memcpy(mix + cut, b + cut, g.stride - cut);
		if (memcmp(mix, a, g.stride) && memcmp(mix, b, g.stride)) /* torn, not padding */
			cr_assert_eq(codec_cell.decode(&g, mix, 1, &r), -EAGAIN, "tear at %u", cut);
		memcpy(mix, b, cut);
		memcpy(mix + cut, a + cut, g.stride - cut);
		if (memcmp(mix, a, g.stride) && memcmp(mix, b, g.stride))
			cr_assert_eq(codec_cell.decode(&g, mix, 1, &r), -EAGAIN, "tear at %u", cut);
	}
}

/* ---- helpers over the database ------------------------------------------------------------ */

static uint64_t seen_off;

static void grab_off(struct remora_tx *tx, const char *point)
{
	if (!strcmp(point, "txn.locked") && tx->nobj)
		seen_off = tx->objs[tx->nobj - 1]->off;
}

/* The offset of key's record (the same on every replica). */
static uint64_t rec_off(uint64_t key)
{
	struct remora_tx *tx;
	uint64_t v[VWORDS];

	txn_test_hook = grab_off;
	cr_assert_eq(remora_tx_begin(T.w[0], 0, &tx), 0);
	cr_assert_eq(remora_tx_read(tx, 0, key, v), 0);
	cr_assert_eq(remora_tx_commit(tx), 0);
	txn_test_hook = NULL;
	return seen_off;
}

static struct codec_cell_hdr *hdr_at(unsigned node, uint64_t off)
{
	return (struct codec_cell_hdr *)(T.tu.mn[node].base + off);
}

/*
 * Compute nodes other than T's, each a database handle with one worker: the workers of one
 * node share its record cache, so holders of a record on the memory node are nodes.
 */
static struct remora_db *cn_db[3];
static struct remora_worker *cn_w[3];

static struct remora_worker *other_cn(unsigned id)
{
	cn_w[id - 1] = ttx_open_cn(&T, T.db->proto->name, (uint16_t)id, &cn_db[id - 1]);
	return cn_w[id - 1];
}

static void close_other_cns(void)
{
	for (unsigned i = 0; i < 3; i++) {
		if (cn_w[i])
			remora_worker_destroy(cn_w[i]);
		if (cn_db[i])
			remora_db_close(cn_db[i]);
		cn_w[i] = NULL;
		cn_db[i] = NULL;
	}
}

/* Adds d to word 0 of cell c of key (a read-modify-write of that cell only). */
static int add_cell_on(struct remora_worker *w, uint64_t key, unsigned c, uint64_t d)
{
	struct remora_tx *tx;
	uint64_t v[VWORDS];
	int rc;

	cr_assert_eq(remora_tx_begin(w, 0, &tx), 0);
	rc = remora_tx_read_cells(tx, 0, key, 0, bit(c), v);
	if (rc) {
		remora_tx_abort(tx);
		return rc;
	}
	v[c * 5] += d;
	cr_assert_eq(remora_tx_write_cells(tx, 0, key, bit(c), v), 0);
	return remora_tx_commit(tx);
}

static int add_cell(unsigned w, uint64_t key, unsigned c, uint64_t d)
{
	return add_cell_on(T.w[w], key, c, d);
}

static uint64_t get_word(uint64_t key, unsigned word)
{
	struct remora_tx *tx;
	uint64_t v[VWORDS];

	cr_assert_eq(remora_tx_begin(T.w[0], 0, &tx), 0);
	cr_assert_eq(remora_tx_read(tx, 0, key, v), 0);
	cr_assert_eq(remora_tx_commit(tx), 0);
	return v[word];
}

/* ---- verbs ------------------------------------------------------------------------------- */

/* Locking k cells of one record: exactly one masked-CAS and one READ, one doorbell. */
Test(txn_crest, rw_fetch_one_mcas)
{
	open_crest("crest", NULL, 1, 1);
	for (unsigned k = 1; k <= NCELL; k++) {
		struct remora_counters c0, c1;
		struct remora_tx *tx;
		uint64_t v[VWORDS];
		struct ttx_vc vc;

		cr_assert_eq(remora_tx_begin(T.w[0], 0, &tx), 0);
		c0 = ttx_counters(&T, 0);
		cr_assert_eq(remora_tx_read_cells(tx, 0, 1, 0, (UINT64_C(1) << k) - 1, v), 0);
		c1 = ttx_counters(&T, 0);
		vc = ttx_vc(&c0, &c1);
		cr_assert_eq(mcas_of(&c0, &c1), 1, "k=%u cells: one masked-CAS", k);
		TTX_VC_EQ(vc, 1, 0, 0, 0, 1);
		cr_assert_eq(v[0], 100);
		remora_tx_abort(tx);
	}
}

/* Read-only record: one READ; its validation: one READ of 64 B. */
Test(txn_crest, ro_fetch_and_validation)
{
	struct remora_counters c0, c1, c2;
	struct remora_tx *tx;
	uint64_t v[VWORDS], u[VWORDS];
	struct ttx_vc vc;

	open_crest("crest", NULL, 1, 1);
	cr_assert_eq(remora_tx_begin(T.w[0], 0, &tx), 0);
	c0 = ttx_counters(&T, 0);
	cr_assert_eq(remora_tx_read_cells(tx, 0, 2, bit(0) | bit(3), 0, v), 0);
	cr_assert_eq(remora_tx_read_cells(tx, 0, 3, bit(1), 0, u), 0);
	c1 = ttx_counters(&T, 0);
	vc = ttx_vc(&c0, &c1);
	TTX_VC_EQ(vc, 2, 0, 0, 0, 2);
	cr_assert_eq(mcas_of(&c0, &c1), 0);
	cr_assert_eq(v[15], 215);
	cr_assert_eq(u[5], 305);
	cr_assert_eq(remora_tx_commit(tx), 0);
	c2 = ttx_counters(&T, 0);
	vc = ttx_vc(&c1, &c2);
	TTX_VC_EQ(vc, 2, 0, 0, 0, 1);
	cr_assert_eq(vc.read_bytes, 2 * 64, "one header line per read-only record");
	cr_assert_eq(mcas_of(&c1, &c2), 0);
}

/*
 * A read-write transaction on three memory nodes (3 replicas): fetch 1 masked-CAS + 1 READ;
 * commit: 3 log WRITEs (f+1 = 3, one doorbell), then per replica the cell and its epoch
 * (6 WRITEs) and the unlock masked-CAS on the primary, in a second doorbell.
 */
Test(txn_crest, rw_commit_verbs)
{
	struct remora_counters c0, c1, c2;
	struct remora_tx *tx;
	uint64_t v[VWORDS];
	struct ttx_vc vc;

	open_crest("crest", NULL, 3, 1);
	cr_assert_eq(remora_tx_begin(T.w[0], 0, &tx), 0);
	c0 = ttx_counters(&T, 0);
	cr_assert_eq(remora_tx_read_cells(tx, 0, 4, 0, bit(2), v), 0);
	c1 = ttx_counters(&T, 0);
	v[10] = 7;
	cr_assert_eq(remora_tx_write_cells(tx, 0, 4, bit(2), v), 0);
	cr_assert_eq(remora_tx_commit(tx), 0);
	c2 = ttx_counters(&T, 0);
	vc = ttx_vc(&c0, &c1);
	TTX_VC_EQ(vc, 1, 0, 0, 0, 1);
	cr_assert_eq(mcas_of(&c0, &c1), 1);
	vc = ttx_vc(&c1, &c2);
	cr_assert_eq(vc.read, 0, "nothing read-only: no validation");
	cr_assert_eq(vc.write, 3 + 3 * 2);
	cr_assert_eq(mcas_of(&c1, &c2), 1, "one unlock");
	cr_assert_eq(vc.doorbells, 2, "the log round, then the data round: %llu",
		     (unsigned long long)vc.doorbells);
	cr_assert_eq(get_word(4, 10), 7);
	cr_assert_eq(get_word(4, 9), 409, "the other cells kept");
	cr_assert_eq(hdr_at(0, rec_off(4))->lock | hdr_at(1, rec_off(4))->lock |
			     hdr_at(2, rec_off(4))->lock, 0);
}

/* ---- locks ------------------------------------------------------------------------------- */

/*
 * Two holders (compute nodes) of disjoint bits of one record: the first commits, its unlock
 * clears only its own bit, so a third node's writer of the second holder's cell still fails.
 * crest_unlock_all clears the whole word: the third writer gets a cell the second still holds.
 */
static int disjoint_holders(const char *mutate)
{
	struct remora_tx *a, *b;
	uint64_t va[VWORDS], vb[VWORDS];
	uint64_t off;
	int third;

	open_crest("crest", mutate, 1, 1);
	off = rec_off(5);
	cr_assert_eq(remora_tx_begin(T.w[0], 0, &a), 0);
	cr_assert_eq(remora_tx_begin(other_cn(1), 0, &b), 0);
	cr_assert_eq(remora_tx_read_cells(a, 0, 5, 0, bit(0), va), 0);
	cr_assert_eq(remora_tx_read_cells(b, 0, 5, 0, bit(1), vb), 0);
	cr_assert_eq(hdr_at(0, off)->lock, bit(0) | bit(1));
	va[0]++;
	cr_assert_eq(remora_tx_write_cells(a, 0, 5, bit(0), va), 0);
	cr_assert_eq(remora_tx_commit(a), 0);
	third = add_cell_on(other_cn(2), 5, 1, 1);
	vb[5]++;
	cr_assert_eq(remora_tx_write_cells(b, 0, 5, bit(1), vb), 0);
	cr_assert_eq(remora_tx_commit(b), 0);
	return third;
}

Test(txn_crest, unlock_clears_own_bits)
{
	cr_assert_eq(disjoint_holders(NULL), -REMORA_EABORT);
	cr_assert_eq(remora_worker_last_abort(cn_w[1]), REMORA_ABORT_LOCKED);
	close_other_cns();
	cr_assert_eq(hdr_at(0, rec_off(5))->lock, 0);
}

Test(txn_crest, unlock_clears_own_bits_unlock_all_mutated)
{
	cr_assert_eq(disjoint_holders("crest_unlock_all"), 0, "the third writer got a held cell");
	close_other_cns();
}

/*
 * Two compute nodes (two database handles) write disjoint cells of one record at the same
 * time: at cell level neither aborts; crest_record (the record-level baseline) aborts one.
 */
static int two_cns_disjoint(const char *proto)
{
	struct remora_tx *a, *b;
	struct remora_worker *w;
	uint64_t va[VWORDS], vb[VWORDS];
	int rb, rc;

	open_crest(proto, NULL, 1, 1);
	w = other_cn(1);
	cr_assert_eq(remora_tx_begin(T.w[0], 0, &a), 0);
	cr_assert_eq(remora_tx_begin(w, 0, &b), 0);
	cr_assert_eq(remora_tx_read_cells(a, 0, 6, 0, bit(0), va), 0);
	rb = remora_tx_read_cells(b, 0, 6, 0, bit(3), vb);
	va[0] = 1;
	vb[15] = 2;
	cr_assert_eq(remora_tx_write_cells(a, 0, 6, bit(0), va), 0);
	if (!rb)
		cr_assert_eq(remora_tx_write_cells(b, 0, 6, bit(3), vb), 0);
	cr_assert_eq(remora_tx_commit(a), 0);
	rc = rb ? rb : remora_tx_commit(b);
	if (rb)
		remora_tx_abort(b);
	close_other_cns();
	if (!rc) {
		cr_assert_eq(get_word(6, 0), 1);
		cr_assert_eq(get_word(6, 15), 2);
	}
	return rc;
}

Test(txn_crest, two_cns_disjoint_cells_no_abort)
{
	cr_assert_eq(two_cns_disjoint("crest"), 0);
}

Test(txn_crest, two_cns_disjoint_cells_record_level_aborts)
{
	cr_assert_eq(two_cns_disjoint("crest_record"), -REMORA_EABORT);
}

/* ---- snapshot check at fetch --------------------------------------------------------------- */

/* Injected torn state: the header's epoch of a cell differs from the cell's EN. */
static int read_injected(const char *mutate, bool lock_it)
{
	struct codec_cell_hdr *h;
	struct remora_tx *tx;
	uint64_t v[VWORDS];
	int rc;

	open_crest("crest", mutate, 1, 1);
	h = hdr_at(0, rec_off(7));
	if (lock_it)
		h->lock |= bit(2);
	else
		h->en[2] = 5;
	cr_assert_eq(remora_tx_begin(T.w[0], 0, &tx), 0);
	rc = remora_tx_read_cells(tx, 0, 7, bit(2), 0, v); /* the fetch decides */
	remora_tx_abort(tx);
	if (lock_it)
		h->lock &= ~bit(2);
	return rc;
}

Test(txn_crest, fetch_rejects_en_mismatch)
{
	cr_assert_eq(read_injected(NULL, false), -REMORA_EABORT);
	cr_assert_eq(remora_worker_last_abort(T.w[0]), REMORA_ABORT_VALIDATION);
}

Test(txn_crest, fetch_rejects_locked_read_cell)
{
	cr_assert_eq(read_injected(NULL, true), -REMORA_EABORT);
	cr_assert_eq(remora_worker_last_abort(T.w[0]), REMORA_ABORT_LOCKED);
}

Test(txn_crest, fetch_snapshot_skipped_mutated)
{
	cr_assert_eq(read_injected("crest_skip_snapshot", true), 0);
}

/* Reading other cells of a record whose cell 2 is locked is fine (that is the point). */
Test(txn_crest, fetch_other_cells_of_locked_record)
{
	struct codec_cell_hdr *h;
	struct remora_tx *tx;
	uint64_t v[VWORDS];

	open_crest("crest", NULL, 1, 1);
	h = hdr_at(0, rec_off(7));
	h->lock |= bit(2);
	cr_assert_eq(remora_tx_begin(T.w[0], 0, &tx), 0);
	cr_assert_eq(remora_tx_read_cells(tx, 0, 7, bit(0) | bit(1) | bit(3), 0, v), 0);
	cr_assert_eq(remora_tx_commit(tx), 0);
	h->lock &= ~bit(2);
}

/* ---- validation ---------------------------------------------------------------------------- */

/*
 * T reads cell 1 of key 2 (read-only) and writes key 3; another transaction commits cell 1 of
 * key 2 in between: T must abort. crest_lock_bits_only validates lock bits only (the lock is
 * gone by then) and commits on a stale read.
 */
static int stale_read(const char *mutate)
{
	struct remora_tx *tx;
	uint64_t v[VWORDS], u[VWORDS];

	open_crest("crest", mutate, 1, 2);
	crest_en_wrap_us = UINT64_MAX; /* the epoch check alone, however slow the machine */
	cr_assert_eq(remora_tx_begin(T.w[0], 0, &tx), 0);
	cr_assert_eq(remora_tx_read_cells(tx, 0, 2, bit(1), 0, v), 0);
	cr_assert_eq(remora_tx_read_cells(tx, 0, 3, 0, bit(0), u), 0);
	cr_assert_eq(add_cell(1, 2, 1, 1), 0);
	u[0] = v[5];
	cr_assert_eq(remora_tx_write_cells(tx, 0, 3, bit(0), u), 0);
	return remora_tx_commit(tx);
}

Test(txn_crest, validation_catches_remote_commit)
{
	cr_assert_eq(stale_read(NULL), -REMORA_EABORT);
	cr_assert_eq(remora_worker_last_abort(T.w[0]), REMORA_ABORT_VALIDATION);
}

Test(txn_crest, validation_lock_bits_only_mutated)
{
	cr_assert_eq(stale_read("crest_lock_bits_only"), 0);
}

/* A commit to another cell of the record does not fail the validation of cell 1. */
Test(txn_crest, validation_other_cell_commit_passes)
{
	struct remora_tx *tx;
	uint64_t v[VWORDS], u[VWORDS];

	open_crest("crest", NULL, 1, 2);
	cr_assert_eq(remora_tx_begin(T.w[0], 0, &tx), 0);
	cr_assert_eq(remora_tx_read_cells(tx, 0, 2, bit(1), 0, v), 0);
	cr_assert_eq(remora_tx_read_cells(tx, 0, 3, 0, bit(0), u), 0);
	cr_assert_eq(add_cell(1, 2, 2, 1), 0);
	cr_assert_eq(remora_tx_write_cells(tx, 0, 3, bit(0), u), 0);
	cr_assert_eq(remora_tx_commit(tx), 0);
}

/*
 * The EN wraparound guard: with the clock moved past 65,536 us since the first READ,
 * validation READs whole records and compares version words. A cell whose epoch wrapped
 * around to the same value but whose TS moved is caught then; the epoch-only check (no clock
 * skew) cannot tell.
 */
static int wrapped(uint64_t skew, uint64_t *read_bytes)
{
	struct remora_counters c0, c1;
	struct remora_tx *tx;
	uint64_t v[VWORDS], u[VWORDS], off;
	unsigned char *cell;
	uint64_t ver;
	int rc;

	open_crest("crest", NULL, 1, 1);
	crest_en_wrap_us = skew ? CREST_EN_WRAP_US : UINT64_MAX;
	off = rec_off(2);
	cr_assert_eq(remora_tx_begin(T.w[0], 0, &tx), 0);
	cr_assert_eq(remora_tx_read_cells(tx, 0, 2, bit(1), 0, v), 0);
	cr_assert_eq(remora_tx_read_cells(tx, 0, 3, 0, bit(0), u), 0);
	/* 65,536 commits of cell 1 later: the same epoch, a newer timestamp, new bytes */
	cell = T.tu.mn[0].base + off + T.db->st.tab[0].geom.part_off[1];
	memcpy(&ver, cell, 8);
	v[5] = 999;
	codec_cell_put(&T.db->st.tab[0].geom, T.tu.mn[0].base + off, 1, v,
		       codec_cell_version(codec_cell_en(ver), (ver & CODEC_CELL_TS_MASK) + 77));
	crest_clock_skew_us += skew;
	c0 = ttx_counters(&T, 0);
	cr_assert_eq(remora_tx_write_cells(tx, 0, 3, bit(0), u), 0);
	rc = remora_tx_commit(tx);
	c1 = ttx_counters(&T, 0);
	crest_clock_skew_us = 0;
	*read_bytes = ttx_vc(&c0, &c1).read_bytes;
	return rc;
}

Test(txn_crest, en_wrap_guard_compares_versions)
{
	uint64_t bytes;

	cr_assert_eq(wrapped(CREST_EN_WRAP_US + 1000, &bytes), -REMORA_EABORT);
	cr_assert_eq(bytes, T.db->st.tab[0].geom.stride, "the whole record is read");
}

Test(txn_crest, en_wrap_without_guard_is_blind)
{
	uint64_t bytes;

	cr_assert_eq(wrapped(0, &bytes), 0, "epochs alone cannot see a wrapped epoch");
	cr_assert_eq(bytes, 64);
}

/* ---- commit order -------------------------------------------------------------------------- */

/*
 * Two increments of one cell, the second run inside the first's commit right after its
 * unlock point: in order (data, epochs, then unlock) the second sees the first's value, so
 * the cell ends at +2. crest_unlock_first unlocks before the data WRITE: the second reads the
 * old value and the first's data WRITE then overwrites its increment (+1: a lost update).
 */
static int inner_rc = 1;

static void inc_at_unlock(struct remora_tx *tx, const char *point)
{
	(void)tx;
	if (strcmp(point, "txn.unlock") || inner_rc != 1)
		return;
	inner_rc = 2;
	inner_rc = add_cell_on(cn_w[0], 8, 0, 1);
}

/* The second increment runs on another compute node (the first's node would keep it off the
 * record with its local lock, whatever the memory node's lock says). */
static uint64_t two_increments(const char *mutate)
{
	open_crest("crest", mutate, 1, 1);
	other_cn(1);
	inner_rc = 1;
	txn_test_hook = inc_at_unlock;
	cr_assert_eq(add_cell(0, 8, 0, 1), 0);
	txn_test_hook = NULL;
	close_other_cns();
	cr_assert_eq(inner_rc, 0, "the inner increment committed");
	return get_word(8, 0) - 800;
}

Test(txn_crest, unlock_after_data)
{
	cr_assert_eq(two_increments(NULL), 2);
}

Test(txn_crest, unlock_first_mutated_loses_update)
{
	cr_assert_eq(two_increments("crest_unlock_first"), 1);
}

/* ---- whole-value calls and record-level tables ---------------------------------------------- */

Test(txn_crest, whole_value_calls)
{
	struct remora_tx *tx;
	uint64_t v[VWORDS];

	open_crest("crest", NULL, 1, 1);
	cr_assert_eq(remora_tx_begin(T.w[0], 0, &tx), 0);
	cr_assert_eq(remora_tx_read_for_update(tx, 0, 1, v), 0);
	for (unsigned i = 0; i < VWORDS; i++)
		v[i] += 1000;
	cr_assert_eq(remora_tx_write(tx, 0, 1, v), 0);
	cr_assert_eq(remora_tx_commit(tx), 0);
	cr_assert_eq(get_word(1, 19), 1119);
	/* a cell not fetched for writing cannot be written */
	cr_assert_eq(remora_tx_begin(T.w[0], 0, &tx), 0);
	cr_assert_eq(remora_tx_read_cells(tx, 0, 1, 0, bit(0), v), 0);
	cr_assert_eq(remora_tx_write_cells(tx, 0, 1, bit(1), v), -EINVAL);
	remora_tx_abort(tx);
	/* insert and delete */
	cr_assert_eq(remora_tx_begin(T.w[0], 0, &tx), 0);
	cr_assert_eq(remora_tx_insert(tx, 0, 50, v), 0);
	cr_assert_eq(remora_tx_delete(tx, 0, 2), 0);
	cr_assert_eq(remora_tx_commit(tx), 0);
	cr_assert_eq(remora_tx_begin(T.w[0], 0, &tx), 0);
	cr_assert_eq(remora_tx_read(tx, 0, 50, v), 0);
	cr_assert_eq(remora_tx_read(tx, 0, 2, v), -REMORA_ENOTFOUND);
	cr_assert_eq(remora_tx_commit(tx), 0);
	/* an insert into a table other than 0 (the cells' checksums cover the table id) */
	{
		unsigned char w[200], back[200];

		memset(w, 0x5a, sizeof(w));
		cr_assert_eq(remora_tx_begin(T.w[0], 0, &tx), 0);
		cr_assert_eq(remora_tx_insert(tx, 1, 9, w), 0);
		cr_assert_eq(remora_tx_commit(tx), 0);
		cr_assert_eq(remora_tx_begin(T.w[0], 0, &tx), 0);
		cr_assert_eq(remora_tx_read(tx, 1, 9, back), 0);
		cr_assert_eq(remora_tx_commit(tx), 0);
		cr_assert_eq(memcmp(w, back, sizeof(w)), 0);
	}
}

/* ---- recovery ------------------------------------------------------------------------------ */

/*
 * A re-insert over a deleted record whose cell WRITEs landed and whose epoch WRITEs did not (a
 * compute node killed at txn.commit_mid, or power lost in between): recovery must recognize
 * the landed cells by the logged version and write their epochs, or every read of the record
 * fails its snapshot check forever (a torn cell) and aborts. crest_log_fetched_epoch logs the
 * fetched epoch + 1: an insert over a deleted record never recorded one, so recovery takes the
 * landed cells for a later commit's and leaves the epochs behind (the crash suite's insdel
 * check timed out on such a record). Returns the read's outcome after recovery.
 */
static int reinsert_lost_epochs(const char *mutate, uint64_t *forward)
{
	struct recovery_cfg cfg = { .size = sizeof(cfg), .n_mn = 1 };
	struct recovery_report rep;
	struct codec_cell_hdr *h;
	struct remora_tx *tx;
	uint64_t v[VWORDS], off;
	char err[256] = "";
	int rc;

	open_crest("crest", mutate, 1, 1);
	off = rec_off(3);
	cr_assert_eq(remora_tx_begin(T.w[0], 0, &tx), 0);
	cr_assert_eq(remora_tx_delete(tx, 0, 3), 0);
	cr_assert_eq(remora_tx_commit(tx), 0);
	for (unsigned i = 0; i < VWORDS; i++)
		v[i] = 7000 + i;
	cr_assert_eq(remora_tx_begin(T.w[0], 0, &tx), 0);
	cr_assert_eq(remora_tx_insert(tx, 0, 3, v), 0);
	cr_assert_eq(remora_tx_commit(tx), 0);
	h = hdr_at(0, off);
	cr_assert_eq(h->key, 3, "the insert did not reuse the deleted record");
	for (unsigned c = 0; c < NCELL; c++)
		h->en[c]--; /* the epoch WRITEs did not land */
	cr_assert_eq(recovery_run(T.tu.tp, &cfg, &rep, err, sizeof(err)), 0, "%s", err);
	*forward = rep.forward;
	memset(v, 0, sizeof(v));
	cr_assert_eq(remora_tx_begin(T.w[0], 0, &tx), 0);
	rc = remora_tx_read(tx, 0, 3, v);
	if (rc == 0)
		rc = remora_tx_commit(tx);
	else
		remora_tx_abort(tx);
	cr_assert(rc || v[VWORDS - 1] == 7000 + VWORDS - 1, "the re-inserted value is lost");
	return rc;
}

Test(txn_crest, reinsert_lost_epochs_recovered)
{
	uint64_t forward;

	cr_assert_eq(reinsert_lost_epochs(NULL, &forward), 0);
	cr_assert_eq(forward, 1, "recovery did not roll the re-insert forward");
}

Test(txn_crest, reinsert_lost_epochs_mutated_stays_torn)
{
	uint64_t forward;

	cr_assert_eq(reinsert_lost_epochs("crest_log_fetched_epoch", &forward), -REMORA_EABORT);
	cr_assert_eq(forward, 0);
}

/* ---- releasing ------------------------------------------------------------------------------ */

/*
 * An abort holding more locked records than one chunk of unlocks (release_at posts them from
 * the stack, CREST_UNLOCK_CHUNK at a time, so no allocation can leave one behind): every lock
 * goes back, and another worker locks and commits the same records.
 */
Test(txn_crest, abort_releases_every_lock)
{
	struct remora_tx *tx;
	uint64_t v[VWORDS] = { 0 };

	open_crest("crest", NULL, 1, 2);
	for (unsigned w = 0; w < 2; w++) {
		cr_assert_eq(remora_tx_begin(T.w[w], 0, &tx), 0);
		for (uint64_t k = 1; k <= 8; k++)
			cr_assert_eq(remora_tx_read_for_update(tx, 0, k, v), 0, "w%u key %llu", w,
				     (unsigned long long)k);
		for (uint64_t k = 20; k < 32; k++)
			cr_assert_eq(remora_tx_insert(tx, 0, k, v), 0, "w%u key %llu", w,
				     (unsigned long long)k);
		cr_assert_gt(tx->nobj, 16, "fewer locked records than one chunk of unlocks");
		if (w == 0)
			remora_tx_abort(tx);
		else
			cr_assert_eq(remora_tx_commit(tx), 0);
	}
	for (uint64_t k = 1; k <= 8; k++)
		cr_assert_eq(hdr_at(0, rec_off(k))->lock, 0);
}
