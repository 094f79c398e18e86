/* SPDX-License-Identifier: MIT */
/*
 * The declock protocol's lock table lives past the store layout on memory node 0 (its
 * tail_bytes). A pool that is kept and formatted again must start with every lock free:
 * stale lock words would make the first waiters time out and reset. Negative control:
 * format_keeps_tail (format leaves the tail as it was). The speculative READ: exact verbs and
 * doorbells of an update with the READ riding on the lock's FAA, and without (dl_no_ride).
 */
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include <remora/tx.h>

#include "store/codec.h"
#include "store/store.h"
#include "ttx.h"
#include "tutil.h"

TestSuite(txn_declock, .fini = tu_fini);

static const struct remora_table_def tables[] = {
    {.name = "t", .id = 0, .value_size = 8, .max_records = 256},
};

static void format_declock(struct tu_ctx *tu)
{
	struct remora_db_format_cfg f = {
	    .size = sizeof(f),
	    .n_mn = 1,
	    .replicas = 1,
	    .protocol = "declock",
	    .tables = tables,
	    .ntables = 1,
	    .max_cn = 2,
	    .coords_per_cn = 1,
	    .log_slot_bytes = 8192,
	};
	int rc = remora_db_format_ex(tu->tp, &f);

	cr_assert_eq(rc, 0, "format: %s (%s)", remora_strerror(rc), remora_db_errmsg(NULL));
}

static uint64_t lock_table_off(struct tu_ctx *tu)
{
	struct store_db st;
	char err[160];
	int rc = store_open(&st, tu->tp, tu->ch, 1, 1, REMORA_CODEC_NONE, err, sizeof(err));

	cr_assert_eq(rc, 0, "open: %s", err);
	return store_tail_off(&st.sb);
}

/* Formats, dirties 64 KiB of the lock table as a crashed run would, formats again. */
static bool reformat_leaves_dirt(void)
{
	const uint64_t dirt = 64u << 10;
	struct tu_ctx tu;
	uint64_t off;
	bool dirty = false;

	tu_open(&tu, 0, 1, 8u << 20);
	format_declock(&tu);
	off = lock_table_off(&tu);
	cr_assert_leq(off + dirt, tu.mn[0].bytes, "the lock table lies past the pool");
	memset(tu.mn[0].base + off, 0xa5, dirt);
	format_declock(&tu);
	for (uint64_t i = 0; i < dirt && !dirty; i++)
		dirty = tu.mn[0].base[off + i] != 0;
	tu_close(&tu);
	return dirty;
}

Test(txn_declock, format_frees_a_kept_lock_table)
{
	cr_assert(!reformat_leaves_dirt(), "a re-formatted pool kept stale lock words");
}

Test(txn_declock, format_keeps_tail_is_caught)
{
	setenv("REMORA_MUTATE", "format_keeps_tail", 1);
	cr_assert(reformat_leaves_dirt(), "the control left no dirt: the check cannot fail");
	unsetenv("REMORA_MUTATE");
}

/*
 * An update of a key whose address is cached, on one memory node (the lock table's): the fetch
 * is the lock's FAA with the record's READ riding in the same doorbell, 1 doorbell; with
 * dl_no_ride the READ follows the grant, 2. The value read is the one committed before.
 */
static struct ttx_vc update_fetch_verbs(const char *mutate)
{
	struct ttx_opts o = { .protocol = "declock" };
	struct remora_counters c0, c1;
	struct remora_tx *tx;
	struct ttx T;
	uint64_t v = 0, w = 71;

	if (mutate)
		setenv("REMORA_MUTATE", mutate, 1);
	ttx_open(&T, &o);
	unsetenv("REMORA_MUTATE");
	ttx_put(&T, 0, 0, 7, 70); /* inserts key 7: its address is cached from here on */
	cr_assert_eq(remora_tx_begin(T.w[0], 0, &tx), 0);
	c0 = ttx_counters(&T, 0);
	cr_assert_eq(remora_tx_read_for_update(tx, 0, 7, &v), 0);
	c1 = ttx_counters(&T, 0);
	cr_assert_eq(v, 70);
	cr_assert_eq(remora_tx_write(tx, 0, 7, &w), 0);
	cr_assert_eq(remora_tx_commit(tx), 0);
	cr_assert_eq(ttx_get(&T, 0, 0, 7, &v), 0);
	cr_assert_eq(v, 71);
	ttx_close(&T);
	return ttx_vc(&c0, &c1);
}

Test(txn_declock, update_reads_in_the_lock_doorbell)
{
	struct ttx_vc vc = update_fetch_verbs(NULL);

	TTX_VC_EQ(vc, 1, 0, 0, 1, 1);
	vc = update_fetch_verbs("dl_no_ride");
	TTX_VC_EQ(vc, 1, 0, 0, 1, 2);
}
