/* SPDX-License-Identifier: MIT */
/*
 * The lock service (runtime/lock, docs/declock.md) under `remora lockbench`'s engine with its
 * checker on: S/X mutual exclusion and grant order = FAA order, random S/X mixes on a few hot
 * locks, delays injected before entry WRITEs. Exact verb counts: every verb the channels saw is
 * one the lock service or a critical section counted, and a DecLock acquisition that met no
 * reset posts at most 2 (FAA, entry WRITE). A tiny queue (C = 2) and tiny versions (M = 2)
 * force overwrites, version wraps and resets. Negative controls, layer lock of
 * runtime/mutate/mutate.h: waiter_polls (caught by the per-acquisition bound),
 * release_no_refetch (a late entry taken for a holder: its waiter is never granted and times
 * out), stale_epoch_grant (a grant of an older epoch reaches a waiter of the new one),
 * reuse_is_overflow (a reader's release resets the lock on a slot reused behind the head),
 * early_grant_abandons_place and grant_ignores_place (a grant before the entry, or for another
 * place, strands the acquirer's place: a timeout and a reset follow),
 * reader_ignores_wcnt and grant_out_of_order (the checker's own controls).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include <remora/lock.h>
#include <remora/sched.h>

#include "apps/cli/cmd.h"
#include "apps/cli/lockbench.h"
#include "mutate/mutate.h"

TestSuite(lock, .timeout = 300);

static struct lb_opts small(const char *type)
{
	struct lb_opts o;

	lb_defaults(&o);
	o.lock = type;
	o.cns = 3;
	o.coros = 6;
	o.locks = 4;
	o.duration = 0;
	o.ops = 150;
	o.cap_log2 = 5; /* C = 32 >= 18 clients: no overflow */
	o.timeout_ms = 15000; /* no reset on a loaded host: tests asserting none use it */
	o.entry_delay_us = 30;
	o.check = true;
	return o;
}

static void run_ok(const struct lb_opts *o, struct lb_result *r)
{
	cr_assert_eq(lb_run(o, r), 0, "lockbench run failed");
	cr_assert_eq(r->violations, 0, "%s: %s", o->lock, r->violation);
	cr_assert_eq(r->errors, 0, "%s: %lu acquisitions failed (first: %d)", o->lock,
		     (unsigned long)r->errors, r->first_err);
	cr_assert_eq(r->ops, (uint64_t)o->cns * o->coros * o->ops);
}

/* Every verb the channels carried is one the service or a critical section counted. */
static void verbs_exact(const struct lb_result *r)
{
	uint64_t counted = r->st.acq_ops + r->st.rel_ops + r->st.reset_ops + r->cs_ops +
			   r->st.prefetch_ops + r->st.sync_ops;

	cr_assert_eq(r->chan_verbs, counted, "channels saw %lu verbs, the service counted %lu",
		     (unsigned long)r->chan_verbs, (unsigned long)counted);
}

Test(lock, declock_exclusion_order_and_verbs)
{
	struct lb_opts o = small("declock");
	struct lb_result r;

	run_ok(&o, &r);
	verbs_exact(&r);
	cr_assert_eq(r.st.reset_acq, 0, "no reset expected with C >= clients");
	cr_assert_eq(r.st.timeouts, 0);
	cr_assert_gt(r.st.waited, 0, "the mix never contended: the test proves nothing");
	cr_assert_leq(r.st.acq_ops_max, 2, "an acquisition posted %lu memory-node verbs",
		      (unsigned long)r.st.acq_ops_max);
	cr_assert_eq(r.st.acq_ops, r.st.acquires + r.st.waited, "1 FAA each, + 1 WRITE per waiter");
	cr_assert_eq(r.st.rel_ops, 2 * r.st.releases + r.st.refetches, "FAA + READ per release");
	cr_assert_gt(r.st.grants_sent, 0);
}

Test(lock, declock_tiny_queue_and_versions_reset)
{
	struct lb_opts o = small("declock");
	struct lb_result r;

	o.cns = 2;
	o.coros = 4;    /* 8 clients ... */
	o.cap_log2 = 1; /* ... on C = 2: the queue overflows */
	o.ver_bits = 2; /* M = 2: versions wrap every 8 places */
	o.ops = 300;
	o.timeout_ms = 300;
	run_ok(&o, &r);
	verbs_exact(&r);
	cr_assert_gt(r.st.overflows, 0, "the queue never overflowed");
	cr_assert_gt(r.st.wraps, 0, "versions never wrapped");
	cr_assert_gt(r.st.resets, 0, "overflows and wraps must reset");
	cr_assert_gt(r.st.reset_acq, 0);
	cr_assert_leq(r.st.acq_ops_max, 2);
}

Test(lock, declock_pure_writers_and_pure_readers)
{
	struct lb_opts o = small("declock");
	struct lb_result r;

	o.read_pct = 0;
	run_ok(&o, &r);
	cr_assert_eq(r.st.reset_acq, 0, "resets %lu timeouts %lu overflows %lu wraps %lu dropped %lu",
		     (unsigned long)r.st.resets, (unsigned long)r.st.timeouts,
		     (unsigned long)r.st.overflows, (unsigned long)r.st.wraps,
		     (unsigned long)r.st.grants_dropped);
	o.read_pct = 100;
	run_ok(&o, &r);
	cr_assert_eq(r.st.waited, 0, "readers alone never wait");
	cr_assert_eq(r.st.acq_ops, r.st.acquires, "a reader alone: one FAA");
}

