/* SPDX-License-Identifier: MIT */
/*
 * OOCC: the footer codec's offsets and torn-image refusal, and the exact verbs of each path
 * (docs/oocc.md): read-only = N READs, no atomic, no WRITE, one doorbell inside the lease;
 * a delay longer than rv between READs adds the validation READs; read-write = 3 doorbells.
 */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "recovery/recovery.h"
#include "store/codec.h"
#include "txn/proto/oocc/oocc.h"
#include "ttx.h"

TestSuite(txn_oocc, .fini = ttx_fini, .timeout = TU_TIMEOUT);

static struct ttx T;

/* Exact verbs of a path that uses no FAA. */
#define VC_EQ(v, r, w, c, db) TTX_VC_EQ(v, r, w, c, 0, db)

/* ---- codec ------------------------------------------------------------------------------- */

Test(txn_oocc, footer_offsets)
{
	const struct codec_ops *c = codec_get(REMORA_CODEC_FOOTER);
	struct codec_geom g;

	cr_assert_not_null(c);
	for (uint32_t vs = 1; vs <= 1024; vs = vs * 2 + 1) {
		struct remora_table_def t = { .name = "t", .id = 0, .value_size = vs };

		cr_assert_eq(c->geom(&t, &g), 0);
		cr_assert_eq(g.stride % 8, 0);
		cr_assert_eq(g.lock_off, g.stride - 8, "lock at the highest address");
		cr_assert_eq(g.version_off, g.stride - 16, "version right below the lock");
		cr_assert_eq(g.check_off, g.version_off);
		cr_assert_eq(g.check_len, 16, "one validation READ returns version and lock");
		cr_assert_eq(g.write_off, 0, "the commit WRITE covers the lock: it unlocks");
		cr_assert_leq(16 + vs, g.version_off, "value below the footer");
		cr_assert_eq(g.nparts, 1);
		cr_assert_eq(g.part_len[0], g.stride, "one READ returns data, version and lock");
	}
}

Test(txn_oocc, footer_torn_images_refused)
{
	const struct codec_ops *c = codec_get(REMORA_CODEC_FOOTER);
	struct remora_table_def t = { .name = "t", .id = 3, .value_size = 40 };
	unsigned char va[40], vb[40], a[128], b[128], mix[128];
	struct codec_geom g;
	struct codec_rec ra = { .key = 7, .table = 3, .flags = REMORA_REC_VALID, .version = 1 };
	struct codec_rec rb = ra, out;

	cr_assert_eq(c->geom(&t, &g), 0);
	memset(va, 0xaa, sizeof(va));
	memset(vb, 0xbb, sizeof(vb));
	ra.value = va;
	ra.lock = 2ull << 62 | 5;
	rb.value = vb;
	rb.version = 2;
	rb.lock = 0;
	c->encode(&g, a, 0, &ra);
	c->encode(&g, b, 0, &rb);
	cr_assert_eq(c->decode(&g, a, 0, &out), 0);
	cr_assert_eq(out.lock, ra.lock);
	cr_assert_eq(out.version, 1);
	cr_assert_eq(c->decode(&g, b, 0, &out), 0);
	cr_assert_eq(out.version, 2);
	/* a READ that overlapped the commit WRITE, torn at every word boundary of data+version */
	for (uint32_t cut = 16; cut < g.lock_off; cut += 8) { /* the keys agree */
		memcpy(mix, b, cut);
		memcpy(mix + cut, a + cut, g.stride - cut);
		cr_assert_eq(c->decode(&g, mix, 0, &out), -EAGAIN, "tear at %u accepted", cut);
		memcpy(mix, a, cut);
		memcpy(mix + cut, b + cut, g.stride - cut);
		cr_assert_eq(c->decode(&g, mix, 0, &out), -EAGAIN, "tear at %u accepted", cut);
	}
}

/* ---- verbs ------------------------------------------------------------------------------- */

/*
 * Opens T with o under the oocc settings `oocc` ($REMORA_OOCC) and the mutation list
 * `mutation` (NULL: none), both read at open only.
 */
static void open_oocc(const struct ttx_opts *o, const char *oocc, const char *mutation)
{
	setenv("REMORA_OOCC", oocc, 1);
	if (mutation)
		setenv("REMORA_MUTATE", mutation, 1);
	ttx_open(&T, o);
	unsetenv("REMORA_OOCC");
	unsetenv("REMORA_MUTATE");
}

