/* SPDX-License-Identifier: MIT */
/*
 * Online recovery of a failed compute node, end to end through `remora run --cn 3` (shm):
 * compute node 1 dies with SIGKILL while the others run; the memory nodes declare it dead, a
 * live compute node fences it everywhere, recovers its logs and publishes its failed ids;
 * the survivors steal its stray locks and keep committing; the store passes `--check`.
 *
 *   crash_mid_commit     cn 1 kills itself between its commit WRITEs (a partly applied
 *                        commit: recovery rolls it back). The survivors run a fixed number
 *                        of transactions each (--txns): every one retries until it commits,
 *                        so they finish only if cn 1's locks on the hottest keys were stolen.
 *   ..._unpublished      negative control: the recovery never publishes the failed ids
 *                        (REMORA_MUTATE=unpublished_failure): cn 1's locks stay and the
 *                        check reports a leaked lock.
 *   sigkill_timed        `--kill cn0@1s`: SIGKILL from outside at a random point (cn 0:
 *                        the check afterwards opens the database with the dead node's id).
 *   ford_says_so         FORD has no online recovery, and says so.
 *   motor_*              the same for motor (its online recovery scans for the dead node's
 *                        locks; negative control motor_online_keeps_locks).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "cutil.h"

TestSuite(online, .timeout = 180);

#define RUN_MS 120000

/* The "back" count of the recovery line ("... logs (F forward, B back, ..."), or -1. */
static long backs(const char *err)
{
	const char *p = strstr(err, "recovered here: ");
	long f = -1, b = -1, logs = -1;

	if (!p || sscanf(p, "recovered here: %ld logs (%ld forward, %ld back", &logs, &f, &b) != 3)
		return -1;
	return b;
}

static void run_online(struct cu_proc *p, const char *proto, const char *kill, bool die_mid,
		       const char *const *tail, int want)
{
	const char *argv[40] = { "remora", "run", "--mn", "2", "--cn", "3", "--protocol", proto,
				 "--kill", kill };
	unsigned n = 10;
	int rc;

	if (die_mid) {
		argv[n++] = "--cn-env";
		argv[n++] = "1:REMORA_DIE_AT=txn.commit_mid:2000";
	}
	argv[n++] = "bench";
	argv[n++] = "--workload";
	argv[n++] = "kvs";
	argv[n++] = "--check";
	for (unsigned i = 0; tail[i]; i++)
		argv[n++] = tail[i];
	argv[n] = NULL;
	rc = cu_run(p, argv, RUN_MS);
	if (want >= 0) /* FORD: its check may or may not see a lock the dead node left */
		cr_assert_eq(rc, want, "exit %d, not %d\n--- stdout\n%s\n--- stderr\n%s", rc, want,
		     p->out, p->err);
}

Test(online, crash_mid_commit)
{
	static const char *const tail[] = { "--txns", "2500", NULL };
	struct cu_proc p;

	run_online(&p, "pandora", "cn1@crash", true, tail, 0);
	cr_assert(strstr(p.err, "declared dead"), "%s", p.err);
	cr_assert_geq(backs(p.err), 1, "no rolled-back log:\n%s", p.err);
	cr_assert(strstr(p.out, "(2 of 2 compute nodes reported)"), "%s", p.out);
	cr_assert(strstr(p.out, "check          ok"), "%s", p.out);
	cu_free(&p);
}

Test(online, crash_mid_commit_unpublished)
{
	/* 3 s: on a loaded host cn 1 may need more than 1 s to reach its 2000th commit */
	static const char *const tail[] = { "--duration", "3", "--warmup", "0", NULL };
	struct cu_proc p;

	setenv("REMORA_MUTATE", "unpublished_failure", 1);
	run_online(&p, "pandora", "cn1@crash", true, tail, 1);
	unsetenv("REMORA_MUTATE");
	cr_assert(strstr(p.out, "VIOLATION") && strstr(p.out, "stays locked"), "%s", p.out);
	/* the message names the holder: a coordinator the check does not count as failed */
	cr_assert(strstr(p.out, "its owner is not among the failed ids"), "%s", p.out);
	cu_free(&p);
}

