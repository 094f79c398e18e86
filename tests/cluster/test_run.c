/* SPDX-License-Identifier: MIT */
/*
 * End to end through the remora binary: the CLI's own promises (help, unknown command,
 * config errors), `remora run --mn 2 --cn 2 smoke`, and cleanup after a compute node is
 * killed, a memory node is killed, and remora run itself is interrupted.
 */
#include <errno.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "cutil.h"

TestSuite(cli, .timeout = 60);
TestSuite(run, .timeout = 120);

static void sleep_ms(unsigned ms)
{
	nanosleep(&(struct timespec){ .tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L },
		  NULL);
}

/* ---- the CLI ---------------------------------------------------------------------------- */

Test(cli, help_lists_every_command_and_each_help_works)
{
	static const char *const cmds[] = { "run", "mn", "cn", "info", "clean" };
	const char *argv[] = { "remora", "--help", NULL };
	struct cu_proc p;

	cr_assert_eq(cu_run(&p, argv, 20000), 0);
	for (unsigned i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++) {
		char want[32];
		const char *sub[] = { "remora", cmds[i], "--help", NULL };
		struct cu_proc q;

		snprintf(want, sizeof(want), "\n  %s ", cmds[i]);
		cr_assert(strstr(p.out, want), "remora --help does not list %s", cmds[i]);
		cr_assert_eq(cu_run(&q, sub, 20000), 0, "remora %s --help failed", cmds[i]);
		cr_assert(strstr(q.out, "usage: remora "), "remora %s --help: no usage", cmds[i]);
		cu_free(&q);
	}
	cu_free(&p);
}

Test(cli, unknown_command_is_one_line_and_exit_2)
{
	const char *argv[] = { "remora", "frobnicate", NULL };
	struct cu_proc p;

	cr_assert_eq(cu_run(&p, argv, 20000), 2);
	cr_assert(strncmp(p.err, "remora: unknown command 'frobnicate' (commands: run, mn, cn, "
			      "info, clean", 72) == 0, "%s", p.err);
	cr_assert_eq(strchr(p.err, '\n') - p.err + 1, (long)strlen(p.err), "not one line");
	cr_assert_eq(p.err[strlen(p.err) - 2], ')');
	cu_free(&p);
}

Test(cli, bad_values_are_one_line_and_exit_2)
{
	const char *flag[] = { "remora", "run", "--pool-size", "abc", NULL };
	const char *job[] = { "remora", "run", "--quiet", "nosuchjob", NULL };
	const char *opt[] = { "remora", "info", "--bogus", NULL };
	struct cu_proc p;

	cr_assert_eq(cu_run(&p, flag, 20000), 2);
	cr_assert_str_eq(p.err, "remora run: --pool-size: 'abc' is not a size (bytes, or with "
				"K/M/G/T: 64M, 1G)\n");
	cu_free(&p);
	cr_assert_eq(cu_run(&p, job, 20000), 2);
	cr_assert(strncmp(p.err, "remora run: unknown job 'nosuchjob' (jobs: smoke", 48) == 0,
		  "%s", p.err);
	cr_assert_eq(strchr(p.err, '\n') - p.err + 1, (long)strlen(p.err), "not one line");
	cu_free(&p);
	cr_assert_eq(cu_run(&p, opt, 20000), 2);
	cr_assert_str_eq(p.err, "remora info: unknown option '--bogus' (see remora info --help)\n");
	cu_free(&p);
}