static void open3(const char *lease)
{
	struct ttx_opts o = { .protocol = "oocc", .nmn = 3 };
	char env[64];

	snprintf(env, sizeof(env), "lease=%s,delta_ppm=1000", lease);
	open_oocc(&o, env, NULL);
	for (uint64_t k = 1; k <= 8; k++)
		cr_assert_eq(remora_db_load(T.w[0], 0, k, &(uint64_t){ k * 10 }), 0);
	cr_assert_eq(remora_db_load_flush(T.w[0]), 0);
}

static void stage_n(struct remora_tx *tx, unsigned n, uint64_t *vals, bool *found)
{
	for (unsigned i = 0; i < n; i++)
		cr_assert_eq(remora_tx_stage(tx, 0, i + 1, REMORA_RD, &vals[i], &found[i]), 0);
	cr_assert_eq(remora_tx_fetch(tx), 0);
}

/* Read-only inside the lease: N READs in one doorbell, nothing else, also at commit. */
Test(txn_oocc, ro_one_round)
{
	struct remora_counters c0, c1;
	uint64_t vals[8];
	bool found[8];

	open3("500ms");
	for (unsigned n = 1; n <= 8; n++) {
		struct remora_tx *tx;
		struct ttx_vc v;

		cr_assert_eq(remora_tx_begin(T.w[0], 0, &tx), 0);
		c0 = ttx_counters(&T, 0);
		stage_n(tx, n, vals, found);
		cr_assert_eq(remora_tx_commit(tx), 0);
		c1 = ttx_counters(&T, 0);
		v = ttx_vc(&c0, &c1);
		VC_EQ(v, (int)n, 0, 0, 1);
		for (unsigned i = 0; i < n; i++)
			cr_assert(found[i] && vals[i] == (i + 1) * 10);
	}
}

/* A delay longer than rv between two READs: the commit validates both (16 B each). */
Test(txn_oocc, ro_delay_past_rv_validates)
{
	struct remora_counters c0, c1;
	struct remora_tx *tx;
	uint64_t x;
	struct ttx_vc v;

	open3("200us");
	cr_assert_eq(remora_tx_begin(T.w[0], 0, &tx), 0);
	c0 = ttx_counters(&T, 0);
	cr_assert_eq(remora_tx_read(tx, 0, 1, &x), 0);
	usleep(2000);
	cr_assert_eq(remora_tx_read(tx, 0, 2, &x), 0);
	cr_assert_eq(remora_tx_commit(tx), 0);
	c1 = ttx_counters(&T, 0);
	v = ttx_vc(&c0, &c1);
	VC_EQ(v, 4, 0, 0, 3); /* 2 execution READs, 2 validation READs in one doorbell */
}

/* A record under another transaction's intention lock: only that one is validated. */
Test(txn_oocc, ro_intent_validates_that_record)
{
	struct remora_counters c0, c1;
	struct remora_tx *w, *r;
	uint64_t x, vals[3];
	bool found[3];
	struct ttx_vc v;
	struct ttx_opts o = { .protocol = "oocc", .nmn = 3, .workers = 2 };

	open_oocc(&o, "lease=500ms", NULL);
	for (uint64_t k = 1; k <= 3; k++)
		cr_assert_eq(remora_db_load(T.w[0], 0, k, &(uint64_t){ k }), 0);
	cr_assert_eq(remora_db_load_flush(T.w[0]), 0);
	cr_assert_eq(remora_tx_begin(T.w[1], 0, &w), 0);
	cr_assert_eq(remora_tx_read_for_update(w, 0, 2, &x), 0); /* INTENT on key 2 */
	cr_assert_eq(remora_tx_begin(T.w[0], 0, &r), 0);
	c0 = ttx_counters(&T, 0);
	stage_n(r, 3, vals, found);
	cr_assert_eq(remora_tx_commit(r), 0);
	c1 = ttx_counters(&T, 0);
	v = ttx_vc(&c0, &c1);
	VC_EQ(v, 4, 0, 0, 2);
	cr_assert_eq(v.read_bytes, 3 * 40 + 16);
	remora_tx_abort(w);
}