/*
 * Motor: cn 1 dies between its commit WRITEs (logged: a decided commit, half applied). A
 * survivor recovers it online (rolls the log forward, releases its locks by a scan, drops its
 * GC horizon entry) while the others keep committing; every survivor transaction retries until
 * it commits, so they finish only if cn 1's locks on the hottest keys were released.
 */
Test(online, motor_crash_mid_commit)
{
	static const char *const tail[] = { "--txns", "2500", NULL };
	struct cu_proc p;

	run_online(&p, "motor", "cn1@crash", true, tail, 0);
	cr_assert(strstr(p.err, "declared dead"), "%s", p.err);
	cr_assert(strstr(p.err, "recovered here"), "%s", p.err);
	cr_assert(strstr(p.out, "(2 of 2 compute nodes reported)"), "%s", p.out);
	cr_assert(strstr(p.out, "check          ok"), "%s", p.out);
	cu_free(&p);
}

/*
 * Negative control: the online recovery leaves cn 1's locks held; the check reports them. Three
 * seconds: on a loaded host cn 1 may need more than one to reach its 2000th commit.
 */
Test(online, motor_crash_mid_commit_keeps_locks)
{
	static const char *const tail[] = { "--duration", "3", "--warmup", "0", NULL };
	struct cu_proc p;

	setenv("REMORA_MUTATE", "motor_online_keeps_locks", 1);
	run_online(&p, "motor", "cn1@crash", true, tail, 1);
	unsetenv("REMORA_MUTATE");
	cr_assert(strstr(p.out, "VIOLATION") && strstr(p.out, "stays locked"), "%s", p.out);
	cu_free(&p);
}

/*
 * LOTUS: cn 1 dies between its commit WRITEs (one replica stamped, the others INVISIBLE). A
 * survivor recovers it online from its logs (rolls that commit forward), the survivors drop
 * its coordinators' holds from their lock tables and take its shards over; counted runs finish
 * only if its shards are served again and its holds are gone.
 */
Test(online, lotus_crash_mid_commit)
{
	static const char *const tail[] = { "--txns", "2500", NULL };
	struct cu_proc p;

	run_online(&p, "lotus", "cn1@crash", true, tail, 0);
	cr_assert(strstr(p.err, "recovered here"), "%s", p.err);
	cr_assert(strstr(p.err, "its locks dropped by the survivors"), "%s", p.err);
	cr_assert(strstr(p.err, "lotus: took over"), "%s", p.err);
	cr_assert_null(strstr(p.err, "still held at close"), "%s", p.err);
	cr_assert(strstr(p.out, "(2 of 2 compute nodes reported)"), "%s", p.out);
	cr_assert(strstr(p.out, "check          ok"), "%s", p.out);
	cu_free(&p);
}

/* Negative control: the survivors keep the dead coordinators' holds; they say so at close. */
Test(online, lotus_crash_mid_commit_keeps_holds)
{
	static const char *const tail[] = { "--duration", "3", "--warmup", "0", NULL };
	struct cu_proc p;

	setenv("REMORA_MUTATE", "lotus_online_keeps_holds", 1);
	run_online(&p, "lotus", "cn1@crash", true, tail, -1);
	unsetenv("REMORA_MUTATE");
	cr_assert(strstr(p.err, "still held at close"), "%s", p.err);
	cu_free(&p);
}

/* LOTUS under `--kill cn0@1s`: SIGKILL from outside at a random point, recovered online. */
Test(online, lotus_sigkill_timed)
{
	static const char *const tail[] = { "--duration", "2", "--warmup", "0", NULL };
	struct cu_proc p;

	run_online(&p, "lotus", "cn0@1s", false, tail, 0);
	cr_assert(strstr(p.err, "killed with SIGKILL"), "%s", p.err);
	cr_assert(strstr(p.err, "recovered here"), "%s", p.err);
	cr_assert(strstr(p.err, "lotus: took over"), "%s", p.err);
	cr_assert(strstr(p.out, "check          ok"), "%s", p.out);
	cu_free(&p);
}