Test(lock, baselines_exclusion)
{
	const char *types[] = { "caslock", "dslr", "shiftlock" };

	for (unsigned i = 0; i < 3; i++) {
		struct lb_opts o = small(types[i]);
		struct lb_result r;

		o.ops = 80;
		run_ok(&o, &r);
		verbs_exact(&r);
		cr_assert_gt(r.st.acq_ops, r.st.acquires, "%s never retried on 4 hot locks",
			     types[i]);
	}
}

/*
 * Hierarchical mode: one queue entry per compute node (C = 4 >= 3 nodes never overflows, 18
 * clients), hand-offs inside a node with 0 verbs, grant order = FAA order among the CQL
 * acquisitions, exclusion among every holder. No timeout, and no reset but one kind: a reader
 * waiting behind a releasing writer can be passed (readers joining at once while wcnt is 0
 * pop its place) and its slot reused before its late entry is seen; the writer's release then
 * resets (reader_passed). One entry per node does not bound that: the passing readers may
 * come and go any number of times while one entry is late, so no C rules it out.
 */
Test(lock, declock_hierarchical_tf_and_pf)
{
	const char *types[] = { "declock-tf", "declock-pf" };

	for (unsigned i = 0; i < 2; i++) {
		struct lb_opts o = small(types[i]);
		struct lb_result r;

		o.cap_log2 = 2;
		run_ok(&o, &r);
		verbs_exact(&r);
		cr_assert(r.st.overflows + r.st.timeouts + r.st.wraps == 0 &&
				  r.st.resets <= r.st.reader_passed,
			  "%s: overflows %lu resets %lu (passed readers %lu) timeouts %lu wraps %lu",
			  types[i], (unsigned long)r.st.overflows, (unsigned long)r.st.resets,
			  (unsigned long)r.st.reader_passed, (unsigned long)r.st.timeouts,
			  (unsigned long)r.st.wraps);
		cr_assert_gt(r.st.local_grants, 0, "%s: no hand-off inside a node", types[i]);
		cr_assert_leq(r.st.acq_ops_max, 2, "%s", types[i]);
		cr_assert_lt(r.st.acq_ops, r.st.acquires + r.st.waited,
			     "%s: local hand-offs must save verbs", types[i]);
	}
}

Test(lock, timestamps_compare_across_the_wrap)
{
	cr_assert(lock_ts_before(5, 10));
	cr_assert(!lock_ts_before(10, 5));
	cr_assert(!lock_ts_before(7, 7));
	cr_assert(lock_ts_before(0xfff0, 0x0010), "0x0010 came after the wrap");
	cr_assert(!lock_ts_before(0x0010, 0xfff0));
	cr_assert(lock_ts_before(0x0000, 0x7fff));
	cr_assert(!lock_ts_before(0x0000, 0x8001), "more than 2^15 apart: the larger is earlier");
}

/* Compute node 1 of 3 dies 0.2 s into a 1.5 s run of type on 2 hot locks. */
static struct lb_opts dies_opts(const char *type, uint64_t mutate)
{
	struct lb_opts o = small(type);

	o.cns = 3;
	o.coros = 4;
	o.locks = 2;
	o.cap_log2 = 4;
	o.entry_delay_us = 0;
	o.ops = 0;
	o.duration = 1.5;
	o.kill_cn = 1;
	o.kill_at = 0.2;
	o.timeout_ms = 100;
	o.mutate = mutate;
	return o;
}

/*
 * A compute node dies holding a lock (its thread frozen, the others mark it down): waiters
 * time out, one resets, the live nodes go on, nobody hangs, the checker stays clean.
 */
Test(lock, holder_node_dies)
{
	const char *types[] = { "declock", "declock-tf" };

	for (unsigned i = 0; i < 2; i++) {
		struct lb_opts o = dies_opts(types[i], 0);
		struct lb_result r;

		cr_assert_eq(lb_run(&o, &r), 0);
		cr_assert_eq(r.stuck, 0, "%s: %u live nodes hung", types[i], r.stuck);
		cr_assert_eq(r.violations, 0, "%s: %s", types[i], r.violation);
		cr_assert_eq(r.errors, 0, "%s: %lu failed (first %d)", types[i],
			     (unsigned long)r.errors, r.first_err);
		cr_assert_gt(r.st.timeouts, 0, "%s: nobody waited for the dead holder", types[i]);
		cr_assert_gt(r.st.resets, 0, "%s", types[i]);
		cr_assert_gt(r.ops_after_kill, 0, "%s: the live nodes stopped", types[i]);
	}
}

/*
 * The baselines have no recovery: clients that wait for the dead holder's lock spin until the
 * run's end (shiftlock's time out, again and again). The run still ends: their backoff gives
 * up once the lock service is shut down, and the waiters are reported stuck or failed. (A
 * backoff that ignored the shutdown hung here.)
 */
Test(lock, baseline_holder_node_dies_reported_stuck, .timeout = 120)
{
	const char *types[] = { "caslock", "dslr", "shiftlock" };

	for (unsigned i = 0; i < 3; i++) {
		struct lb_opts o = dies_opts(types[i], 0);
		struct lb_result r;

		/* one live node of 2 clients: its spinning (until the grace ends) loads the host
		 * less for the tests that run beside it */
		o.cns = 2;
		o.coros = 2;
		o.duration = 0.6;
		cr_assert_eq(lb_run(&o, &r), 0);
		cr_assert(r.stuck > 0 || r.errors > 0, "%s: live nodes went on past a dead "
			  "holder of a hot lock", types[i]);
		cr_assert_eq(r.violations, 0, "%s: %s", types[i], r.violation);
	}
}