/* Read-write: CAS + READ (1), upgrade + 3 log WRITEs (2), 3 commit WRITEs that unlock (3). */
Test(txn_oocc, rw_three_rounds)
{
	struct remora_counters c0, c1, c2;
	struct remora_tx *tx;
	uint64_t x, y;
	struct ttx_vc v;

	open3("50us");
	cr_assert_eq(remora_tx_begin(T.w[0], 0, &tx), 0);
	c0 = ttx_counters(&T, 0);
	cr_assert_eq(remora_tx_read_for_update(tx, 0, 1, &x), 0);
	c1 = ttx_counters(&T, 0);
	v = ttx_vc(&c0, &c1);
	VC_EQ(v, 1, 0, 1, 1);
	x++;
	cr_assert_eq(remora_tx_write(tx, 0, 1, &x), 0);
	cr_assert_eq(remora_tx_commit(tx), 0);
	c2 = ttx_counters(&T, 0);
	v = ttx_vc(&c1, &c2);
	VC_EQ(v, 0, 1 + 3 + 3, 0, 2);
	cr_assert_eq(ttx_get(&T, 0, 0, 1, &y), 0);
	cr_assert_eq(y, 11);
	/* read one, write another: the read is validated in round 2 (write skew, decision R1) */
	cr_assert_eq(remora_tx_begin(T.w[0], 0, &tx), 0);
	c0 = ttx_counters(&T, 0);
	cr_assert_eq(remora_tx_read(tx, 0, 2, &y), 0);
	cr_assert_eq(remora_tx_read_for_update(tx, 0, 3, &x), 0);
	x = y;
	cr_assert_eq(remora_tx_write(tx, 0, 3, &x), 0);
	cr_assert_eq(remora_tx_commit(tx), 0);
	c1 = ttx_counters(&T, 0);
	v = ttx_vc(&c0, &c1);
	VC_EQ(v, 2 + 1, 1 + 3 + 3, 1, 4);
}

/* ---- leases ------------------------------------------------------------------------------ */

Test(txn_oocc, lease_derive_rv_below_ww)
{
	uint32_t rv, ww;

	oocc_lease_derive(10000, 1000, &rv, &ww);
	cr_assert_eq(rv, 9990);
	cr_assert_eq(ww, 10010);
	oocc_lease_derive(500, 1000, &rv, &ww); /* 0.5 ns rounds up to the 1 ns floor */
	cr_assert_eq(rv, 499);
	cr_assert_eq(ww, 501);
	oocc_lease_derive(7000, 0, &rv, &ww);
	cr_assert_eq(rv, ww);
}

/*
 * The manager starts from a lease far below a read phase (nearly every read-only transaction
 * validates) and must reach >= 80% omission; every word it installs keeps rv <= ww.
 */
Test(txn_oocc, lease_manager_converges)
{
	struct ttx_opts o = { .protocol = "oocc", .nmn = 2 };
	struct oocc_db *d;
	uint64_t vals[2], lease = 0, first = 0;
	bool found[2], converged = false;

	open_oocc(&o, "lease=50ns,delta_ppm=1000", NULL);
	for (uint64_t k = 1; k <= 2; k++)
		cr_assert_eq(remora_db_load(T.w[0], 0, k, &(uint64_t){ k }), 0);
	cr_assert_eq(remora_db_load_flush(T.w[0]), 0);
	d = T.db->proto_priv;
	for (unsigned tick = 0; tick < 40 && !converged; tick++) {
		uint64_t ro0 = d->stats.ro, om0 = d->stats.ro_omit, w;

		for (unsigned i = 0; i < 200; i++) {
			struct remora_tx *tx;

			cr_assert_eq(remora_tx_begin(T.w[0], 0, &tx), 0);
			stage_n(tx, 2, vals, found);
			cr_assert_eq(remora_tx_commit(tx), 0);
		}
		if (tick == 0)
			first = (d->stats.ro_omit - om0) * 100 / (d->stats.ro - ro0);
		converged = tick > 0 && (d->stats.ro_omit - om0) * 10 >= (d->stats.ro - ro0) * 8;
		lease = oocc_lease_tick(T.db);
		w = d->lease_word;
		cr_assert_leq(w >> 32, (uint32_t)w, "rv > ww after a tick");
	}
	cr_assert_lt(first, 80, "the starting lease already covered %llu%%",
		     (unsigned long long)first);
	cr_assert(converged, "no 80%% omission, lease %llu ns", (unsigned long long)lease);
	cr_assert_gt(lease, 50);
}