/*
 * Two compute nodes die at once (`--kill cn0+2@1s` of 3): the last one recovers both online,
 * each from its own logs and claim, takes over both nodes' shards, and the check holds. The
 * two leases may run out in different passes of the survivor's watch: then cn 0's shards
 * are shared with cn 2, still alive in that view, and taken again when it is declared dead,
 * in two takeover lines.
 */
Test(online, lotus_two_die_at_once)
{
	static const char *const tail[] = { "--duration", "2", "--warmup", "0", NULL };
	struct cu_proc p;
	const char *first;

	run_online(&p, "lotus", "cn0+2@1s", false, tail, 0);
	first = strstr(p.err, "recovered here");
	cr_assert(strstr(p.err, "cn 0 (pid") && strstr(p.err, "cn 2 (pid"), "%s", p.err);
	cr_assert(first && strstr(first + 1, "recovered here"), "not two recoveries:\n%s", p.err);
	cr_assert(strstr(p.err, "of dead cn 0, 2;") ||
			  (strstr(p.err, "of dead cn 0;") && strstr(p.err, "of dead cn 2;")),
		  "a dead node's shards not taken over:\n%s", p.err);
	cr_assert_null(strstr(p.err, "still held at close"), "%s", p.err);
	cr_assert(strstr(p.out, "(1 of 1 compute nodes reported)"), "%s", p.out);
	cr_assert(strstr(p.out, "check          ok"), "%s", p.out);
	cu_free(&p);
}

/* A kill list that names a node twice, one beyond --cn, or leaves no survivor: one line, 2. */
Test(online, kill_list_refused)
{
	static const char *const lists[][2] = {
		{ "cn1+1@1s", "bad id list" },
		{ "cn0+3@1s", "compute node 3 named, but cn = 3" },
		{ "cn0+1+2@1s", "no compute node would survive" },
		{ "cn0+x@1s", "bad id list" },
	};

	for (unsigned i = 0; i < sizeof(lists) / sizeof(lists[0]); i++) {
		const char *argv[] = { "remora", "run", "--mn", "1", "--cn", "3", "--kill",
				       lists[i][0], "bench", NULL };
		struct cu_proc p;

		cr_assert_eq(cu_run(&p, argv, 20000), 2, "%s: %s", lists[i][0], p.err);
		cr_assert(strstr(p.err, lists[i][1]), "%s: %s", lists[i][0], p.err);
		cr_assert_eq(strchr(p.err, '\n'), p.err + strlen(p.err) - 1, "one line: %s", p.err);
		cu_free(&p);
	}
}

/* Motor under `--kill cn0@1s`: SIGKILL from outside at a random point, recovered online. */
Test(online, motor_sigkill_timed)
{
	static const char *const tail[] = { "--duration", "2", "--warmup", "0", NULL };
	struct cu_proc p;

	run_online(&p, "motor", "cn0@1s", false, tail, 0);
	cr_assert(strstr(p.err, "killed with SIGKILL"), "%s", p.err);
	cr_assert(strstr(p.err, "recovered here"), "%s", p.err);
	cr_assert(strstr(p.out, "check          ok"), "%s", p.out);
	cu_free(&p);
}

Test(online, sigkill_timed)
{
	static const char *const tail[] = { "--duration", "2", "--warmup", "0", NULL };
	struct cu_proc p;

	run_online(&p, "pandora", "cn0@1s", false, tail, 0); /* --check then opens as cn 0 */
	cr_assert(strstr(p.err, "killed with SIGKILL"), "%s", p.err);
	cr_assert(strstr(p.err, "recovered here"), "%s", p.err);
	cr_assert(strstr(p.out, "check          ok"), "%s", p.out);
	cu_free(&p);
}