/*
 * DSLR+'s 16-bit counters pass 2^15 on one lock of writers (72 000 tickets): the crossing
 * holder resets the word after every valid ticket is served, strays take new tickets.
 */
Test(lock, dslr_counters_reset_past_2_15)
{
	struct lb_opts o = small("dslr");
	struct lb_result r;

	o.cns = 2;
	o.coros = 4;
	o.locks = 1;
	o.read_pct = 0;
	o.ops = 9000;
	o.entry_delay_us = 0;
	run_ok(&o, &r);
	verbs_exact(&r);
	cr_assert_geq(r.st.resets, 2, "72000 X tickets cross 2^15 twice");
}

/* ---- negative controls ------------------------------------------------------------------- */

static uint64_t mut(const char *name)
{
	uint64_t m = 0;

	cr_assert_eq(mut_set(&m, MUT_LOCK, name), 0, "%s is not a lock mutation", name);
	return m;
}

/*
 * Negative control of holder_node_dies: reset_waits_for_dead makes a reset wait for the dead
 * node's answer too. The resetter never ends, nor do the waiters behind its reset: the run
 * sees live nodes still busy long after the stop (stuck), and returns only because it shuts
 * their lock services down then.
 */
Test(lock, holder_node_dies_mutated)
{
	const char *types[] = { "declock", "declock-tf" };

	for (unsigned i = 0; i < 2; i++) {
		struct lb_opts o = dies_opts(types[i], mut("reset_waits_for_dead"));
		struct lb_result r;

		cr_assert_eq(lb_run(&o, &r), 0);
		cr_assert_gt(r.stuck, 0, "%s: the mutation did not hang a live node (%" PRIu64
			     " resets, %" PRIu64 " timeouts)", types[i], r.st.resets,
			     r.st.timeouts);
	}
}

Test(lock, mutation_waiter_polls_is_caught)
{
	struct lb_opts o = small("declock");
	struct lb_result r;

	o.mutate = mut("waiter_polls");
	cr_assert_eq(lb_run(&o, &r), 0);
	cr_assert_gt(r.st.acq_ops_max, 2, "a polling waiter must exceed 2 verbs per acquisition");
}

Test(lock, mutation_release_no_refetch_is_caught)
{
	struct lb_opts o = small("declock");
	struct lb_result r;

	o.mutate = mut("release_no_refetch");
	o.entry_delay_us = 200;
	o.timeout_ms = 50;
	o.ops = 60;
	cr_assert_eq(lb_run(&o, &r), 0);
	cr_assert_gt(r.st.timeouts, 0, "a waiter whose late entry was skipped must time out");
	/* A correct run has no waiter that must give up; the limit is for a loaded sanitizer
	 * run only (3 s was once exceeded under ASan with the whole suite running). */
	o.mutate = 0;
	o.timeout_ms = 30000;
	run_ok(&o, &r);
	cr_assert_eq(r.st.timeouts, 0, "the same run without the mutation never times out");
	cr_assert_gt(r.st.refetches, 0, "the delays never made a release refetch");
}

/* The checker itself: a reader let in behind a writer, a writer granted out of FAA order. */
Test(lock, checker_catches_exclusion_and_order_mutations)
{
	static const char *const names[] = { "reader_ignores_wcnt", "grant_out_of_order" };
	static const char *const says[] = { "granted", "order" };

	for (unsigned i = 0; i < 2; i++) {
		struct lb_opts o = small("declock");
		struct lb_result r;

		o.mutate = mut(names[i]);
		o.timeout_ms = 100;
		o.read_pct = i ? 0 : 50;
		o.ops = 60;
		cr_assert_eq(lb_run(&o, &r), 0);
		cr_assert_gt(r.violations, 0, "%s slipped past the checker", names[i]);
		cr_assert_not_null(strstr(r.violation, says[i]), "%s: %s", names[i], r.violation);
		if (i == 0)
			cr_assert_gt(r.excl_violations, 0, "readers behind a holding writer went unseen");
	}
}

/*
 * A grant of epoch 0 reaches a coordinator waiting at epoch 1 (after a reset): dropped,
 * unless stale_epoch_grant accepts it.
 */
static int stale_grant(uint64_t mutate)
{
	struct lock_svc_cfg cfg = { .type = "declock", .n_cn = 1, .n_locks = 4, .mutate = mutate };
	struct remora_transport *tp;
	struct remora_chan *ch;
	struct lock_svc *s;
	struct lock_cli *waiter, *releaser;
	char cluster[48];
	int state;

	struct remora_transport_cfg tcfg = { .size = sizeof(tcfg), .self_cn = 0, .numa_node = -1,
					     .cluster = cluster };

	snprintf(cluster, sizeof(cluster), "lockstale-%ld", (long)getpid());
	cr_assert_eq(remora_transport_open(&tcfg, &tp), 0);
	cr_assert_eq(remora_chan_open(tp, &ch), 0);
	cr_assert_eq(lock_svc_create(&cfg, &s), 0, "%s", lock_errmsg());
	cr_assert_eq(lock_cli_open(s, ch, NULL, 0, &waiter), 0);
	cr_assert_eq(lock_cli_open(s, ch, NULL, 1, &releaser), 0);
	cr_assert_eq(lock_reset_broadcast(releaser, 2), 0); /* epoch 0 -> 1 */
	lock_wait_arm(waiter, 2);
	cr_assert_eq(waiter->w.epoch, 1);
	cr_assert_eq(lock_grant(releaser, 2, 0, 0, 0, 0), 0);
	state = waiter->w.state;
	lock_cli_close(waiter);
	lock_cli_close(releaser);
	lock_svc_destroy(s);
	remora_chan_close(ch);
	remora_transport_close(tp);
	return state;
}