/*
 * The lease manager shrinks the lease between a reader's begin and its first READ. The reader
 * must trust the new rv, not begin's: a writer that starts after the change waits only the new
 * ww. Worker 0 begins (rv ~100 ms), the lease goes to 20 us, worker 0 READs key 1, worker 1
 * increments keys 1 and 2 (waiting ~20 us), worker 0 READs key 2 ~1 ms later. With begin's rv
 * the reader commits without validation on key 1 old and key 2 new; with the new rv it
 * validates key 1 and aborts. Returns whether the reader kept a consistent view.
 */
static bool check_reader_takes_shrunk_lease(const char *mutation)
{
	struct ttx_opts o = { .protocol = "oocc", .nmn = 2, .workers = 2 };
	struct remora_tx *r, *w;
	uint64_t a = 0, b = 0, x, y;
	int rc;

	open_oocc(&o, "lease=100ms,delta_ppm=1000", mutation);
	for (uint64_t k = 1; k <= 2; k++)
		cr_assert_eq(remora_db_load(T.w[0], 0, k, &(uint64_t){ 7 }), 0);
	cr_assert_eq(remora_db_load_flush(T.w[0]), 0);
	cr_assert_eq(remora_tx_begin(T.w[0], REMORA_TX_READ_ONLY, &r), 0);
	oocc_lease_set(T.db, 20000); /* Prepare, wait ~100 ms, Commit */
	cr_assert_eq(remora_tx_read(r, 0, 1, &a), 0);
	cr_assert_eq(remora_tx_begin(T.w[1], 0, &w), 0);
	cr_assert_eq(remora_tx_read_for_update(w, 0, 1, &x), 0);
	cr_assert_eq(remora_tx_read_for_update(w, 0, 2, &y), 0);
	x++;
	y++;
	cr_assert_eq(remora_tx_write(w, 0, 1, &x), 0);
	cr_assert_eq(remora_tx_write(w, 0, 2, &y), 0);
	cr_assert_eq(remora_tx_commit(w), 0);
	usleep(1000);
	cr_assert_eq(remora_tx_read(r, 0, 2, &b), 0);
	rc = remora_tx_commit(r);
	cr_assert(rc == 0 || rc == -REMORA_EABORT, "commit: %s", remora_strerror(rc));
	ttx_close(&T);
	return rc != 0 || a == b;
}

Test(txn_oocc, reader_takes_shrunk_lease)
{
	cr_assert(check_reader_takes_shrunk_lease(NULL));
}

Test(txn_oocc, reader_takes_shrunk_lease_mutated)
{
	cr_assert_not(check_reader_takes_shrunk_lease("oocc_rv_at_begin"));
}

/*
 * manager=1 opens on a database for one compute node (the policy runs in the process, no
 * messages) and on one for several (compute node 0 manages every node's word by messages,
 * manager.c: the open sets up the RPC layer). Returns the open's code; *msg: it has one.
 */
static int open_manager(unsigned max_cn, bool *msg)
{
	struct ttx_opts o = { .protocol = "oocc", .nmn = 1, .max_cn = max_cn };
	struct remora_db_cfg cfg = { .size = sizeof(cfg), .protocol = "oocc", .n_mn = 1,
				     .coords_per_worker = 1, .workers = 1 };
	struct remora_db *db = NULL;
	int rc;

	ttx_open(&T, &o);
	cfg.tp = T.tu.tp;
	setenv("REMORA_OOCC", "lease=10us,manager=1", 1);
	rc = remora_db_open(&cfg, &db);
	unsetenv("REMORA_OOCC");
	*msg = !rc && db->rpc;
	if (!rc)
		remora_db_close(db);
	ttx_close(&T);
	return rc;
}

Test(txn_oocc, manager_messages_only_over_several_compute_nodes)
{
	bool msg;

	cr_assert_eq(open_manager(2, &msg), 0, "%s", remora_db_errmsg(NULL));
	cr_assert(msg, "a manager over two compute nodes has no messages");
	cr_assert_eq(open_manager(1, &msg), 0, "%s", remora_db_errmsg(NULL));
	cr_assert_not(msg, "a manager of one compute node opened messages");
}

