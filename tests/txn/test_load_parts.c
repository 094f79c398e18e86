/* SPDX-License-Identifier: MIT */
/*
 * The loader writes every part of a record and its side area, in the same batched WRITEs as
 * the record images: a test-only codec with two parts and a side area (as an MVCC or a cell
 * codec will have), loaded through the store's loader, then checked in the pool's memory.
 */
#include <errno.h>
#include <string.h>

#include "transport/tutil.h"

#include "store/store.h"
#include "txn/ttx.h"

TestSuite(txn_load_parts, .fini = ttx_fini, .timeout = TU_TIMEOUT);

#define TP_ID 14u        /* an id no built-in codec has */
#define TP_HDR 16u       /* per part: key ^ salt (8), table (4), flags (4), then the value */
#define TP_SALT UINT64_C(0x5a5a000000000000)
#define TP_VALUE 16u
#define TP_RECORDS 300u  /* more than one loader chunk (256): two flushes */

static uint32_t tp_part_len(uint32_t value_size)
{
	return TP_HDR + ((value_size + 7u) & ~7u);
}

static int tp_geom(const struct remora_table_def *t, struct codec_geom *g)
{
	memset(g, 0, sizeof(*g));
	g->value_size = t->value_size;
	g->nparts = 2;
	for (unsigned i = 0; i < 2; i++) {
		g->part_off[i] = i * tp_part_len(t->value_size);
		g->part_len[i] = tp_part_len(t->value_size);
	}
	g->stride = 2 * tp_part_len(t->value_size);
	g->lock_off = REMORA_CODEC_NO_OFF;
	g->version_off = REMORA_CODEC_NO_OFF;
	g->check_off = 0;
	g->check_len = 8;
	g->write_off = 0;
	g->side_bytes = 16; /* one word per part */
	return 0;
}

static void tp_encode(const struct codec_geom *g, void *img, unsigned part,
		      const struct codec_rec *r)
{
	unsigned char *b = (unsigned char *)img + g->part_off[part];
	uint64_t k = r->key ^ (part ? TP_SALT : 0);
	uint32_t tf[2] = { r->table, r->flags };

	memcpy(b, &k, 8);
	memcpy(b + 8, tf, 8);
	memcpy(b + TP_HDR, r->value, g->value_size);
}

static int tp_decode(const struct codec_geom *g, const void *img, unsigned part,
		     struct codec_rec *r)
{
	const unsigned char *b = (const unsigned char *)img + g->part_off[part];
	uint32_t tf[2];

	memset(r, 0, sizeof(*r));
	memcpy(&r->key, b, 8);
	r->key ^= part ? TP_SALT : 0;
	memcpy(tf, b + 8, 8);
	r->table = tf[0];
	r->flags = tf[1];
	r->value = b + TP_HDR;
	r->value_len = g->value_size;
	return 0;
}

static void tp_encode_side(const struct codec_geom *g, void *side, unsigned part,
			   const struct codec_rec *r)
{
	uint64_t w = r->key * 2 + part + 1;

	(void)g;
	memcpy((unsigned char *)side + 8 * part, &w, 8);
}

static const struct codec_ops tp_codec = {
	.size = sizeof(struct codec_ops), .id = TP_ID, .name = "twopart",
	.geom = tp_geom, .encode = tp_encode, .decode = tp_decode,
	.encode_side = tp_encode_side,
};

static struct tu_ctx C;