Test(lock, stale_epoch_grant_dropped_and_mutation_caught)
{
	cr_assert_eq(stale_grant(0), LOCK_W_WAITING, "a stale grant must be dropped");
	cr_assert_eq(stale_grant(mut("stale_epoch_grant")), LOCK_W_GRANTED,
		     "the mutation must let the stale grant through");
}

/*
 * Node 0's four writers keep one lock busy among themselves; node 1's writers wait on it. A
 * local hand-off goes only to a waiter earlier than the earliest remote one, so node 1 gets
 * its turn: the lock crosses between the nodes by grant messages, with no timeout (543 to
 * 1.2 million crossings in runs by hand, fewer on a loaded host, where a node whose thread
 * waits for a core has no waiter queued, and the lock crosses when it falls free: one idle run
 * had 4 grant messages, no timeout, and node 1 at 29%; the test wants 10 grants per timeout
 * and at least one), and node 1's share of the acquisitions was 25-43%. On an idle 2-core host
 * it was 2.5-3.5% in 3 runs of 7, with 100K-220K grants sent, the code of the last release too
 * (why is open: the nodes' timestamps, which rule the hand-off, are one 16-bit clock); the test
 * wants 1%: node 1 is not starved. With local_ignores_remote the
 * node that holds the lock passes it around for ever; it crosses only when a waiter of the
 * other node times out (2.5 s) and resets it: 1 grant message and 1 timeout in 3.7 to 19
 * million acquisitions. (Which node gets more then depends on when the reset came: one run
 * gave node 1 14%.) Counts, not the absence of timeouts, are the test: a loaded host (under
 * AddressSanitizer, beside other suites) once kept a fair waiter over 1 s, and once over
 * 2.5 s, in a 4 s run; the failure message gives the lock statistics.
 */
static struct lb_result one_hot_lock(uint64_t mutate)
{
	struct lb_opts o = small("declock-tf");
	struct lb_result r;

	o.cns = 2;
	o.coros = 4;
	o.locks = 1;
	o.read_pct = 0;
	o.cap_log2 = 2;
	o.entry_delay_us = 0;
	o.ops = 0;
	o.duration = 4;
	o.timeout_ms = 2500;
	o.mutate = mutate;
	cr_assert_eq(lb_run(&o, &r), 0);
	cr_assert_eq(r.violations, 0, "%s", r.violation);
	return r;
}

/* The lock statistics, for a failure's message. */
static void lock_stats_line(const struct lb_result *r, char *buf, size_t len)
{
	snprintf(buf, len,
		 "%llu acquisitions, the least node %llu; %llu timeouts; %llu local grants; p999 "
		 "%llu us; grants sent %llu dropped %llu lost %llu; resets %llu, overflows %llu, "
		 "wraps %llu, reset_acq %llu",
		 (unsigned long long)r->ops, (unsigned long long)r->ops_least_node,
		 (unsigned long long)r->st.timeouts, (unsigned long long)r->st.local_grants,
		 (unsigned long long)(r->p999_ns / 1000), (unsigned long long)r->st.grants_sent,
		 (unsigned long long)r->st.grants_dropped, (unsigned long long)r->st.grants_lost,
		 (unsigned long long)r->st.resets, (unsigned long long)r->st.overflows,
		 (unsigned long long)r->st.wraps, (unsigned long long)r->st.reset_acq);
}

Test(lock, local_hand_off_yields_to_earlier_remote_waiter)
{
	struct lb_result r = one_hot_lock(0);
	char line[400];

	lock_stats_line(&r, line, sizeof(line));
	cr_assert_gt(r.st.local_grants, 0, "%s", line);
	cr_assert_gt(r.st.grants_sent, 0, "%s", line);
	cr_assert_geq(r.ops_least_node * 100, r.ops, "a node got under 1%% of the lock: %s", line);
	cr_assert_geq(r.st.grants_sent, 10 * r.st.timeouts,
		      "the lock crossed nodes mostly through timeouts: %s", line);
	r = one_hot_lock(mut("local_ignores_remote"));
	lock_stats_line(&r, line, sizeof(line));
	cr_assert_leq(r.st.grants_sent, 2 * (r.st.timeouts + 1),
		      "local_ignores_remote must keep the lock on one node until a waiter of "
		      "the other times out: %s", line);
}

/* One memory node of 4 KiB in this process, a channel to it and a lock service over it. */
struct one_mn {
	struct remora_transport *tp;
	struct remora_pool *pool;
	struct remora_chan *ch;
	struct lock_svc *svc;
	char cluster[48];
};

static void one_mn_open(struct one_mn *m, const char *tag, struct lock_svc_cfg *cfg)
{
	struct remora_pool_spec spec = { .size = sizeof(spec), .node = 0, .bytes = 4096,
					 .flags = REMORA_POOL_CREATE | REMORA_POOL_EXCL |
						  REMORA_POOL_UNLINK_ON_CLOSE };
	struct remora_transport_cfg tcfg = { .size = sizeof(tcfg), .self_cn = 0, .numa_node = -1,
					     .cluster = m->cluster };
	struct remora_node_desc desc;

	snprintf(m->cluster, sizeof(m->cluster), "%s-%ld", tag, (long)getpid());
	cr_assert_eq(remora_transport_open(&tcfg, &m->tp), 0);
	cr_assert_eq(remora_pool_open(m->tp, &spec, &m->pool), 0);
	cr_assert_eq(remora_pool_reg(m->pool, 0, spec.bytes, &cfg->rkey), 0);
	cr_assert_eq(remora_pool_describe(m->pool, &desc), 0);
	cr_assert_eq(remora_transport_attach(m->tp, &desc), 0);
	cr_assert_eq(remora_chan_open(m->tp, &m->ch), 0);
	cfg->base = remora_gaddr_make(0, 0);
	cr_assert_eq(lock_svc_create(cfg, &m->svc), 0, "%s", lock_errmsg());
}