/*
 * A db of the cluster-wide manager (manager=1, formatted for 2 compute nodes) opens unsynced:
 * until a round of compute node 0 reaches it, its readers trust no lease and its writers wait
 * for one (manager.c). Node 1 never opens here, so no round comes: under a 500 ms lease a
 * read-only transaction of one record still validates (2 READs), and a read-modify-write
 * aborts after OOCC_SYNC_WAIT_NS with nothing written. Returns whether both held; the
 * mutation oocc_start_synced trusts the node's own word from the open.
 */
static bool check_unsynced(const char *mutation)
{
	struct ttx_opts o = { .protocol = "oocc", .nmn = 1, .max_cn = 2 };
	struct remora_counters c0, c1;
	struct remora_tx *tx;
	uint64_t x, vals[1];
	bool found[1];
	int rc;

	open_oocc(&o, "lease=500ms,manager=1", mutation);
	cr_assert_eq(remora_db_load(T.w[0], 0, 1, &(uint64_t){ 10 }), 0);
	cr_assert_eq(remora_db_load_flush(T.w[0]), 0);
	cr_assert_eq(remora_tx_begin(T.w[0], 0, &tx), 0);
	c0 = ttx_counters(&T, 0);
	stage_n(tx, 1, vals, found);
	cr_assert_eq(remora_tx_commit(tx), 0);
	c1 = ttx_counters(&T, 0);
	cr_assert_eq(remora_tx_begin(T.w[0], 0, &tx), 0);
	cr_assert_eq(remora_tx_read_for_update(tx, 0, 1, &x), 0);
	x++;
	cr_assert_eq(remora_tx_write(tx, 0, 1, &x), 0);
	rc = remora_tx_commit(tx);
	cr_assert_eq(ttx_get(&T, 0, 0, 1, &x), 0);
	ttx_close(&T);
	return ttx_vc(&c0, &c1).read == 2 && rc == -REMORA_EABORT && x == 10;
}

Test(txn_oocc, unsynced_node_trusts_no_lease)
{
	cr_assert(check_unsynced(NULL));
}

Test(txn_oocc, unsynced_node_trusts_no_lease_mutated)
{
	cr_assert_not(check_unsynced("oocc_start_synced"));
}

/*
 * The manager's messages, as a node's worker 0 takes them (manager.c): sent here by worker 1
 * of the same compute node 0 (the manager's id), while a thread runs worker 0's dispatcher.
 * A pair with rv > ww and a short message are refused with the word unchanged; a Commit
 * syncs the node; a Prepare or Commit of a round older than one taken is dropped (-ESTALE).
 */
struct lease_msg_wire {
	uint64_t seq;
	uint32_t rv, ww;
};

static volatile bool g_serve;

static void *serve_worker0(void *arg)
{
	struct remora_rpc_ep *ep = arg;

	while (g_serve)
		remora_rpc_poll(ep);
	return NULL;
}

static int send_lease(uint16_t op, uint64_t seq, uint32_t rv, uint32_t ww, uint32_t len)
{
	struct lease_msg_wire m = { seq, rv, ww };
	uint64_t old;
	struct remora_rpc_call c = { .op = op, .req = &m, .req_len = len, .rep = &old,
				     .rep_cap = sizeof(old) };
	int rc = remora_rpc_call(T.w[1]->rpc, 0, 0, &c, 1, 2000);

	return rc ? rc : c.status;
}

Test(txn_oocc, manager_messages_checked)
{
	struct ttx_opts o = { .protocol = "oocc", .nmn = 1, .max_cn = 2, .workers = 2 };
	const struct oocc_db *d;
	pthread_t th;
	uint64_t w0;

	open_oocc(&o, "lease=1ms,manager=1", NULL);
	d = T.db->proto_priv;
	cr_assert_not_null(T.w[0]->rpc);
	w0 = d->lease_word;
	g_serve = true;
	cr_assert_eq(pthread_create(&th, NULL, serve_worker0, T.w[0]->rpc), 0);
	cr_expect_eq(send_lease(OOCC_OP_PREPARE, 10, 9, 8, sizeof(struct lease_msg_wire)),
		     -EINVAL, "rv > ww taken");
	cr_expect_eq(send_lease(OOCC_OP_COMMIT, 10, 1, 2, 8), -EINVAL, "a short message taken");
	cr_expect_eq(d->lease_word, w0, "a refused message changed the word");
	cr_expect_not(d->synced);
	cr_expect_eq(send_lease(OOCC_OP_COMMIT, 20, 5000, 6000, sizeof(struct lease_msg_wire)),
		     0);
	cr_expect(d->synced, "a Commit did not sync the node");
	cr_expect_eq(d->lease_word, oocc_lease_pack(5000, 6000));
	cr_expect_eq(send_lease(OOCC_OP_COMMIT, 15, 7000, 8000, sizeof(struct lease_msg_wire)),
		     -ESTALE, "an older round's Commit taken");
	cr_expect_eq(send_lease(OOCC_OP_PREPARE, 15, 1, 9000, sizeof(struct lease_msg_wire)),
		     -ESTALE, "an older round's Prepare taken");
	cr_expect_eq(d->lease_word, oocc_lease_pack(5000, 6000), "a dropped message changed it");
	cr_expect_eq(send_lease(OOCC_OP_PREPARE, 30, 4000, 7000, sizeof(struct lease_msg_wire)),
		     0);
	cr_expect_eq(d->lease_word, oocc_lease_pack(4000, 7000), "Prepare is min rv, max ww");
	g_serve = false;
	pthread_join(th, NULL);
	ttx_close(&T);
}