/*
 * The survivors must still run when they learn of the death: 2 s for a kill at 0.5 s (with
 * 1 s, a loaded CI host once ended the run before a survivor's watcher saw it).
 */
Test(online, ford_says_so)
{
	static const char *const tail[] = { "--duration", "2", "--warmup", "0", NULL };
	struct cu_proc p;

	run_online(&p, "ford", "cn1@0.5s", false, tail, -1);
	cr_assert(strstr(p.err, "ford has no online recovery"), "%s", p.err);
	cu_free(&p);
}

Test(online, kill_names_a_compute_node)
{
	const char *bad[] = { "remora", "run", "--cn", "2", "--kill", "cn5@1s", "bench", NULL };
	const char *form[] = { "remora", "run", "--kill", "node1@1s", "bench", NULL };
	struct cu_proc p;

	cr_assert_eq(cu_run(&p, bad, 20000), 2);
	cr_assert(strstr(p.err, "--kill cn5: no such compute node"), "%s", p.err);
	cu_free(&p);
	cr_assert_eq(cu_run(&p, form, 20000), 2);
	cr_assert(strstr(p.err, "expected cnI@SECONDS"), "%s", p.err);
	cu_free(&p);
}

/* Blanks and signs are no forms; --kill needs a survivor and is given once. */
Test(online, kill_bad_input)
{
	const char *blank[] = { "remora", "run", "--cn", "2", "--kill", "cn 1@2s", "bench", NULL };
	const char *sign[] = { "remora", "run", "--cn", "2", "--kill", "cn-1@2s", "bench", NULL };
	const char *alone[] = { "remora", "run", "--cn", "1", "--kill", "cn0@1s", "bench", NULL };
	const char *twice[] = { "remora", "run", "--cn", "3", "--kill", "cn0@1s", "--kill",
				"cn1@1s", "bench", NULL };
	const char *twice_bench[] = { "remora", "bench", "--cn", "3", "--kill", "cn0@1s",
				      "--kill", "cn1@1s", NULL };
	const struct {
		const char *const *argv;
		const char *says;
	} cases[] = {
		{ blank, "expected cnI@SECONDS" },
		{ sign, "expected cnI@SECONDS" },
		{ alone, "no compute node would survive" },
		{ twice, "a second --kill of a compute node" },
		{ twice_bench, "a second --kill of a compute node" },
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct cu_proc p;

		cr_assert_eq(cu_run(&p, cases[i].argv, 20000), 2, "%s", p.err);
		cr_assert(strstr(p.err, cases[i].says), "%s", p.err);
		cr_assert_eq(strchr(p.err, '\n'), p.err + strlen(p.err) - 1, "one line: %s", p.err);
		cu_free(&p);
	}
}

/* remora bench takes --kill too (it runs its cluster through remora run). */
Test(online, bench_kill)
{
	const char *argv[] = { "remora", "bench", "--protocol", "pandora", "--mn", "2", "--cn",
			       "3", "--workload", "kvs", "--duration", "1.5", "--warmup", "0",
			       "--check", "--kill", "cn2@0.5s", NULL };
	const char *bad[] = { "remora", "bench", "--kill", "cn2", NULL };
	struct cu_proc p;
	int rc = cu_run(&p, argv, RUN_MS);

	cr_assert_eq(rc, 0, "exit %d\n%s\n%s", rc, p.out, p.err);
	cr_assert(strstr(p.err, "cn 2 (pid") && strstr(p.err, "killed with SIGKILL"), "%s", p.err);
	cr_assert(strstr(p.err, "recovered here"), "%s", p.err);
	cr_assert(strstr(p.out, "check          ok"), "%s", p.out);
	/* the timeline (on with --kill): the survivors saw the death and the recovery */
	cr_assert(strstr(p.out, "  kill           at "), "%s", p.out);
	cr_assert(strstr(p.out, "  recovery       detected ") &&
		  !strstr(p.out, "detected -1") && !strstr(p.out, "recovered -1"), "%s", p.out);
	cu_free(&p);
	cr_assert_eq(cu_run(&p, bad, 20000), 2);
	cr_assert(strstr(p.err, "expected cnI@SECONDS"), "%s", p.err);
	cu_free(&p);
}