static void one_mn_close(struct one_mn *m)
{
	lock_svc_destroy(m->svc);
	remora_chan_close(m->ch);
	remora_pool_close(m->pool, true);
	remora_transport_close(m->tp);
}

/*
 * A reader's release whose successor place shows no valid entry refetches the queue; while it
 * backs off, the lock moves on by C places. Flat declock, C = 4, on one node; the other
 * acquirers are played by hand with raw verbs on a second channel (entries laid out as in
 * lock_cql.c): reader holders at 0 (the releaser) and 1 (no entry: granted at once), a writer
 * at 2 whose entry is late. Once the releaser's FAA and READ are done, reader 1 leaves, the
 * writer's entry lands and the writer leaves, writers take 3 (at once), 4 and 5 (entries in
 * the slots of 0 and 1). The releaser's next READ finds place 1's slot reused: the head went
 * past its successor, a reader, so there is nothing to grant and nothing to reset. The
 * mutation reuse_is_overflow takes the reused slot for an overwrite and resets the lock (the
 * hierarchical test's rare reset on a loaded host: declock_hierarchical_tf_and_pf).
 */
#define RU_S (UINT64_C(1) << 20)
#define RU_X (RU_S + (UINT64_C(1) << 8))
#define RU_POP (UINT64_C(1) << 32)

struct reuse_run {
	struct lock_cli *c;
	struct lock_hold h;
	struct remora_chan *ch2;
	remora_gaddr a;
	uint32_t rkey;
	int rc, drv_rc;
};

/* Place i's entry: writer, compute node 0, coordinator coord, epoch 0, version i / C inverted. */
static uint64_t ru_entry(uint64_t i, unsigned coord)
{
	return ((i >> 2) ^ 0xffffu) | UINT64_C(1) << 40 | (uint64_t)coord << 48;
}

static void ru_release(void *arg)
{
	struct reuse_run *u = arg;

	u->rc = lock_release(u->c, &u->h);
}

/* Raw verbs on a channel of its own: they complete at once, without yielding. */
static int ru_faa(struct reuse_run *u, uint64_t add)
{
	uint64_t old;

	return remora_faa(u->ch2, u->a, u->rkey, add, &old);
}

static int ru_write(struct reuse_run *u, uint64_t i, unsigned coord)
{
	uint64_t e = ru_entry(i, coord);

	return remora_write(u->ch2, u->a + 8 + 8 * (i & 3), u->rkey, &e, 8);
}

static void ru_others(void *arg)
{
	struct reuse_run *u = arg;
	uint64_t h = 0;
	int rc = 0;

	while (!rc && h >> 32 != 1) { /* until the release's FAA popped place 0 */
		rc = remora_read(u->ch2, u->a, u->rkey, &h, 8);
		remora_yield();
	}
	rc = rc ? rc : ru_faa(u, RU_POP - RU_S);             /* reader 1 leaves */
	rc = rc ? rc : ru_write(u, 2, 2);                    /* the writer's late entry */
	rc = rc ? rc : ru_faa(u, RU_POP - RU_X);             /* the writer leaves */
	rc = rc ? rc : ru_faa(u, RU_X);                      /* 3: at once, no entry */
	rc = rc ? rc : ru_faa(u, RU_X);                      /* 4 */
	rc = rc ? rc : ru_write(u, 4, 3);
	rc = rc ? rc : ru_faa(u, RU_X);                      /* 5: in place 1's slot */
	rc = rc ? rc : ru_write(u, 5, 4);
	u->drv_rc = rc;
}

static struct lock_stats reuse_case(uint64_t mutate, uint64_t *header)
{
	struct lock_svc_cfg cfg = { .type = "declock", .n_cn = 1, .n_locks = 1, .cap_log2 = 2,
				    .timeout_ms = 5000, .mutate = mutate };
	struct one_mn m;
	struct remora_sched *sched;
	struct lock_stats st;
	struct reuse_run u = { 0 };

	one_mn_open(&m, "lockreuse", &cfg);
	cr_assert_eq(remora_chan_open(m.tp, &u.ch2), 0);
	u.a = cfg.base;
	u.rkey = cfg.rkey;
	cr_assert_eq(lock_cli_open(m.svc, m.ch, NULL, 0, &u.c), 0);
	cr_assert_eq(lock_format(u.c), 0);
	cr_assert_eq(lock_acquire(u.c, 0, LOCK_S, &u.h), 0);     /* place 0 */
	cr_assert_eq(ru_faa(&u, RU_S), 0);                        /* 1: a reader, at once */
	cr_assert_eq(ru_faa(&u, RU_X), 0);                        /* 2: a writer, entry late */
	cr_assert_eq(remora_sched_create(m.ch, 0, &sched), 0);
	cr_assert_eq(remora_sched_spawn(sched, ru_release, &u), 0);
	cr_assert_eq(remora_sched_spawn(sched, ru_others, &u), 0);
	cr_assert_eq(remora_sched_run(sched), 0);
	cr_assert_eq(u.rc, 0);
	cr_assert_eq(u.drv_rc, 0);
	cr_assert_eq(remora_read(m.ch, u.a, u.rkey, header, 8), 0);
	lock_cli_stats(u.c, &st);
	remora_sched_destroy(sched);
	lock_cli_close(u.c);
	remora_chan_close(u.ch2);
	one_mn_close(&m);
	return st;
}