/* ---- the commit gate --------------------------------------------------------------------- */

/*
 * Observed from outside the protocol: the clock when the execution locks are acked (the
 * txn.locked point, after t_lock_done is taken) and when the commit WRITEs are about to be
 * posted (txn.commit_write), against the ww of the lease word.
 */
static uint64_t g_locked_at, g_early, g_commits;

static void gate_watch(struct remora_tx *tx, const char *point)
{
	const struct oocc_db *d = T.db->proto_priv;
	uint64_t now = oocc_now_ns(), ww = (uint32_t)d->lease_word;

	(void)tx;
	if (!strcmp(point, "txn.locked"))
		g_locked_at = now;
	if (strcmp(point, "txn.commit_write"))
		return;
	g_commits++;
	/* 100 us of slack: txn.locked runs a little after t_lock_done is taken */
	if (now + 100000u < g_locked_at + ww)
		g_early++;
}

/* 20 read-modify-writes under a 2 ms lease: how many commit WRITEs went out early. */
static uint64_t early_commit_writes(const char *mutation)
{
	struct ttx_opts o = { .protocol = "oocc", .nmn = 2 };
	uint64_t x;

	open_oocc(&o, "lease=2ms", mutation);
	ttx_put(&T, 0, 0, 1, 0);
	g_early = g_commits = 0;
	txn_test_hook = gate_watch;
	for (unsigned i = 0; i < 20; i++) {
		struct remora_tx *tx;

		cr_assert_eq(remora_tx_begin(T.w[0], 0, &tx), 0);
		cr_assert_eq(remora_tx_read_for_update(tx, 0, 1, &x), 0);
		x++;
		cr_assert_eq(remora_tx_write(tx, 0, 1, &x), 0);
		cr_assert_eq(remora_tx_commit(tx), 0);
	}
	txn_test_hook = NULL;
	cr_assert_eq(g_commits, 20);
	cr_assert_eq(ttx_get(&T, 0, 0, 1, &x), 0);
	cr_assert_eq(x, 20);
	ttx_close(&T);
	return g_early;
}

Test(txn_oocc, commit_writes_wait_the_lease)
{
	cr_assert_eq(early_commit_writes(NULL), 0);
}

Test(txn_oocc, commit_writes_wait_the_lease_mutated)
{
	cr_assert_eq(early_commit_writes("oocc_no_lease_wait"), 20);
}

/* What the hook breaks right before the gate check: the lease or round 2's acks. */
static int g_break;

static void gate_break(struct remora_tx *tx, const char *point)
{
	struct oocc_tx *t = tx->priv;

	if (strcmp(point, "txn.commit_write"))
		return;
	if (g_break == 0)
		t->ww = UINT32_MAX; /* as if the write lease had 4 s to run */
	else
		t->round2_acked = false;
}

/*
 * The gate is checked in code, in every build (not an assert): with the lease or round 2's
 * acks broken right before the commit WRITEs, the commit fails with "commit gate", writes
 * nothing, and gives its lock back.
 */