Test(cli, info_reports_origins)
{
	char dir[] = "/tmp/remora-info-XXXXXX", path[64];
	const char *argv[] = { "remora", "info", "--config", path, "--threads", "3", NULL };
	struct cu_proc p;
	FILE *f;

	cr_assert_not_null(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/c.ini", dir);
	f = fopen(path, "w");
	fputs("[cluster]\ncoros = 4\nthreads = 2\n", f);
	fclose(f);
	setenv("REMORA_POOL_SIZE", "8M", 1);
	cr_assert_eq(cu_run(&p, argv, 20000), 0, "%s", p.err);
	unsetenv("REMORA_POOL_SIZE");
	cr_assert(strstr(p.out, "shm"), "no shm backend listed");
	cr_assert(strstr(p.out, "threads       3"), "%s", p.out);
	cr_assert(strstr(p.out, "flag --threads"), "%s", p.out);
	cr_assert(strstr(p.out, "env REMORA_POOL_SIZE"), "%s", p.out);
	char want[96];
	snprintf(want, sizeof(want), "%s:2", path);
	cr_assert(strstr(p.out, want), "coros origin missing: %s", p.out);
	cu_free(&p);
	unlink(path);
	rmdir(dir);
}

Test(cli, config_error_names_file_and_line)
{
	char dir[] = "/tmp/remora-cfg-XXXXXX", path[64], want[160];
	const char *argv[] = { "remora", "run", "--config", path, NULL };
	struct cu_proc p;
	FILE *f;

	cr_assert_not_null(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/cluster.ini", dir);
	f = fopen(path, "w");
	fputs("[cluster]\nbackend = shm\n\npool_sizee = 64M\n", f);
	fclose(f);
	cr_assert_eq(cu_run(&p, argv, 20000), 2);
	snprintf(want, sizeof(want),
		 "remora run: %s:4: unknown key 'pool_sizee' (did you mean 'pool_size'?)\n", path);
	cr_assert_str_eq(p.err, want);
	cu_free(&p);
	unlink(path);
	rmdir(dir);
}

/* ---- whole clusters --------------------------------------------------------------------- */

Test(run, two_by_two_smoke_passes_and_cleans_up)
{
	char name[48];
	const char *argv[] = { "remora", "run", "--mn", "2", "--cn", "2", "--cluster",
			       cu_name("te", name, sizeof(name)), "smoke", NULL };
	struct cu_proc p;

	cr_assert_eq(cu_run(&p, argv, 100000), 0, "stdout:\n%s\nstderr:\n%s", p.out, p.err);
	cr_assert(strstr(p.out, "smoke: PASS"), "%s", p.out);
	cr_assert(strstr(p.out, "  1    cas              2000         2000  exact"), "%s", p.out);
	cr_assert_eq(cu_leftovers(name), 0, "files of %s left in /dev/shm", name);
	cu_free(&p);
}

Test(run, default_job_is_smoke)
{
	const char *argv[] = { "remora", "run", "--quiet", NULL };
	struct cu_proc p;

	cr_assert_eq(cu_run(&p, argv, 100000), 0, "%s", p.err);
	cr_assert(strstr(p.out, "smoke: PASS"), "%s", p.out);
	cr_assert_str_eq(p.err, "", "--quiet run printed: %s", p.err);
	cu_free(&p);
}

/* A compute node killed by SIGKILL at its 300th verb (transport fault injection). */
Test(run, compute_node_killed_at_a_verb)
{
	char name[48];
	const char *argv[] = { "remora", "run", "--mn", "2", "--cn", "2", "--cluster",
			       cu_name("tk", name, sizeof(name)), "--cn-env",
			       "1:REMORA_DIE_AT_VERB=300", "smoke", NULL };
	struct cu_proc p;

	cr_assert_eq(cu_run(&p, argv, 100000), 1, "stdout:\n%s\nstderr:\n%s", p.out, p.err);
	cr_assert(strstr(p.err, "cn 1 (pid "), "%s", p.err);
	cr_assert(strstr(p.err, "was killed by signal 9"), "%s", p.err);
	cr_assert(strstr(p.out, "smoke: FAIL"), "%s", p.out);
	cr_assert_eq(cu_leftovers(name), 0, "files of %s left in /dev/shm", name);
	cu_free(&p);
}

/*
 * --cn-env replaces a variable the run inherited: getenv returns the first entry of a name,
 * so one appended after the inherited (empty, "off") one was never seen.
 */
Test(run, cn_env_replaces_an_inherited_variable)
{
	char name[48];
	const char *argv[] = { "remora", "run", "--mn", "1", "--cn", "2", "--cluster",
			       cu_name("te", name, sizeof(name)), "--cn-env",
			       "1:REMORA_DIE_AT_VERB=300", "smoke", NULL };
	struct cu_proc p;
	int rc;

	setenv("REMORA_DIE_AT_VERB", "", 1);
	rc = cu_run(&p, argv, 100000);
	unsetenv("REMORA_DIE_AT_VERB");
	cr_assert_eq(rc, 1, "stdout:\n%s\nstderr:\n%s", p.out, p.err);
	cr_assert(strstr(p.err, "was killed by signal 9"), "%s", p.err);
	cu_free(&p);
}

/* Finds the child of the run matching needle, waiting until it exists. */
static pid_t await_child(pid_t run, const char *needle)
{
	pid_t c = 0;

	for (unsigned i = 0; i < 2000 && !c; i++) {
		c = cu_find_child(run, needle);
		if (!c)
			sleep_ms(10);
	}
	cr_assert_neq(c, 0, "no child '%s' of remora run", needle);
	return c;
}

/* Long enough never to finish on its own within the test: --ops 10^9. */
static void start_long_run(struct cu_proc *p, char *name, size_t len, const char *prefix)
{
	static const char *argv[12];
	unsigned i = 0;

	argv[i++] = "remora";
	argv[i++] = "run";
	argv[i++] = "--mn";
	argv[i++] = "2";
	argv[i++] = "--cn";
	argv[i++] = "2";
	argv[i++] = "--cluster";
	argv[i++] = cu_name(prefix, name, len);
	argv[i++] = "smoke";
	argv[i++] = "--ops";
	argv[i++] = "1000000000";
	argv[i] = NULL;
	cu_start(p, argv);
}

/* Waits until the cluster's files exist: it is really running. */
static void await_files(const char *name, unsigned n)
{
	for (unsigned i = 0; i < 2000 && cu_leftovers(name) < n; i++)
		sleep_ms(10);
	cr_assert_geq(cu_leftovers(name), n, "cluster %s never created its files", name);
}

Test(run, compute_node_killed_from_outside)
{
	char name[48];
	struct cu_proc p;
	pid_t cn;

	start_long_run(&p, name, sizeof(name), "tx");
	cn = await_child(p.pid, " cn --id 1 ");
	await_files(name, 2);
	sleep_ms(300);
	kill(cn, SIGKILL);
	cu_wait_for(&p, "killed by signal 9", 30000);
	/* cn 0 keeps counting (the ring is done by then): stop the run like a user would */
	kill(p.pid, SIGINT);
	cu_wait(&p, 60000);
	cr_assert_neq(cu_exit_code(&p), 0);
	cr_assert(strstr(p.err, "cn 1 (pid "), "%s", p.err);
	cr_assert(strstr(p.err, "killed by signal 9"), "%s", p.err);
	cr_assert_eq(cu_leftovers(name), 0, "files of %s left in /dev/shm", name);
	cu_free(&p);
}

Test(run, memory_node_killed_mid_run)
{
	char name[48];
	struct cu_proc p;
	pid_t mn;

	start_long_run(&p, name, sizeof(name), "tm");
	await_child(p.pid, " cn --id 1 ");
	mn = await_child(p.pid, " mn --id 1 ");
	await_files(name, 2);
	sleep_ms(300);
	kill(mn, SIGKILL);
	cu_wait(&p, 60000);
	cr_assert_eq(cu_exit_code(&p), 1, "%s", p.err);
	cr_assert(strstr(p.err, "mn 1 (pid "), "%s", p.err);
	cr_assert(strstr(p.err, "during the run"), "%s", p.err);
	cr_assert_eq(cu_leftovers(name), 0, "files of %s left after the memory node died", name);
	cu_free(&p);
}

Test(run, interrupted_run_cleans_up)
{
	char name[48];
	struct cu_proc p;

	start_long_run(&p, name, sizeof(name), "ti");
	await_child(p.pid, " cn --id 1 ");
	await_files(name, 2);
	sleep_ms(200);
	kill(p.pid, SIGINT);
	cu_wait(&p, 60000);
	cr_assert_eq(cu_exit_code(&p), 128 + SIGINT, "%s", p.err);
	cr_assert(strstr(p.err, "interrupted by signal 2"), "%s", p.err);
	cr_assert_eq(cu_leftovers(name), 0, "files of %s left after Ctrl-C", name);
	cu_free(&p);
}

/* A free TCP port on 127.0.0.1 (bind to 0, read it back, release it). */
static unsigned free_port(void)
{
	struct sockaddr_in sa = { .sin_family = AF_INET };
	socklen_t len = sizeof(sa);
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	cr_assert_eq(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	cr_assert_eq(getsockname(fd, (struct sockaddr *)&sa, &len), 0);
	close(fd);
	return ntohs(sa.sin_port);
}

/* By hand: a detached memory node, a standalone compute node, --stop, then remora clean. */
Test(run, daemon_cn_stop_and_clean)
{
	char dir[] = "/tmp/remora-daemon-XXXXXX", path[64], name[48], want[128];
	const char *mn[] = { "remora", "mn", "--config", path, "--id", "0", NULL };
	const char *stop[] = { "remora", "mn", "--config", path, "--id", "0", "--stop", NULL };
	const char *cn[] = { "remora", "cn", "--config", path, "--id", "0", "smoke", "--ops", "50",
			     "--rounds", "5", NULL };
	const char *clean[] = { "remora", "clean", "--config", path, NULL };
	struct cu_proc p;
	FILE *f;

	cr_assert_not_null(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/c.ini", dir);
	f = fopen(path, "w");
	fprintf(f, "[cluster]\ncluster = %s\npool_size = 4M\n[mn.0]\nport = %u\n[cn.0]\n",
		cu_name("td", name, sizeof(name)), free_port());
	fclose(f);

	cr_assert_eq(cu_run(&p, mn, 30000), 0, "%s", p.err);
	cr_assert(strstr(p.out, "remora mn 0: serving on port"), "%s", p.out);
	cu_free(&p);
	cr_assert_eq(cu_run(&p, mn, 30000), 1, "a second memory node 0 started: %s", p.out);
	cr_assert(strstr(p.err, "exists"), "%s", p.err);
	cu_free(&p);
	cr_assert_eq(cu_run(&p, cn, 60000), 0, "%s", p.err);
	cr_assert(strstr(p.out, "\"faa_verbs\":50,"), "%s", p.out);
	cr_assert(strstr(p.out, "\"ring_rounds\":5,"), "%s", p.out);
	cu_free(&p);
	cr_assert_eq(cu_run(&p, stop, 30000), 0, "%s", p.err);
	cu_free(&p);
	/* the detached node removes its pool as it exits; the message segment stays */
	snprintf(want, sizeof(want), "/dev/shm/remora-%s-mn0", name);
	for (unsigned i = 0; i < 1000 && access(want, F_OK) == 0; i++)
		sleep_ms(10);
	cr_assert_neq(access(want, F_OK), 0, "%s still there after --stop", want);
	cr_assert_eq(cu_run(&p, clean, 30000), 0, "%s", p.err);
	cu_free(&p);
	cr_assert_eq(cu_leftovers(name), 0, "remora clean left files of %s", name);
	unlink(path);
	rmdir(dir);
}

/*
 * Regression: remora run killed outright; its children get SIGTERM (parent-death signal),
 * and memory nodes still remove their pools although their stderr is a pipe nobody reads.
 */
Test(run, killed_runner_sigpipe_on_stderr_leaves_no_pools)
{
	char name[48], pool[128];
	const char *clean[] = { "remora", "clean", "--cluster", name, NULL };
	struct cu_proc p, q;
	pid_t mn[2];

	start_long_run(&p, name, sizeof(name), "tr");
	await_child(p.pid, " cn --id 1 ");
	mn[0] = await_child(p.pid, " mn --id 0 ");
	mn[1] = await_child(p.pid, " mn --id 1 ");
	await_files(name, 3);
	close(p.out_fd);
	close(p.err_fd);
	p.out_fd = p.err_fd = -1;
	kill(p.pid, SIGKILL);
	waitpid(p.pid, NULL, 0);
	for (unsigned i = 0; i < 2; i++) {
		for (unsigned k = 0; k < 3000 && kill(mn[i], 0) == 0; k++)
			sleep_ms(10);
		cr_assert_neq(kill(mn[i], 0), 0, "mn %u outlived remora run", i);
		snprintf(pool, sizeof(pool), "/dev/shm/remora-%s-mn%u", name, i);
		cr_assert_neq(access(pool, F_OK), 0, "%s left behind", pool);
	}
	/* the memory nodes of a run remove every file of the cluster as they exit */
	cr_assert_eq(cu_leftovers(name), 0, "files of %s left after remora run was killed", name);
	cr_assert_eq(cu_run(&q, clean, 30000), 0, "%s", q.err);
	cu_free(&q);
	cu_free(&p);
}

/* A cluster name in use: remora run refuses it and removes none of the owner's files. */
Test(run, name_in_use_is_refused_and_left_alone)
{
	char name[48], pool[128];
	const char *mn[] = { "remora", "mn", "--cluster", name, "--id", "0", "--port", "0", NULL };
	const char *run[] = { "remora", "run", "--cluster", name, "--mn", "2", "--quiet", NULL };
	struct cu_proc p, q;
	const char *pid;

	cu_name("tu", name, sizeof(name));
	snprintf(pool, sizeof(pool), "/dev/shm/remora-%s-mn0", name);
	cr_assert_eq(cu_run(&p, mn, 30000), 0, "%s", p.err);
	pid = strstr(p.out, ": pid ");
	cr_assert_not_null(pid, "%s", p.out);
	cr_assert_eq(cu_run(&q, run, 60000), 1, "%s", q.err);
	cr_assert(strstr(q.err, "has files already"), "%s", q.err);
	cr_assert_eq(access(pool, F_OK), 0, "remora run removed the pool of a running node");
	kill((pid_t)atoi(pid + 6), SIGTERM);
	for (unsigned i = 0; i < 1000 && access(pool, F_OK) == 0; i++)
		sleep_ms(10);
	cr_assert_neq(access(pool, F_OK), 0, "the daemon did not remove its pool on SIGTERM");
	cu_free(&p);
	cu_free(&q);
	{
		const char *clean[] = { "remora", "clean", "--cluster", name, NULL };

		cr_assert_eq(cu_run(&p, clean, 30000), 0, "%s", p.err); /* the key file */
		cu_free(&p);
		cr_assert_eq(cu_leftovers(name), 0, "files of %s left", name);
	}
}

/*
 * Two clusters with one name in two directories are two clusters: run at the same time,
 * each passes its message ring (3000 rounds) and its counters. When their message and cost
 * segments were named after the cluster alone, the rings crossed and both runs failed.
 */
Test(run, same_name_in_two_dirs_are_two_clusters)
{
	char name[48], dir[2][64], dirflag[2][80 + 64];
	struct cu_proc p[2];

	cu_name("twin", name, sizeof(name));
	for (unsigned i = 0; i < 2; i++) {
		const char *argv[] = { "remora", "run", "--mn", "1", "--cn", "2", "--cluster", name,
				       dirflag[i], "--pool-size", "16M", "--quiet", "smoke",
				       "--rounds", "3000", NULL };

		snprintf(dir[i], sizeof(dir[i]), "/tmp/remora-twin-XXXXXX");
		cr_assert_not_null(mkdtemp(dir[i]));
		snprintf(dirflag[i], sizeof(dirflag[i]), "--dir=%s", dir[i]);
		cu_start(&p[i], argv);
	}
	for (unsigned i = 0; i < 2; i++) {
		cu_wait(&p[i], 120000);
		cr_assert_eq(cu_exit_code(&p[i]), 0, "run %u: %s\n%s", i, p[i].out, p[i].err);
		cr_assert(strstr(p[i].out, "smoke: PASS"), "run %u: %s", i, p[i].out);
		cu_free(&p[i]);
		cr_assert_eq(rmdir(dir[i]), 0, "%s not empty", dir[i]);
	}
	cr_assert_eq(cu_leftovers(name), 0, "files of %s left behind", name);
}

/*
 * Cluster names become file names: bad ones are refused up front, one line naming the rule,
 * exit 2, before any process starts (they ended in "Unknown error 16391" after a memory node
 * had started). So are a config file that is a directory (it read as an empty config) and a
 * config line with a NUL byte (the rest of the line was ignored).
 */
Test(cli, bad_cluster_names_and_config_files_exit_2)
{
	static const char *const names[] = { "", "a/b", "../../etc/passwd",
		"x23456789012345678901234567890123456789012345678901234567890", "\"quoted\"" };
	const char *cmds[] = { "clean", "run", "recover" };
	char dir[] = "/tmp/remora-badcfg-XXXXXX", path[64], want[160];
	struct cu_proc p;
	FILE *f;

	for (unsigned c = 0; c < 3; c++)
		for (unsigned i = 0; i < 5; i++) {
			const char *argv[] = { "remora", cmds[c], "--cluster", names[i], NULL };

			cr_assert_eq(cu_run(&p, argv, 20000), 2, "%s '%s': %s", cmds[c], names[i],
				     p.err);
			snprintf(want, sizeof(want), "remora %s: flag --cluster: cluster name '%s'",
				 cmds[c], names[i]);
			cr_assert(strncmp(p.err, want, strlen(want)) == 0 &&
				  strstr(p.err, "use 1 to 47 of [A-Za-z0-9_.-]") &&
				  strchr(p.err, '\n') - p.err + 1 == (long)strlen(p.err), "%s",
				  p.err);
			cu_free(&p);
		}
	cr_assert_not_null(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/c.ini", dir);
	f = fopen(path, "w");
	fputs("[cluster]\ncluster = \"q\"\n", f);
	fclose(f);
	{
		const char *argv[] = { "remora", "clean", "--config", path, NULL };

		cr_assert_eq(cu_run(&p, argv, 20000), 2, "%s", p.err);
		snprintf(want, sizeof(want), "remora clean: %s:2: cluster name '\"q\"': ", path);
		cr_assert(strncmp(p.err, want, strlen(want)) == 0 &&
			  strstr(p.err, "(config values take no quotes)\n"), "%s", p.err);
		cu_free(&p);
	}
	f = fopen(path, "w");
	fwrite("\0\0cluster = zz\n", 1, 15, f);
	fclose(f);
	{
		const char *argv[] = { "remora", "info", "--config", path, NULL };

		cr_assert_eq(cu_run(&p, argv, 20000), 2, "%s", p.err);
		snprintf(want, sizeof(want), "remora info: %s:1: NUL byte in the line", path);
		cr_assert(strncmp(p.err, want, strlen(want)) == 0, "%s", p.err);
		cu_free(&p);
	}
	{
		const char *argv[] = { "remora", "run", "--config", dir, NULL };

		cr_assert_eq(cu_run(&p, argv, 20000), 2, "%s", p.err);
		snprintf(want, sizeof(want), "remora run: %s: not a config file (a directory)\n",
			 dir);
		cr_assert_str_eq(p.err, want);
		cu_free(&p);
	}
	unlink(path);
	rmdir(dir);
}

/*
 * A compute node that cannot join leaves nothing behind: the message segment it opened is
 * removed by its last user (it was left in /dev/shm). Negative control in the commit.
 */
Test(cli, a_compute_node_that_cannot_join_leaves_no_segment)
{
	char name[48];
	const char *argv[] = { "remora", "cn", "--id", "0", "--cluster", name,
			       "--mn-addrs=127.0.0.1:1", "--connect-ms", "300", "smoke", NULL };
	struct cu_proc p;
	char key[96];
	FILE *f;

	cu_name("nojoin", name, sizeof(name));
	/* the cluster's key is there (a node created it), so the compute node gets to connect */
	snprintf(key, sizeof(key), "/dev/shm/remora-%s-key", name);
	f = fopen(key, "wx");
	cr_assert_not_null(f, "%s: %s", key, strerror(errno));
	fprintf(f, "%064d\n", 0);
	fclose(f);
	cr_assert_eq(chmod(key, 0600), 0);
	cr_assert_eq(cu_run(&p, argv, 30000), 1, "%s", p.err);
	unlink(key);
	cr_assert(strstr(p.err, "join: 127.0.0.1:1: connect: "), "%s", p.err);
	cu_free(&p);
	cr_assert_eq(cu_leftovers(name), 0, "files of %s left behind", name);
}

/*
 * An output file in a directory that does not exist is refused before the work that would
 * fill it (it failed after the whole benchmark or sweep had run): one line, exit 2, within a
 * wait far shorter than the runs (bench 5 s per point, verbs 2 s per op).
 */
Test(cli, output_into_a_missing_directory_is_refused_first)
{
	const char *bench[] = { "remora", "bench", "--workload", "kvs", "--json",
				"/nonexistent-remora/x.json", NULL };
	const char *sweep[] = { "remora", "bench", "--workload", "kvs", "--sweep=threads=1,2",
				"--json", "/nonexistent-remora/y.json", NULL };
	const char *verbs[] = { "remora", "verbs", "--json", "/nonexistent-remora/z.json", NULL };
	const char *plot[] = { "remora", "plot", "--out", "/nonexistent-remora/p.svg", "a.json",
			       NULL };
	const char *const *cmds[] = { bench, sweep, verbs, plot };

	for (unsigned i = 0; i < 4; i++) {
		struct cu_proc p;

		cr_assert_eq(cu_run(&p, cmds[i], 4000), 2, "%s: %s", cmds[i][1], p.err);
		cr_assert(strstr(p.err, ": directory '/nonexistent-remora' does not exist\n") &&
			  strchr(p.err, '\n') - p.err + 1 == (long)strlen(p.err), "%s: %s",
			  cmds[i][1], p.err);
		cu_free(&p);
	}
}