Test(lock, reader_release_after_queue_reuse_resets_nothing)
{
	uint64_t h;
	struct lock_stats st = reuse_case(0, &h);

	cr_assert_gt(st.refetches, 0, "the release never refetched: the scenario did not happen");
	cr_assert_eq(st.resets, 0, "a reused slot behind the head was taken for an overwrite");
	cr_assert_eq(h, 3ull << 32 | 3ull << 20 | 3ull << 8, "header %#llx: writers 3, 4, 5 queued",
		     (unsigned long long)h);
	st = reuse_case(mut("reuse_is_overflow"), &h);
	cr_assert_eq(st.resets, 1, "reuse_is_overflow must reset the lock");
	cr_assert_eq(h, 0, "the reset clears the header");
}

/*
 * A grant reaches a coordinator between its FAA and the moment it sees the FAA's result: one
 * left in the message segment by an earlier incarnation (a whole-cluster crash kills every
 * process, the segment stays, and the restarted processes number coordinators and reset epochs
 * from 0 again), here played by a second client of the node. The lock is free, so the FAA
 * took place 0: the acquirer holds at once, and must keep that place. Before the fix it took
 * the grant for a reason to retry and left place 0 stranded (counted in the header, never
 * released): its own second attempt, and in a cluster every later acquirer of the lock, waited
 * behind it until a timeout reset the lock (the 20 s stalls of recovery/crash_kvs_declock).
 * tag: the grant's place (lock_place_tag of a place of the earlier incarnation, or 0: any).
 */
struct early_run {
	struct lock_cli *c, *other;
	struct lock_hold h;
	struct remora_chan *ch2;
	remora_gaddr a;
	uint32_t rkey, tag;
	int rc, drv_rc;
};

static void eg_acquire(void *arg)
{
	struct early_run *u = arg;

	u->rc = lock_acquire(u->c, 0, LOCK_X, &u->h);
}

static void eg_grant(void *arg)
{
	struct early_run *u = arg;
	uint64_t h = 0;
	int rc = 0;

	while (!rc && !(h >> 20 & 0xfff)) { /* until the acquirer's FAA landed */
		rc = remora_read(u->ch2, u->a, u->rkey, &h, 8);
		if (!rc && !(h >> 20 & 0xfff))
			remora_yield();
	}
	u->drv_rc = rc ? rc : lock_grant_place(u->other, 0, 0, 0, 0, -1, u->tag);
}

static struct lock_stats early_case(uint64_t mutate, uint32_t tag, uint64_t *header)
{
	struct lock_svc_cfg cfg = { .type = "declock", .n_cn = 1, .n_locks = 1, .cap_log2 = 2,
				    .timeout_ms = 100, .mutate = mutate };
	struct early_run u = { .tag = tag };
	struct remora_sched *sched;
	struct lock_stats st;
	struct one_mn m;

	one_mn_open(&m, "lockearly", &cfg);
	cr_assert_eq(remora_chan_open(m.tp, &u.ch2), 0);
	u.a = cfg.base;
	u.rkey = cfg.rkey;
	cr_assert_eq(lock_cli_open(m.svc, m.ch, NULL, 0, &u.c), 0);
	cr_assert_eq(lock_cli_open(m.svc, m.ch, NULL, 1, &u.other), 0);
	cr_assert_eq(lock_format(u.c), 0);
	cr_assert_eq(remora_sched_create(m.ch, 0, &sched), 0);
	cr_assert_eq(remora_sched_spawn(sched, eg_acquire, &u), 0);
	cr_assert_eq(remora_sched_spawn(sched, eg_grant, &u), 0);
	cr_assert_eq(remora_sched_run(sched), 0);
	cr_assert_eq(u.rc, 0);
	cr_assert_eq(u.drv_rc, 0);
	lock_cli_stats(u.c, &st);
	cr_assert_eq(lock_release(u.c, &u.h), 0);
	cr_assert_eq(remora_read(m.ch, u.a, u.rkey, header, 8), 0);
	remora_sched_destroy(sched);
	lock_cli_close(u.other);
	lock_cli_close(u.c);
	remora_chan_close(u.ch2);
	one_mn_close(&m);
	return st;
}

Test(lock, grant_before_entry_keeps_the_place)
{
	uint32_t stale = lock_place_tag(9); /* a place of the earlier incarnation */
	uint64_t h;
	struct lock_stats st;

	for (unsigned k = 0; k < 2; k++) { /* a grant naming another place, and one naming none */
		st = early_case(0, k ? 0 : stale, &h);
		cr_assert_eq(st.grants_dropped, 1, "the early grant was not seen: no scenario");
		cr_assert_eq(st.timeouts + st.resets + st.reset_acq, 0,
			     "timeouts %lu resets %lu: the place taken was left stranded",
			     (unsigned long)st.timeouts, (unsigned long)st.resets);
		cr_assert_eq(h, 1ull << 32, "header %#llx: one place taken, popped by the release",
			     (unsigned long long)h);
	}
	/* Each check alone keeps the place; both off is the code before the fix. */
	st = early_case(mut("grant_ignores_place"), stale, &h);
	cr_assert_eq(st.timeouts + st.resets, 0);
	st = early_case(mut("early_grant_abandons_place"), 0, &h);
	cr_assert_eq(st.timeouts, 1, "early_grant_abandons_place must strand place 0");
	cr_assert_eq(st.resets, 1, "the waiter behind the stranded place resets the lock");
	st = early_case(mut("early_grant_abandons_place") | mut("grant_ignores_place"), stale, &h);
	cr_assert_eq(st.timeouts, 1, "a stale grant taken must strand place 0");
	cr_assert_eq(st.resets, 1);
}