Test(txn_oocc, commit_gate_enforced)
{
	struct ttx_opts o = { .protocol = "oocc", .nmn = 2 };
	uint64_t x;

	open_oocc(&o, "lease=20us", NULL);
	ttx_put(&T, 0, 0, 1, 5);
	for (g_break = 0; g_break < 2; g_break++) {
		struct remora_tx *tx;
		int rc;

		cr_assert_eq(remora_tx_begin(T.w[0], 0, &tx), 0);
		cr_assert_eq(remora_tx_read_for_update(tx, 0, 1, &x), 0);
		x = 99;
		cr_assert_eq(remora_tx_write(tx, 0, 1, &x), 0);
		txn_test_hook = gate_break;
		rc = remora_tx_commit(tx);
		txn_test_hook = NULL;
		cr_assert_eq(rc, -EIO, "break %d: commit %s", g_break, remora_strerror(rc));
		cr_assert_not_null(strstr(remora_worker_errmsg(T.w[0]), "commit gate"), "%s",
				   remora_worker_errmsg(T.w[0]));
		cr_assert_eq(ttx_get(&T, 0, 0, 1, &x), 0);
		cr_assert_eq(x, 5, "a commit WRITE went out past the gate");
	}
	ttx_put(&T, 0, 0, 1, 6); /* the lock was given back */
	cr_assert_eq(ttx_get(&T, 0, 0, 1, &x), 0);
	cr_assert_eq(x, 6);
}

/* ---- an abort after the log ------------------------------------------------------------- */

/*
 * An abort once the redo log went out (validation fails in round 2) invalidates the log
 * before it unlocks. A later writer then takes record 1, so the log, were it still valid,
 * would name an overwritten record, which recovery takes as proof of a commit: it would roll
 * record 2 forward. Returns record 2 after recovery (loaded 20, the aborted write 77); the
 * oocc_abort_keeps_log mutation leaves the log valid.
 */
static uint64_t recovered_after_logged_abort(const char *mutation)
{
	struct ttx_opts o = { .protocol = "oocc", .nmn = 2, .workers = 2 };
	struct recovery_cfg cfg = { .size = sizeof(cfg), .n_mn = 2 };
	struct recovery_report rep;
	struct remora_tx *tx;
	char err[256] = "";
	uint64_t x, y;
	int rc;

	open_oocc(&o, "lease=20us", mutation);
	for (uint64_t k = 1; k <= 3; k++)
		ttx_put(&T, 0, 0, k, k * 10);
	cr_assert_eq(remora_tx_begin(T.w[0], 0, &tx), 0);
	cr_assert_eq(remora_tx_read(tx, 0, 3, &y), 0);
	cr_assert_eq(remora_tx_read_for_update(tx, 0, 1, &x), 0);
	cr_assert_eq(remora_tx_read_for_update(tx, 0, 2, &x), 0);
	cr_assert_eq(remora_tx_write(tx, 0, 1, &(uint64_t){ 66 }), 0);
	cr_assert_eq(remora_tx_write(tx, 0, 2, &(uint64_t){ 77 }), 0);
	ttx_put(&T, 1, 0, 3, 31); /* the record read changes: round 2's validation fails */
	rc = remora_tx_commit(tx);
	cr_assert_eq(rc, -REMORA_EABORT, "commit: %s", remora_strerror(rc));
	ttx_put(&T, 1, 0, 1, 500); /* neither the logged old nor the new version */
	rc = recovery_run(T.tu.tp, &cfg, &rep, err, sizeof(err));
	cr_assert_eq(rc, 0, "recovery: %s", err);
	cr_assert_eq(ttx_get(&T, 0, 0, 1, &x), 0);
	cr_assert_eq(x, 500);
	cr_assert_eq(ttx_get(&T, 0, 0, 2, &y), 0);
	ttx_close(&T);
	return y;
}

Test(txn_oocc, logged_abort_unlogs_before_unlock)
{
	cr_assert_eq(recovered_after_logged_abort(NULL), 20, "an aborted write rolled forward");
}

Test(txn_oocc, logged_abort_unlogs_before_unlock_mutated)
{
	cr_assert_eq(recovered_after_logged_abort("oocc_abort_keeps_log"), 77);
}

/* ---- the 2PL baseline ------------------------------------------------------------------- */

/* Read-only: one CAS (read lock) + one READ per record in one doorbell, then one FAA each to
 * give the read locks back; read-write: log, then the commit WRITE that unlocks. */
