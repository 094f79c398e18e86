/* SPDX-License-Identifier: MIT */
/*
 * Lock-first fetch: a protocol's before_resolve hook runs before the index is consulted. A
 * test-only protocol (the OCC core plus a hook that "locks" each object with one CAS, as a
 * lock-first protocol would) counts the transport's READs when its hook runs: none may have
 * gone out since the transaction began, and the index READs must follow the locks.
 */
#include <errno.h>
#include <string.h>

#include "ttx.h"

#include "txn/proto/occ/occ.h"
#include "txn/txn.h"

TestSuite(txn_lock_first, .fini = ttx_fini, .timeout = TU_TIMEOUT);

static struct ttx T;

static struct {
	uint64_t mark;         /* READs counted just before the fetching call */
	uint64_t early;        /* READs that went out between the mark and a hook's locks */
	uint64_t reads_at_lock; /* READs counted when the last hook had taken its locks */
	unsigned calls, objs;
} seen;

static uint64_t count(enum remora_op op)
{
	struct remora_counters c;

	remora_transport_counters(T.tu.tp, &c);
	return remora_counters_total(&c, op);
}

static const struct occ_policy lockfirst_policy = { .name = "lockfirst" };

static int lockfirst_db_init(struct remora_db *db)
{
	return occ_db_init(db, &lockfirst_policy);
}

/* One CAS per object on its home bucket's header, compare == swap: a lock that changes
 * nothing, but a verb the counters see, addressed from the key alone (no index READ). */
static int lockfirst_before_resolve(struct remora_tx *tx, struct txn_obj *const *objs,
				    unsigned n)
{
	const struct store_db *st = &txn_db(tx)->st;
	struct remora_wr wrs[8];
	uint64_t old[8];

	cr_assert_leq(n, 8);
	for (unsigned i = 0; i < n; i++) {
		struct txn_obj *o = objs[i];

		cr_assert_eq(o->flags & (OBJ_RESOLVED | OBJ_HAVE_REC), 0,
			     "object resolved before the hook");
		wrs[i] = store_wr_cas(st, o->primary,
					     store_bucket_off(o->t, o->bucket), 0, 0, &old[i]);
	}
	cr_assert_eq(store_exec(txn_chan(tx), wrs, n), 0);
	seen.calls++;
	seen.objs += n;
	seen.reads_at_lock = count(REMORA_OP_READ);
	seen.early += seen.reads_at_lock - seen.mark;
	return 0;
}

static struct txn_proto_ops lockfirst_ops = OCC_PROTO_OPS("lockfirst", lockfirst_db_init);

Test(txn_lock_first, no_read_before_the_locks)
{
	struct remora_tx *tx;
	uint64_t v = 0, reads_end;

	lockfirst_ops.before_resolve = lockfirst_before_resolve;
	txn_proto_test = &lockfirst_ops;
	ttx_open(&T, &(struct ttx_opts){ .protocol = "lockfirst" });
	ttx_put(&T, 0, 0, 5, 50);

	/* Keys the address cache does not know: the lookups READ index buckets. */
	memset(&seen, 0, sizeof(seen));
	cr_assert_eq(remora_tx_begin(T.w[0], 0, &tx), 0);
	seen.mark = count(REMORA_OP_READ);
	cr_assert_eq(remora_tx_read(tx, 0, 777, &v), -REMORA_ENOTFOUND);
	cr_assert_gt(count(REMORA_OP_READ), seen.reads_at_lock, "the lookup READs after the locks");
	cr_assert_eq(remora_tx_stage(tx, 0, 778, REMORA_RD, &v, NULL), 0);
	cr_assert_eq(remora_tx_stage(tx, 0, 779, REMORA_RD, &v, NULL), 0);
	seen.mark = count(REMORA_OP_READ);
	cr_assert_eq(remora_tx_fetch(tx), 0);
	reads_end = count(REMORA_OP_READ);
	cr_assert_eq(remora_tx_commit(tx), 0);

	cr_assert_eq(seen.calls, 2, "hook ran %u times", seen.calls);
	cr_assert_eq(seen.objs, 3);
	cr_assert_eq(seen.early, 0, "%llu READ(s) went out before the locks",
		     (unsigned long long)seen.early);
	cr_assert_gt(reads_end, seen.reads_at_lock, "the lookups READ after the locks");

	/* The data path still works through the hook. */
	cr_assert_eq(ttx_get(&T, 0, 0, 5, &v), 0);
	cr_assert_eq(v, 50);
	ttx_close(&T);
	txn_proto_test = NULL;
}