/*
 * A waiter with its entry at place 5 takes a grant naming place 5 only: one naming place 69
 * (same slot, next lap: what a leftover grant of an earlier incarnation can carry) is
 * dropped, unless grant_ignores_place accepts it.
 */
static int placed_grant(uint64_t mutate, uint64_t grant_for)
{
	struct lock_svc_cfg cfg = { .type = "declock", .n_cn = 1, .n_locks = 4, .mutate = mutate };
	struct one_mn m;
	struct lock_cli *waiter, *releaser;
	int state;

	one_mn_open(&m, "lockplace", &cfg);
	cr_assert_eq(lock_cli_open(m.svc, m.ch, NULL, 0, &waiter), 0);
	cr_assert_eq(lock_cli_open(m.svc, m.ch, NULL, 1, &releaser), 0);
	lock_wait_arm(waiter, 2);
	waiter->w.place = lock_place_tag(5);
	cr_assert_eq(lock_grant_place(releaser, 2, 0, 0, 0, -1, lock_place_tag(grant_for)), 0);
	state = waiter->w.state;
	lock_cli_close(waiter);
	lock_cli_close(releaser);
	one_mn_close(&m);
	return state;
}

Test(lock, grant_for_another_place_dropped_and_mutation_caught)
{
	cr_assert_eq(placed_grant(0, 5), LOCK_W_GRANTED, "the waiter's own grant");
	cr_assert_eq(placed_grant(0, 69), LOCK_W_WAITING, "a grant for another place must drop");
	cr_assert_eq(placed_grant(mut("grant_ignores_place"), 69), LOCK_W_GRANTED,
		     "the mutation must let the grant for another place through");
}

/* ---- the command ------------------------------------------------------------------------- */

static int run_cmd(const char *args)
{
	char buf[512], *argv[40], *save = NULL;
	int argc = 0;

	snprintf(buf, sizeof(buf), "lockbench %s", args);
	for (char *t = strtok_r(buf, " ", &save); t && argc < 39; t = strtok_r(NULL, " ", &save))
		argv[argc++] = t;
	argv[argc] = NULL;
	return cmd_lockbench(argc, argv);
}

Test(lock, lockbench_command)
{
	char path[64], args[256], body[8192] = { 0 };
	FILE *f;

	snprintf(path, sizeof(path), "/tmp/remora-test-lockbench-%ld.json", (long)getpid());
	snprintf(args, sizeof(args), "--cns 2 --coros 3 --locks 20 --ops 40 --check --json %s "
				     "--sweep lock=declock-tf,caslock,dslr,shiftlock", path);
	cr_assert_eq(run_cmd(args), 0);
	f = fopen(path, "r");
	cr_assert_not_null(f);
	cr_assert_gt(fread(body, 1, sizeof(body) - 1, f), 0);
	fclose(f);
	unlink(path);
	cr_assert_not_null(strstr(body, "\"declock-tf\""));
	cr_assert_not_null(strstr(body, "\"caslock\""));
	cr_assert_not_null(strstr(body, "\"dslr\""));
	cr_assert_not_null(strstr(body, "\"shiftlock\""));
	cr_assert_not_null(strstr(body, "\"mn_ops_per_acq\""));
	cr_assert_not_null(strstr(body, "\"refetches_per_rel\""));
	cr_assert_not_null(strstr(body, "\"reset_fraction\""));
	cr_assert_not_null(strstr(body, "\"p999_ns\""));
	cr_assert_eq(run_cmd("--lock spinlock"), 2);
	cr_assert_eq(run_cmd("--read-ratio 101"), 2);
	cr_assert_eq(run_cmd("--theta x"), 2);
	cr_assert_eq(run_cmd("--sweep colour=1"), 2);
	cr_assert_eq(run_cmd("--ops 5 --duration 1"), 2);
	cr_assert_eq(run_cmd("--kill cn5@0.1 --cns 2"), 2);
	cr_assert_eq(run_cmd("--kill 1@x"), 2);
	cr_assert_eq(run_cmd("--kill 1@0.5 --duration 0.2"), 2);
	cr_assert_eq(run_cmd("--ver-bits 1"), 2);
	cr_assert_eq(run_cmd("--help"), 0);
}

/* The down mask has 64 bits: a 65th compute node could never be declared down. */
Test(lock, more_than_64_compute_nodes_refused)
{
	struct lock_svc_cfg cfg = { .type = "declock", .cn = 0, .n_cn = 65, .n_locks = 4 };
	struct lock_svc *s = NULL;

	cr_assert_eq(lock_svc_create(&cfg, &s), -EINVAL);
	cr_assert_not_null(strstr(lock_errmsg(), "<= 64"), "%s", lock_errmsg());
}

/*
 * A shiftlock client keeps one successor slot: taking a second lock in X while holding one
 * would wipe the first lock's successor notice and wedge it. The second X acquire is refused
 * (-EDEADLK); S stays allowed; after the release the second lock can be taken.
 */