Test(txn_oocc, twopl_verbs)
{
	struct ttx_opts o = { .protocol = "twopl", .nmn = 3 };
	struct remora_counters c0, c1, c2;
	struct remora_tx *tx;
	uint64_t vals[3], x;
	bool found[3];
	struct ttx_vc v;

	ttx_open(&T, &o);
	for (uint64_t k = 1; k <= 3; k++)
		cr_assert_eq(remora_db_load(T.w[0], 0, k, &(uint64_t){ k }), 0);
	cr_assert_eq(remora_db_load_flush(T.w[0]), 0);
	cr_assert_eq(remora_tx_begin(T.w[0], 0, &tx), 0);
	c0 = ttx_counters(&T, 0);
	stage_n(tx, 3, vals, found);
	c1 = ttx_counters(&T, 0);
	v = ttx_vc(&c0, &c1);
	VC_EQ(v, 3, 0, 3, 1);
	cr_assert_eq(remora_tx_commit(tx), 0);
	cr_assert_eq(remora_tx_begin(T.w[0], 0, &tx), 0); /* waits for the unlocks */
	c2 = ttx_counters(&T, 0);
	v = ttx_vc(&c1, &c2);
	cr_assert_eq(v.faa, 3, "read unlocks: %llu FAA", (unsigned long long)v.faa);
	cr_assert_eq(v.read + v.write + v.cas, 0);
	/* read-write: a read lock of our own upgrades in place (CAS 1 -> LOCKED) */
	cr_assert_eq(remora_tx_read(tx, 0, 1, &x), 0);
	cr_assert_eq(remora_tx_read_for_update(tx, 0, 1, &x), 0);
	x += 5;
	cr_assert_eq(remora_tx_write(tx, 0, 1, &x), 0);
	c0 = ttx_counters(&T, 0);
	cr_assert_eq(remora_tx_commit(tx), 0);
	c1 = ttx_counters(&T, 0);
	v = ttx_vc(&c0, &c1);
	VC_EQ(v, 0, 3 + 3, 0, 2); /* 3 log WRITEs, then 3 commit WRITEs (replicas) */
	cr_assert_eq(ttx_get(&T, 0, 0, 1, &x), 0);
	cr_assert_eq(x, 6);
}

/* A bad REMORA_OOCC item refuses the open with one line naming it; good ones open. */
Test(txn_oocc, bad_settings_refused)
{
	static const char *const bad[] = {
		"lease=abc", "lease=0us", "lease=5s", "delta_ppm=2000000", "manager=2",
		"colour=blue", "lease", "delta_ppm=abc", "delta_ppm=12x", "delta_ppm=",
		"delta_ppm=-1", "delta_ppm= 5", "delta_ppm=+5", "lease=+5us", "lease=-1",
		"lease= 10us", "lease=10 us", "lease=10usx", "lease=us", "lease=", "lease=1001ms",
		"lease=99999999999999999999", "manager=", "manager=1x", "late_upgrade=01",
		"late_upgrade=yes", "=1", "lease=10us,delta_ppm=7q", "lease=10us\nx",
	};
	static const char *const good[] = {
		"lease=7000", "lease=10us,delta_ppm=0,late_upgrade=0", "lease=1000ms",
		"delta_ppm=1000000,manager=0", "lease=800ns,,late_upgrade=1,",
	};
	struct ttx_opts o = { .protocol = "oocc", .nmn = 1 };
	struct remora_db_cfg cfg = { .size = sizeof(cfg), .protocol = "oocc", .n_mn = 1,
				     .coords_per_worker = 1, .workers = 1 };

	ttx_open(&T, &o);
	cfg.tp = T.tu.tp;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct remora_db *db = NULL;

		setenv("REMORA_OOCC", bad[i], 1);
		cr_assert_eq(remora_db_open(&cfg, &db), -REMORA_ECONFIG, "%s accepted", bad[i]);
		cr_assert_not_null(strstr(remora_db_errmsg(NULL), "REMORA_OOCC"), "%s: %s", bad[i],
				   remora_db_errmsg(NULL));
		cr_assert_null(strchr(remora_db_errmsg(NULL), '\n'));
	}
	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
		struct remora_db *db = NULL;
		int rc;

		setenv("REMORA_OOCC", good[i], 1);
		rc = remora_db_open(&cfg, &db);
		cr_assert_eq(rc, 0, "%s refused: %s", good[i], remora_db_errmsg(NULL));
		remora_db_close(db);
	}
	unsetenv("REMORA_OOCC");
}