Test(txn_load_parts, every_part_and_the_side_area_in_the_chunk_writes)
{
	const struct remora_table_def def = { .name = "t", .id = 0, .value_size = TP_VALUE,
					      .max_records = 1024 };
	const struct remora_db_format_cfg cfg = { .size = sizeof(cfg), .n_mn = 1, .replicas = 1,
						  .tables = &def, .ntables = 1, .max_cn = 1,
						  .coords_per_cn = 1 };
	struct remora_counters before, after;
	struct store_loader *l;
	struct store_db st;
	const struct store_table *t;
	uint64_t loaded = 0, writes = 0, seen = 0;
	char err[256] = "";

	codec_test = &tp_codec;
	tu_open(&C, 0, 1, 4u << 20);
	cr_assert_eq(store_format(C.tp, &cfg, TP_ID, 0, err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(store_open(&st, C.tp, C.ch, 1, 0, TP_ID, err, sizeof(err)), 0, "%s",
		     err);
	t = store_table(&st, 0);
	cr_assert_not_null(t);
	cr_assert_eq(t->geom.side_bytes, 16);
	cr_assert_eq(store_loader_create(&st, C.ch, &loaded, NULL, NULL, &l), 0);
	remora_transport_counters(C.tp, &before);
	for (uint64_t k = 0; k < TP_RECORDS; k++) {
		unsigned char v[TP_VALUE];

		memset(v, (int)(k & 0xff), sizeof(v));
		cr_assert_eq(store_load(l, 0, k + 1, v), 0, "%s",
			     store_loader_errmsg(l));
	}
	cr_assert_eq(store_load_flush(l), 0, "%s", store_loader_errmsg(l));
	remora_transport_counters(C.tp, &after);
	store_loader_destroy(l);
	cr_assert_eq(loaded, TP_RECORDS);
	writes = remora_counters_total(&after, REMORA_OP_WRITE) -
		 remora_counters_total(&before, REMORA_OP_WRITE);
	/* Two chunks, each ONE WRITE of record images and ONE of side areas (one node). */
	cr_assert_eq(writes, 4, "%llu WRITEs", (unsigned long long)writes);

	for (uint64_t idx = 0; idx < def.max_records; idx++) {
		const unsigned char *img = C.mn[0].base + store_rec_off(t, idx);
		const unsigned char *side = C.mn[0].base + store_side_off(t, idx);
		struct codec_rec r0, r1;
		uint64_t s0, s1;

		tp_decode(&t->geom, img, 0, &r0);
		if (!(r0.flags & REMORA_REC_VALID))
			continue;
		tp_decode(&t->geom, img, 1, &r1);
		memcpy(&s0, side, 8);
		memcpy(&s1, side + 8, 8);
		cr_assert(r0.key >= 1 && r0.key <= TP_RECORDS, "slot %llu: key %llu",
			  (unsigned long long)idx, (unsigned long long)r0.key);
		cr_assert_eq(r1.key, r0.key, "slot %llu: part 1 holds key %llu, part 0 %llu",
			     (unsigned long long)idx, (unsigned long long)r1.key,
			     (unsigned long long)r0.key);
		cr_assert_eq(r1.flags, REMORA_REC_VALID);
		cr_assert_eq(((const unsigned char *)r1.value)[0], (r0.key - 1) & 0xff);
		cr_assert_eq(s0, r0.key * 2 + 1, "slot %llu: side part 0", (unsigned long long)idx);
		cr_assert_eq(s1, r0.key * 2 + 2, "slot %llu: side part 1", (unsigned long long)idx);
		seen++;
	}
	cr_assert_eq(seen, TP_RECORDS);
	tu_close(&C);
	codec_test = NULL;
}

/*
 * The no-wait variant of the batch loop: 40 WRITEs go out in doorbells of at most
 * REMORA_STORE_NOWAIT_BATCH (3 here), counted in the tracking waiter until they land.
 */
Test(txn_load_parts, nowait_posts_in_small_doorbells_and_tracks)
{
	struct remora_waiter track = { .pending = 0 };
	struct remora_counters before, after;
	struct store_db st = { .n_mn = 1 };
	struct remora_wr wrs[40];
	static uint64_t src[40];

	tu_open(&C, 0, 1, 1u << 20);
	st.rkey[0] = C.mn[0].key;
	for (unsigned i = 0; i < 40; i++) {
		src[i] = 1000 + i;
		wrs[i] = store_wr_write(&st, 0, 4096 + 8 * i, &src[i], 8, 0);
	}
	remora_chan_counters(C.ch, &before);
	cr_assert_eq(store_post_nowait(C.ch, wrs, 40, &track), 0);
	cr_assert_eq(track.pending, 40, "%u tracked", track.pending);
	while (track.pending)
		remora_chan_progress(C.ch);
	cr_assert_eq(track.status, 0);
	remora_chan_counters(C.ch, &after);
	cr_assert_eq(after.doorbells - before.doorbells, 3, "%llu doorbells",
		     (unsigned long long)(after.doorbells - before.doorbells));
	cr_assert_eq(remora_counters_total(&after, REMORA_OP_WRITE) -
			     remora_counters_total(&before, REMORA_OP_WRITE), 40);
	for (unsigned i = 0; i < 40; i++) {
		uint64_t v;

		memcpy(&v, C.mn[0].base + 4096 + 8 * i, 8);
		cr_assert_eq(v, 1000 + i);
	}
	tu_close(&C);
}