Test(lock, shiftlock_second_x_refused)
{
	struct lock_svc_cfg cfg = { .type = "shiftlock", .n_cn = 1, .n_locks = 4,
				    .timeout_ms = 100 };
	struct one_mn m;
	struct lock_cli *c;
	struct lock_hold h1, h2, h3;

	one_mn_open(&m, "lockshift", &cfg);
	cr_assert_eq(lock_cli_open(m.svc, m.ch, NULL, 0, &c), 0);
	cr_assert_eq(lock_format(c), 0);
	cr_assert_eq(lock_acquire(c, 1, LOCK_X, &h1), 0);
	cr_assert_eq(lock_acquire(c, 2, LOCK_X, &h2), -EDEADLK,
		     "a second X shiftlock would wipe lock 1's successor notice");
	cr_assert_eq(lock_acquire(c, 3, LOCK_S, &h3), 0, "S keeps no successor slot");
	cr_assert_eq(lock_release(c, &h3), 0);
	cr_assert_eq(lock_release(c, &h1), 0);
	cr_assert_eq(lock_acquire(c, 2, LOCK_X, &h2), 0);
	cr_assert_eq(lock_release(c, &h2), 0);
	lock_cli_close(c);
	one_mn_close(&m);
}

/* ---- the public API (<remora/lock.h>) ------------------------------------------------------ */

/*
 * Bad configurations are refused with a reason; one uncontended X acquisition and its release
 * on flat declock cost the paper's verbs (1 FAA; FAA + READ of the queue in one doorbell), and
 * a lock out of range is refused without a verb.
 */
Test(lock_api, config_errors_and_exact_counts)
{
	struct lock_svc_cfg icfg = { .type = "declock", .n_cn = 1, .n_locks = 8 };
	struct remora_lock_cfg cfg = { .size = sizeof(cfg), .type = "declock", .n_cn = 1,
				       .n_locks = 8 };
	struct remora_lock_svc *s = NULL;
	struct remora_lock_cli *c = NULL;
	struct remora_lock_counts n;
	struct remora_lock_hold h;
	struct one_mn m;

	one_mn_open(&m, "lockapi", &icfg);
	cfg.base = icfg.base;
	cfg.rkey = icfg.rkey;
	cr_assert_eq(remora_lock_svc_create(&(struct remora_lock_cfg){ .size = 4 }, &s), -EINVAL);
	cfg.type = "nosuch";
	cr_assert_eq(remora_lock_svc_create(&cfg, &s), -ENOENT);
	cr_assert(strstr(remora_lock_errmsg(), "nosuch"), "%s", remora_lock_errmsg());
	cfg.type = "declock";
	cr_assert_eq(remora_lock_stride("nosuch"), 0);
	cr_assert_eq(remora_lock_stride("declock"), lock_type_stride("declock", 3));
	cr_assert_eq(remora_lock_svc_create(&cfg, &s), 0, "%s", remora_lock_errmsg());
	cr_assert_eq(remora_lock_cli_open(s, m.ch, NULL, 1, &c), 0);
	cr_assert_eq(remora_lock_format(c), 0);
	cr_assert_eq(remora_lock_acquire(c, 8, REMORA_LOCK_X, &h), -EINVAL);
	cr_assert_eq(remora_lock_acquire(c, 0, (enum remora_lock_mode)7, &h), -EINVAL);
	cr_assert_eq(remora_lock_acquire(c, 3, REMORA_LOCK_X, &h), 0);
	cr_assert_eq(h.lock, 3);
	cr_assert_eq(remora_lock_release(c, &h), 0);
	remora_lock_counts(c, &n);
	cr_assert_eq(n.acquires, 1);
	cr_assert_eq(n.releases, 1);
	cr_assert_eq(n.acquire_verbs, 1, "acquire verbs %llu", (unsigned long long)n.acquire_verbs);
	cr_assert_eq(n.release_verbs, 2, "release verbs %llu", (unsigned long long)n.release_verbs);
	cr_assert_eq(n.waited + n.resets, 0);
	remora_lock_cli_close(c);
	remora_lock_svc_destroy(s);
	one_mn_close(&m);
}

/*
 * The speculative READ (lock_acquire_riding): an S holder's first READ rides on the
 * acquisition and counts only when the acquisition was decided by that doorbell, at once; the
 * checker then READs again under the same hold, and a writer in between (unique values) shows.
 * Some rides count and some do not (readers wait behind writers on 4 hot locks); every verb
 * is still counted. The negative control ride_always_valid counts the READ of a reader that
 * waited, which may have landed before the writer ahead of it wrote: caught within 5 runs.
 */
static struct lb_opts ride_opts(const char *type)
{
	struct lb_opts o = small(type);

	o.ride = true;
	o.read_pct = 60;
	return o;
}

Test(lock, riding_read_counts_only_when_the_grant_was_at_once)
{
	static const char *const types[] = { "declock", "declock-tf", "caslock", "dslr" };

	for (unsigned i = 0; i < sizeof(types) / sizeof(*types); i++) {
		struct lb_opts o = ride_opts(types[i]);
		struct lb_result r;

		run_ok(&o, &r);
		verbs_exact(&r);
		cr_assert_gt(r.rides_valid, 0, "%s: no ride counted", types[i]);
		cr_assert_lt(r.rides_valid, r.rides, "%s: every ride counted (no reader waited?)",
			     types[i]);
	}
}

Test(lock, riding_read_mutation_caught)
{
	struct lb_opts o = ride_opts("declock");
	struct lb_result r;
	uint64_t caught = 0;

	o.mutate = mut("ride_always_valid");
	for (unsigned run = 0; run < 5 && !caught; run++) {
		o.seed = run + 1;
		cr_assert_eq(lb_run(&o, &r), 0);
		caught = r.violations;
	}
	cr_assert_gt(caught, 0, "a ride counted after a wait must be seen stale");
	cr_assert(strstr(r.violation, "rode the acquisition"), "%s", r.violation);
}