/*
 * A killed compute node takes its committed deltas with it: SmallBank's conservation cannot be
 * exact then (it read as a VIOLATION off by the dead node's deltas), so --check says it left
 * it out and still checks that no account stays locked.
 */
Test(online, smallbank_kill_skips_conservation)
{
	const char *argv[] = { "remora", "run", "--mn", "2", "--cn", "3", "--protocol", "pandora",
			       "--kill", "cn1@crash", "--cn-env", "1:REMORA_DIE_AT=txn.logged:300",
			       "bench", "--workload", "smallbank", "--check", "--txns", "2500",
			       NULL };
	struct cu_proc p;
	int rc = cu_run(&p, argv, RUN_MS);

	cr_assert_eq(rc, 0, "exit %d\n%s\n%s", rc, p.out, p.err);
	cr_assert(strstr(p.err, "recovered here"), "%s", p.err);
	cr_assert(strstr(p.out, "no account left locked; conservation not checked"), "%s", p.out);
	cu_free(&p);
}

/*
 * membership = zookeeper: the memory nodes declare nobody dead on their own. The killed
 * node's ZooKeeper session ends after lease_ms, a survivor sees its znode gone without a
 * left mark, fences it ("fenced on request") and recovers it. Needs a ZooKeeper server
 * ($REMORA_TEST_ZK_HOSTS, started by .ci/run) and a build with the client.
 * The lease is 3 s, not the 200 ms the test server allows: on a loaded 2-core host (ASan, a
 * parallel test, the server's JVM) a survivor's own session expired with 500 ms, and with it
 * every node that could recover the dead one. The run lasts past kill + lease + recovery.
 */
Test(online, zookeeper_kill)
{
	const char *hosts = getenv("REMORA_TEST_ZK_HOSTS");
	const char *argv[] = { "remora", "run", "--mn", "2", "--cn", "3", "--protocol", "pandora",
			       "--membership", "zookeeper", "--zk-hosts", hosts, "--lease-ms",
			       "3000", "--kill", "cn1@1s", "bench", "--workload", "kvs",
			       "--duration", "7", "--warmup", "0", "--check", NULL };
	struct cu_proc p;
	int rc;

	if (!hosts || !*hosts)
		cr_skip_test("no ZooKeeper server: set REMORA_TEST_ZK_HOSTS (.ci/run starts one)");
	rc = cu_run(&p, argv, RUN_MS);
	if (rc && strstr(p.err, "no ZooKeeper client")) {
		cu_free(&p);
		cr_skip_test("this build has no ZooKeeper client");
	}
	cr_assert_eq(rc, 0, "exit %d\n%s\n%s", rc, p.out, p.err);
	cr_assert(strstr(p.err, "declared dead: fenced on request"), "%s", p.err);
	cr_assert_not(strstr(p.err, "control connection lost"), "%s", p.err);
	cr_assert(strstr(p.err, "recovered here"), "%s", p.err);
	cr_assert(strstr(p.out, "check          ok"), "%s", p.out);
	cu_free(&p);
}

/* membership = zookeeper without a server (or without the client): one line, exit 1. */
Test(online, zookeeper_unreachable)
{
	const char *argv[] = { "remora", "run", "--mn", "1", "--cn", "1", "--membership",
			       "zookeeper", "--zk-hosts", "127.0.0.1:1", "--connect-ms", "300",
			       "smoke", NULL };
	struct cu_proc p;
	int rc = cu_run(&p, argv, RUN_MS);

	cr_assert_neq(rc, 0, "%s", p.err);
	cr_assert(strstr(p.err, "zookeeper: no server of 127.0.0.1:1 answered within 300 ms") ||
		  strstr(p.err, "this build has no ZooKeeper client"), "%s", p.err);
	cu_free(&p);
}
