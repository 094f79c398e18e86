/* SPDX-License-Identifier: MIT */
/*
 * Compute nodes started by hand, as on separate hosts (docs/cluster.md, "Across hosts"), here
 * on the shm backend of one host: memory nodes from `remora mn` and a config file that names
 * their ports, one `remora cn --setup` (format and load), the start barrier on every compute
 * node, `remora merge --check`. Negative controls: the barrier times out naming the id that
 * never came; a merge that lacks one node's result fails SmallBank's balance check, so the
 * check depends on every result; malformed results files are one-line errors.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "cutil.h"

#define MAX_NODES 4

/* A cluster of `remora mn --foreground` processes and its config file. */
struct hosts {
	char dir[64], config[96], name[48];
	unsigned n_mn, n_cn;
	struct cu_proc mn[MAX_NODES];
};

/* What hosts_fini needs of the running test's cluster (its stack is gone by then). */
static struct {
	bool on;
	unsigned n_mn;
	pid_t pid[MAX_NODES];
	char dir[64], config[96];
} live;

/* After a failed assertion: stop the memory nodes and remove every file of the cluster. */
static void hosts_fini(void)
{
	const char *bin = getenv("REMORA_BIN");
	pid_t pid;

	if (!live.on)
		return;
	live.on = false;
	for (unsigned i = 0; i < live.n_mn; i++) {
		/* only a child not reaped yet: a reaped pid may belong to someone else now */
		if (waitpid(live.pid[i], NULL, WNOHANG) == 0) {
			kill(live.pid[i], SIGTERM);
			waitpid(live.pid[i], NULL, 0);
		}
	}
	pid = bin ? fork() : -1;
	if (pid == 0) {
		execl(bin, "remora", "clean", "--config", live.config, (char *)NULL);
		_exit(127);
	}
	if (pid > 0)
		waitpid(pid, NULL, 0);
	unlink(live.config);
	for (unsigned i = 0; i < 2; i++) {
		char path[96];

		snprintf(path, sizeof(path), "%s/cn%u.json", live.dir, i);
		unlink(path);
	}
	rmdir(live.dir);
}

TestSuite(hosts, .timeout = 180, .fini = hosts_fini);

/* A free TCP port on 127.0.0.1 (bind to 0, read it back, release it: the caller retries). */
static unsigned free_port(void)
{
	struct sockaddr_in sa = { .sin_family = AF_INET };
	socklen_t len = sizeof(sa);
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	cr_assert_geq(fd, 0);
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	cr_assert_eq(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	cr_assert_eq(getsockname(fd, (struct sockaddr *)&sa, &len), 0);
	close(fd);
	return ntohs(sa.sin_port);
}

/*
 * cu_start, but the child gets SIGTERM when this test process dies: a failed assertion must
 * not leave memory nodes or compute nodes waiting at a barrier behind.
 */
static void spawn(struct cu_proc *p, const char *const *argv)
{
	const char *bin = cu_bin();
	pid_t parent = getpid();
	int out[2], err[2];

	memset(p, 0, sizeof(*p));
	cr_assert_eq(pipe2(out, O_CLOEXEC), 0);
	cr_assert_eq(pipe2(err, O_CLOEXEC), 0);
	p->pid = fork();
	cr_assert_geq(p->pid, 0);
	if (p->pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGTERM);
		if (getppid() != parent)
			_exit(127);
		dup2(out[1], STDOUT_FILENO);
		dup2(err[1], STDERR_FILENO);
		execv(bin, (char *const *)argv);
		_exit(127);
	}
	close(out[1]);
	close(err[1]);
	p->out_fd = out[0];
	p->err_fd = err[0];
	p->out = calloc(1, 1);
	p->err = calloc(1, 1);
}

static void drain(int *fd, char **buf, size_t *len)
{
	char chunk[4096];
	ssize_t n = read(*fd, chunk, sizeof(chunk));

	if (n <= 0) {
		close(*fd);
		*fd = -1;
		return;
	}
	*buf = realloc(*buf, *len + (size_t)n + 1);
	cr_assert_not_null(*buf);
	memcpy(*buf + *len, chunk, (size_t)n);
	*len += (size_t)n;
	(*buf)[*len] = '\0';
}

/* Collects output until stderr holds needle (true) or stderr closes (false); bounded. */
static bool await_err(struct cu_proc *p, const char *needle, int timeout_ms)
{
	unsigned long long deadline = cu_now_ms() + (unsigned long long)timeout_ms;

	while (!strstr(p->err, needle) && p->err_fd >= 0) {
		struct pollfd fds[2] = { { .fd = p->out_fd, .events = POLLIN },
					 { .fd = p->err_fd, .events = POLLIN } };

		cr_assert_lt(cu_now_ms(), deadline, "'%s' never appeared on stderr:\n%s", needle,
			     p->err);
		if (poll(fds, 2, 50) > 0) {
			if (fds[0].revents)
				drain(&p->out_fd, &p->out, &p->out_len);
			if (fds[1].revents)
				drain(&p->err_fd, &p->err, &p->err_len);
		}
	}
	return strstr(p->err, needle) != NULL;
}

static void write_config(struct hosts *h, const unsigned *ports)
{
	FILE *f = fopen(h->config, "w");

	cr_assert_not_null(f);
	fprintf(f, "[cluster]\ncluster = %s\npool_size = 16M\nthreads = 1\ncoros = 2\n", h->name);
	for (unsigned i = 0; i < h->n_mn; i++)
		fprintf(f, "[mn.%u]\nhost = 127.0.0.1\nport = %u\n", i, ports[i]);
	for (unsigned i = 0; i < h->n_cn; i++)
		fprintf(f, "[cn.%u]\nhost = 127.0.0.1\n", i);
	cr_assert_eq(fclose(f), 0);
}

/*
 * Starts the memory nodes on ports the kernel just called free; another process may take
 * one in between, so a node that cannot listen makes a new attempt on new ports.
 */
static void start_mns(struct hosts *h, unsigned n_mn, unsigned n_cn)
{
	unsigned ports[MAX_NODES];

	memset(h, 0, sizeof(*h));
	h->n_mn = n_mn;
	h->n_cn = n_cn;
	snprintf(h->dir, sizeof(h->dir), "/tmp/remora-hosts-XXXXXX");
	cr_assert_not_null(mkdtemp(h->dir));
	snprintf(h->config, sizeof(h->config), "%s/c.ini", h->dir);
	cu_name("th", h->name, sizeof(h->name));
	for (unsigned attempt = 0; attempt < 5; attempt++) {
		unsigned up = 0;

		for (unsigned i = 0; i < n_mn; i++)
			ports[i] = free_port();
		write_config(h, ports);
		for (unsigned i = 0; i < n_mn; i++) {
			char id[16];
			const char *argv[] = { "remora", "mn", "--id", id, "--config", h->config,
					       "--foreground", NULL };

			snprintf(id, sizeof(id), "%u", i);
			spawn(&h->mn[i], argv);
			if (!await_err(&h->mn[i], "bytes, port ", 30000))
				break;
			up++;
		}
		if (up == n_mn) {
			live.on = true;
			live.n_mn = n_mn;
			for (unsigned i = 0; i < n_mn; i++)
				live.pid[i] = h->mn[i].pid;
			snprintf(live.dir, sizeof(live.dir), "%s", h->dir);
			snprintf(live.config, sizeof(live.config), "%s", h->config);
			return;
		}
		cr_assert(strstr(h->mn[up].err, "Address already in use"), "mn %u: %s", up,
			  h->mn[up].err);
		for (unsigned i = 0; i <= up; i++) {
			kill(h->mn[i].pid, SIGTERM);
			cu_wait(&h->mn[i], 10000);
			cu_free(&h->mn[i]);
		}
	}
	cr_assert_fail("no free ports for the memory nodes after 5 attempts");
}

/* `remora mn --stop` for each, as by hand; then nothing of the cluster may be left. */
static void stop_mns(struct hosts *h)
{
	const char *clean[] = { "remora", "clean", "--config", h->config, NULL };
	struct cu_proc p;

	for (unsigned i = 0; i < h->n_mn; i++) {
		char id[16];
		const char *stop[] = { "remora", "mn", "--id", id, "--stop", "--config", h->config,
				       NULL };

		snprintf(id, sizeof(id), "%u", i);
		cr_assert_eq(cu_run(&p, stop, 30000), 0, "%s", p.err);
		cu_free(&p);
		cu_wait(&h->mn[i], 30000);
		cr_assert_eq(cu_exit_code(&h->mn[i]), 0, "mn %u: %s", i, h->mn[i].err);
		cu_free(&h->mn[i]);
	}
	cr_assert_eq(cu_run(&p, clean, 30000), 0, "%s", p.err);
	cu_free(&p);
	cr_assert_eq(cu_leftovers(h->name), 0, "files of %s left behind", h->name);
	unlink(h->config);
	live.on = false;
}

static void put_file(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");

	cr_assert_not_null(f);
	fputs(text, f);
	cr_assert_eq(fclose(f), 0);
}

/* The number after "key": in a result line (the first occurrence). */
static long long json_num(const char *json, const char *key)
{
	const char *at = strstr(json, key);

	cr_assert_not_null(at, "no %s in %s", key, json);
	return strtoll(at + strlen(key), NULL, 10);
}

static bool one_line(const char *s)
{
	const char *nl = strchr(s, '\n');

	return nl && nl[1] == '\0';
}

#define SB_ARGS "bench", "--workload", "smallbank", "--accounts", "1000", "--seed", "7"

/*
 * The flow of docs/cluster.md "Across hosts": CN 1 starts first and must wait at the barrier
 * (CN 0 formats and loads before it joins); merge --check conserves SmallBank's balance and
 * reports the sum of the nodes' own counts. Without CN 1's line the same check fails.
 */
Test(hosts, setup_barrier_merge_check)
{
	char r0[128], r1[128], both[260], summary[64];
	struct hosts h;
	struct cu_proc c0, c1, m;
	long long n0, n1;
	const char *at;

	start_mns(&h, 2, 2);
	snprintf(r0, sizeof(r0), "%s/cn0.json", h.dir);
	snprintf(r1, sizeof(r1), "%s/cn1.json", h.dir);
	snprintf(both, sizeof(both), "%s,%s", r0, r1);
	{
		const char *cn1[] = { "remora", "cn", "--id", "1", "--config", h.config, SB_ARGS,
				      "--duration", "1", "--warmup", "0.2", NULL };
		const char *cn0[] = { "remora", "cn", "--id", "0", "--config", h.config,
				      "--setup", SB_ARGS, "--duration", "1", "--warmup", "0.2",
				      NULL };

		spawn(&c1, cn1);
		cr_assert(await_err(&c1, "remora cn 1: waiting for compute node(s) 0 to join\n",
				    30000), "cn 1 did not wait at the barrier: %s", c1.err);
		spawn(&c0, cn0);
		cu_wait(&c0, 90000);
		cu_wait(&c1, 90000);
	}
	cr_assert_eq(cu_exit_code(&c0), 0, "cn 0: %s", c0.err);
	cr_assert_eq(cu_exit_code(&c1), 0, "cn 1: %s", c1.err);
	cr_assert(one_line(c0.out) && one_line(c1.out), "cn0: %s\ncn1: %s", c0.out, c1.out);
	/* the load ran in cn 0, and its line carries the load's numbers to the merge */
	cr_assert(strstr(c0.out, "\"load\":{\"rows\":2000,"), "%s", c0.out);
	cr_assert_null(strstr(c1.out, "\"load\""), "%s", c1.out);
	n0 = json_num(c0.out, "\"cnt\":{\"committed\":");
	n1 = json_num(c1.out, "\"cnt\":{\"committed\":");
	cr_assert(n0 > 0 && n1 > 0, "committed %lld and %lld", n0, n1);
	/* cn 1's deposits must be part of the balance, else the negative control proves nothing */
	cr_assert_neq(json_num(c1.out, "\"acc\":["), 0, "cn 1 moved no money: %s", c1.out);
	put_file(r0, c0.out);
	put_file(r1, c1.out);
	cu_free(&c0);
	cu_free(&c1);

	{
		const char *merge[] = { "remora", "merge", "--config", h.config, "--results", both,
					SB_ARGS, "--check", NULL };

		cr_assert_eq(cu_run(&m, merge, 60000), 0, "%s\n%s", m.out, m.err);
	}
	cr_assert(strstr(m.out, "(2 of 2 compute nodes reported)"), "%s", m.out);
	cr_assert(strstr(m.out, "  check          ok: total balance conserved"), "%s", m.out);
	cr_assert(strstr(m.out, "  load           2000 rows in "), "%s", m.out);
	snprintf(summary, sizeof(summary), "(%lld transactions)\n", n0 + n1);
	at = strstr(m.out, "  committed ");
	cr_assert(at && strstr(at, summary) == strchr(at, '('), "want %s in\n%s", summary, m.out);
	cu_free(&m);

	/* negative control: without cn 1's line the balance is not conserved */
	{
		const char *merge[] = { "remora", "merge", "--config", h.config, "--results", r0,
					SB_ARGS, "--check", NULL };

		cr_assert_eq(cu_run(&m, merge, 60000), 1, "%s\n%s", m.out, m.err);
	}
	cr_assert(strstr(m.out, "(1 of 2 compute nodes reported)"), "%s", m.out);
	cr_assert(strstr(m.out, "  check          VIOLATION: total balance is "), "%s", m.out);
	cr_assert(strstr(m.err, "remora merge: no result line of compute node(s) 1 (cn = 2)\n"),
		  "%s", m.err);
	cu_free(&m);

	/* remora check with options that do not match the database: named, exit 2, no VIOLATION */
	{
		const char *other_size[] = { "remora", "check", "--config", h.config, "--workload",
					     "smallbank", "--accounts", "2000", NULL };
		const char *other_wl[] = { "remora", "check", "--config", h.config, "--workload",
					   "kvs", NULL };

		cr_assert_eq(cu_run(&m, other_size, 60000), 2, "%s\n%s", m.out, m.err);
		cr_assert(one_line(m.err) && strstr(m.err, "table 0 is 'savings' with 1000 records") &&
			  strstr(m.err, "these options make 'savings' with 2000 records"), "%s",
			  m.err);
		cr_assert_null(strstr(m.out, "VIOLATION"), "%s", m.out);
		cu_free(&m);
		cr_assert_eq(cu_run(&m, other_wl, 60000), 2, "%s\n%s", m.out, m.err);
		cr_assert(one_line(m.err) && strstr(m.err, "these options make 'kvs'"), "%s", m.err);
		cu_free(&m);
	}
	stop_mns(&h);
	unlink(r0);
	unlink(r1);
	rmdir(h.dir);
}

/*
 * cn = 3 but only compute nodes 0 and 1 come: both give up, naming compute node 2. Node 1
 * starts once node 0 waits, and node 0 waits longer, so each sees the other one joined.
 */
Test(hosts, barrier_times_out_naming_the_missing_id)
{
	static const char *const timeout[2] = { "4s", "1500ms" };
	static const char *const within[2] = { "4", "1.5" };
	struct hosts h;
	struct cu_proc c[2];

	start_mns(&h, 1, 3);
	for (unsigned i = 0; i < 2; i++) {
		char id[16];
		const char *cn[] = { "remora", "cn", "--id", id, "--config", h.config,
				     "--start-timeout", timeout[i], "smoke", "--ops", "10", NULL };

		snprintf(id, sizeof(id), "%u", i);
		spawn(&c[i], cn);
		cr_assert(await_err(&c[i], "waiting for compute node(s) ", 30000), "%s", c[i].err);
	}
	for (unsigned i = 0; i < 2; i++) {
		char want[128];

		const char *last;

		cu_wait(&c[i], 60000);
		cr_assert_eq(cu_exit_code(&c[i]), 1, "cn %u: %s", i, c[i].err);
		cr_assert_str_eq(c[i].out, "", "cn %u ran its job: %s", i, c[i].out);
		last = strstr(c[i].err, "start barrier: ");
		cr_assert_not_null(last, "cn %u: %s", i, c[i].err);
		snprintf(want, sizeof(want), "start barrier: compute node(s) 2 did not join within "
			 "%s s (cn = 3)\n", within[i]);
		cr_assert_str_eq(last, want, "cn %u: %s", i, c[i].err);
		cu_free(&c[i]);
	}
	stop_mns(&h);
	rmdir(h.dir);
}

/*
 * --setup erases the store, so it refuses memory nodes whose run cannot succeed: here
 * compute node 0 was killed and declared dead, and its id is never reused. At the barrier a
 * dead node counts as arrived (it joined): compute node 1 does not wait for it, and its job
 * then meets the dead node.
 */
Test(hosts, setup_refuses_memory_nodes_with_a_dead_id)
{
	struct hosts h;
	struct cu_proc c0, s;

	start_mns(&h, 1, 2);
	{
		const char *cn0[] = { "remora", "cn", "--id", "0", "--config", h.config, "smoke",
				      NULL };
		const char *cn1[] = { "remora", "cn", "--id", "1", "--config", h.config,
				      "--setup", "smoke", NULL };

		spawn(&c0, cn0);
		cr_assert(await_err(&c0, "waiting for compute node(s) 1 to join", 30000), "%s",
			  c0.err);
		kill(c0.pid, SIGKILL);
		cu_wait(&c0, 30000);
		cu_free(&c0);
		cr_assert(await_err(&h.mn[0], "cn 0 (pid ", 30000), "%s", h.mn[0].err);
		cr_assert(await_err(&h.mn[0], "declared dead", 30000), "%s", h.mn[0].err);
		cr_assert_eq(cu_run(&s, cn1, 60000), 1, "%s", s.err);
	}
	cr_assert_str_eq(s.err, "remora cn 1: --setup: compute node(s) 0 were declared dead on "
				"these memory nodes and can never join again; start fresh memory "
				"nodes\n");
	cu_free(&s);
	{
		const char *cn1[] = { "remora", "cn", "--id", "1", "--config", h.config,
				      "--start-timeout", "20s", "smoke", "--ops", "10", NULL };

		cr_assert_eq(cu_run(&s, cn1, 60000), 1, "%s", s.err);
	}
	cr_assert_null(strstr(s.err, "waiting for"), "%s", s.err);
	cr_assert(strstr(s.err, "cn 0 was declared dead"), "%s", s.err);
	cu_free(&s);
	stop_mns(&h);
	rmdir(h.dir);
}

/* Malformed input is caught before merge joins anything: one line, exit 2. */
Test(hosts, merge_rejects_bad_input_in_one_line)
{
	char dir[] = "/tmp/remora-merge-XXXXXX", good[64], bad[64], smoke[64], dup[64], far[64],
	     empty[64], gone[64];
	static const struct {
		const char *file; /* which of the files below, by name */
		const char *want;  /* the message after "remora merge: <path>" */
	} cases[] = {
		{ "bad", ":2: not a result line (one JSON object): " },
		{ "smoke", ":1: a result of job 'smoke', not 'bench'\n" },
		{ "dup", ":2: a second result of compute node 0 (the first: " },
		{ "far", ":1: compute node 5 is not in this cluster (cn = 2)\n" },
		{ "empty", ": empty; expected the result line(s) remora cn printed\n" },
		{ "gone", ": No such file or directory\n" },
	};
	struct cu_proc p;

	cr_assert_not_null(mkdtemp(dir));
#define FILE_IN(var, name, text)                                                           \
	do {                                                                               \
		snprintf(var, sizeof(var), "%s/" name, dir);                               \
		if (text)                                                                  \
			put_file(var, text);                                               \
	} while (0)
	FILE_IN(good, "good", "{\"job\":\"bench\",\"cn\":0}\n");
	FILE_IN(bad, "bad", "{\"job\":\"bench\",\"cn\":1}\n{\"cn\":1,\n");
	FILE_IN(smoke, "smoke", "{\"job\":\"smoke\",\"cn\":1}\n");
	FILE_IN(dup, "dup", "{\"cn\":0}\n{\"cn\":0}\n");
	FILE_IN(far, "far", "{\"job\":\"bench\",\"cn\":5}\n");
	FILE_IN(empty, "empty", "");
	FILE_IN(gone, "gone", NULL);
#undef FILE_IN
	for (unsigned i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char path[64], want[192];
		const char *argv[] = { "remora", "merge", "--cn", "2", "--results", path, "bench",
				       NULL };

		snprintf(path, sizeof(path), "%s/%s", dir, cases[i].file);
		snprintf(want, sizeof(want), "remora merge: %s%s", path, cases[i].want);
		cr_assert_eq(cu_run(&p, argv, 20000), 2, "%s: %s", cases[i].file, p.err);
		cr_assert(one_line(p.err), "%s: not one line: %s", cases[i].file, p.err);
		cr_assert(strncmp(p.err, want, strlen(want)) == 0, "want '%s', got '%s'", want,
			  p.err);
		cu_free(&p);
	}
	{
		const char *none[] = { "remora", "merge", "bench", NULL };
		const char *nojob[] = { "remora", "merge", "--results", good, NULL };
		const char *commas[] = { "remora", "merge", "--results", ",", "bench", NULL };

		cr_assert_eq(cu_run(&p, none, 20000), 2);
		cr_assert_str_eq(p.err, "remora merge: --results FILE[,FILE...] is required (see "
					"remora merge --help)\n");
		cu_free(&p);
		cr_assert_eq(cu_run(&p, nojob, 20000), 2);
		cr_assert_str_eq(p.err, "remora merge: no job given (see remora merge --help)\n");
		cu_free(&p);
		cr_assert_eq(cu_run(&p, commas, 20000), 2);
		cr_assert_str_eq(p.err, "remora merge: --results: missing file name(s)\n");
		cu_free(&p);
	}
	unlink(good);
	unlink(bad);
	unlink(smoke);
	unlink(dup);
	unlink(far);
	unlink(empty);
	rmdir(dir);
}

/* The help texts tell about the flow; the command list names merge. */
Test(hosts, help_names_merge_setup_and_the_barrier)
{
	const char *top[] = { "remora", "--help", NULL };
	const char *cn[] = { "remora", "cn", "--help", NULL };
	const char *merge[] = { "remora", "merge", "--help", NULL };
	struct cu_proc p;

	cr_assert_eq(cu_run(&p, top, 20000), 0);
	cr_assert(strstr(p.out, "\n  merge    "), "%s", p.out);
	cu_free(&p);
	cr_assert_eq(cu_run(&p, cn, 20000), 0);
	cr_assert(strstr(p.out, "--setup") && strstr(p.out, "--start-timeout S") &&
			  strstr(p.out, "start barrier"), "%s", p.out);
	cu_free(&p);
	cr_assert_eq(cu_run(&p, merge, 20000), 0);
	cr_assert(strstr(p.out, "usage: remora merge --results FILE[,FILE...]"), "%s", p.out);
	cu_free(&p);
}

/* After a memory node was killed: stop the survivors, then remora clean removes the rest. */
static void stop_after_loss(struct hosts *h)
{
	const char *clean[] = { "remora", "clean", "--config", h->config, NULL };
	struct cu_proc p;

	for (unsigned i = 0; i < h->n_mn; i++) {
		kill(h->mn[i].pid, SIGTERM); /* not reaped yet: a killed one is a zombie */
		cu_wait(&h->mn[i], 30000);
		cu_free(&h->mn[i]);
	}
	live.on = false;
	cr_assert_eq(cu_run(&p, clean, 30000), 0, "%s", p.err);
	cu_free(&p);
	cr_assert_eq(cu_leftovers(h->name), 0, "files of %s left behind", h->name);
	unlink(h->config);
	rmdir(h->dir);
}

/*
 * kill -9 of a memory node under compute nodes started by hand: both stop within a few
 * heartbeats (their 20 s run would outlast the 10 s wait), exit 1, and name the node. Before,
 * they went on committing into the dead node's pool file and exited 0.
 */
Test(hosts, a_killed_memory_node_stops_the_compute_nodes)
{
	struct hosts h;
	struct cu_proc c[2];

	start_mns(&h, 2, 2);
	{
		/* replicas 1: no copy to fail over to (with 2 they fail over) */
		const char *cn1[] = { "remora", "cn", "--id", "1", "--config", h.config,
				      "--replicas", "1", SB_ARGS, "--duration", "20", "--warmup",
				      "0", NULL };
		const char *cn0[] = { "remora", "cn", "--id", "0", "--config", h.config,
				      "--replicas", "1", "--setup", SB_ARGS, "--duration", "20",
				      "--warmup", "0", NULL };

		spawn(&c[1], cn1);
		cr_assert(await_err(&c[1], "waiting for compute node(s) 0 to join\n", 30000), "%s",
			  c[1].err);
		spawn(&c[0], cn0);
	}
	/* the barrier passed once mn 0 lists both as joined; then let them commit a while */
	usleep(1500 * 1000);
	kill(h.mn[1].pid, SIGKILL);
	for (unsigned i = 0; i < 2; i++) {
		char want[64];

		cu_wait(&c[i], 10000);
		snprintf(want, sizeof(want), "remora cn %u: stopped: memory node 1 (", i);
		cr_assert_eq(cu_exit_code(&c[i]), 1, "cn %u: %s", i, c[i].err);
		cr_assert(strstr(c[i].err, want) && strstr(c[i].err, ") is gone: "), "cn %u: %s", i,
			  c[i].err);
		cu_free(&c[i]);
	}
	stop_after_loss(&h);
}

/*
 * A stopped memory node (SIGSTOP) under remora bench: the compute node's heartbeat to it
 * times out, the compute node stops naming it, and the run fails (exit 1) instead of
 * running its 20 s on a node nobody serves.
 */
/* The pid of `remora bench`'s memory node ("mn --id N"), once the run had 3 s to start. */
static pid_t running_mn(pid_t bench, const char *which)
{
	pid_t mn = 0;

	for (unsigned i = 0; i < 200 && !mn; i++) {
		mn = cu_find_child(bench, which);
		usleep(50 * 1000);
	}
	cr_assert_gt(mn, 0, "no %s under remora bench", which);
	usleep(3000 * 1000); /* set up, loaded and running */
	return mn;
}

Test(hosts, a_stopped_memory_node_fails_remora_bench)
{
	/* A 3 s lease: with 1 s, one CI run on a loaded host saw memory node 0 (not stopped)
	 * miss its renewal first. */
	const char *bench[] = { "remora", "bench", "--mn", "2", "--cn", "1", "--replicas", "1",
				"--workload", "smallbank", "--accounts", "1000", "--duration", "20",
				"--warmup", "0", "--lease-ms", "3000", NULL };
	struct cu_proc b;
	pid_t mn1;

	spawn(&b, bench);
	mn1 = running_mn(b.pid, "mn --id 1");
	kill(mn1, SIGSTOP);
	cu_wait(&b, 15000);
	kill(mn1, SIGCONT);
	cr_assert_eq(cu_exit_code(&b), 1, "%s", b.err);
	cr_assert(strstr(b.err, "remora cn 0: stopped: memory node 1 ("), "%s", b.err);
	cu_free(&b);
}

/*
 * A memory node that stalls for more than half a lease but well under the heartbeat round's
 * three quarters (SIGSTOP for 2.4 s of a 4 s lease, as a loaded host may stall a process)
 * costs nothing: the round waits for the reply. Before, a reply later than half a lease (2 s)
 * broke the connection for good: the compute node stopped ("memory node 0 (...) is gone:
 * Connection timed out"). The 0.6 s to the deadline leave room for a loaded host.
 */
Test(hosts, a_memory_node_stalled_under_a_lease_is_waited_for)
{
	const char *bench[] = { "remora", "bench", "--mn", "1", "--cn", "1", "--workload",
				"smallbank", "--accounts", "1000", "--duration", "6", "--warmup",
				"0", "--lease-ms", "4000", "--check", NULL };
	struct cu_proc b;
	pid_t mn0;

	spawn(&b, bench);
	mn0 = running_mn(b.pid, "mn --id 0");
	kill(mn0, SIGSTOP);
	usleep(2400 * 1000);
	kill(mn0, SIGCONT);
	cu_wait(&b, 30000);
	cr_assert_eq(cu_exit_code(&b), 0, "%s\n%s", b.out, b.err);
	cr_assert(strstr(b.out, "check          ok"), "%s", b.out);
	cr_assert_not(strstr(b.err, "declared dead"), "%s", b.err);
	cu_free(&b);
}

static char *slurp(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	char *buf;
	long n;

	cr_assert_not_null(f, "%s", path);
	cr_assert_eq(fseek(f, 0, SEEK_END), 0);
	n = ftell(f);
	cr_assert_geq(n, 0);
	rewind(f);
	buf = malloc((size_t)n + 1);
	cr_assert_not_null(buf);
	cr_assert_eq(fread(buf, 1, (size_t)n, f), (size_t)n);
	fclose(f);
	*len = (size_t)n;
	return buf;
}

/*
 * One owner per pool, on shm as on pmem: while a memory node serves its pool, a second
 * `remora mn --keep-pool` of the same cluster, id and dir is refused naming the live process,
 * so is one with --format (the pool byte for byte as it was), and `remora clean` removes
 * nothing. Once the owner stopped, clean removes every file.
 */
Test(hosts, a_served_pool_has_one_owner)
{
	static const char *const backends[] = { "shm", "pmem" };

	for (unsigned b = 0; b < 2; b++) {
		char name[48], dir[64], dirflag[80], want[80], pool[160];
		const char *first[] = { "remora", "mn", "--id", "0", "--cluster", name, "--backend",
					backends[b], dirflag, "--pool-size", "1M", "--keep-pool",
					"--port", "0", "--foreground", NULL };
		const char *second[] = { "remora", "mn", "--id", "0", "--cluster", name,
					 "--backend", backends[b], dirflag, "--pool-size", "1M",
					 "--keep-pool", "--port", "0", "--foreground", NULL, NULL };
		const char *clean[] = { "remora", "clean", "--cluster", name, "--backend",
					backends[b], dirflag, NULL };
		struct cu_proc mn, p;
		size_t lb, la;
		char *before, *after;

		cu_name("own", name, sizeof(name));
		snprintf(dir, sizeof(dir), "/tmp/remora-own-XXXXXX");
		cr_assert_not_null(mkdtemp(dir));
		snprintf(dirflag, sizeof(dirflag), "--dir=%s", dir);
		snprintf(pool, sizeof(pool), "%s/remora-%s-mn0", dir, name);
		spawn(&mn, first);
		if (!await_err(&mn, "bytes, port ", 30000) && b == 1) {
			cu_wait(&mn, 10000); /* pmem not built here */
			cu_free(&mn);
			rmdir(dir);
			continue;
		}
		cr_assert(strstr(mn.err, "bytes, port "), "%s", mn.err);
		snprintf(want, sizeof(want), "in use by a memory node, process %d ", (int)mn.pid);
		before = slurp(pool, &lb);
		for (unsigned f = 0; f < 2; f++) {
			second[15] = f ? "--format" : NULL;
			cr_assert_eq(cu_run(&p, second, 30000), 1, "%s: %s", backends[b], p.err);
			cr_assert(strstr(p.err, want) && one_line(p.err), "%s: %s", backends[b], p.err);
			cu_free(&p);
		}
		after = slurp(pool, &la);
		cr_assert(la == lb && memcmp(before, after, lb) == 0, "%s: the pool changed",
			  backends[b]);
		free(before);
		free(after);
		snprintf(want, sizeof(want), "memory node 0, process %d, serves ", (int)mn.pid);
		cr_assert_eq(cu_run(&p, clean, 30000), 1, "%s: %s", backends[b], p.err);
		cr_assert(strstr(p.err, want) && one_line(p.err), "%s: %s", backends[b], p.err);
		cu_free(&p);
		cr_assert_eq(access(pool, F_OK), 0, "%s: clean removed a served pool", backends[b]);
		kill(mn.pid, SIGTERM);
		cu_wait(&mn, 30000);
		cr_assert_eq(cu_exit_code(&mn), 0, "%s", mn.err);
		cu_free(&mn);
		cr_assert_eq(cu_run(&p, clean, 30000), 0, "%s: %s", backends[b], p.err);
		cu_free(&p);
		unlink(pool); /* a kept pmem pool stays after clean: it is data */
		cr_assert_eq(cu_leftovers(name), 0, "files of %s left behind", name);
		cr_assert_eq(rmdir(dir), 0, "%s: %s", dir, strerror(errno));
	}
}

/*
 * Runs remora with argv in a private mount namespace whose /dev/shm is a tmpfs of size (the
 * 64 MiB of Docker's default): stdout and stderr captured. Skips the test where no such
 * namespace can be made (not root, no CAP_SYS_ADMIN).
 */
static int run_on_small_shm(struct cu_proc *p, const char *const *argv, const char *size)
{
	const char *bin = cu_bin();
	pid_t parent = getpid();
	int out[2], err[2], st[2];
	char why;

	memset(p, 0, sizeof(*p));
	cr_assert_eq(pipe2(out, O_CLOEXEC), 0);
	cr_assert_eq(pipe2(err, O_CLOEXEC), 0);
	cr_assert_eq(pipe2(st, O_CLOEXEC), 0);
	p->pid = fork();
	cr_assert_geq(p->pid, 0);
	if (p->pid == 0) {
		char opts[32];

		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (getppid() != parent)
			_exit(127);
		snprintf(opts, sizeof(opts), "size=%s", size);
		if (unshare(CLONE_NEWNS) || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) ||
		    mount("remora-small", "/dev/shm", "tmpfs", 0, opts)) {
			why = 's';
			if (write(st[1], &why, 1) != 1)
				_exit(126);
			_exit(77);
		}
		dup2(out[1], STDOUT_FILENO);
		dup2(err[1], STDERR_FILENO);
		execv(bin, (char *const *)argv);
		_exit(127);
	}
	close(out[1]);
	close(err[1]);
	close(st[1]);
	p->out_fd = out[0];
	p->err_fd = err[0];
	p->out = calloc(1, 1);
	p->err = calloc(1, 1);
	if (read(st[0], &why, 1) == 1) {
		close(st[0]);
		cu_wait(p, 10000);
		cu_free(p);
		cr_skip_test("no private mount namespace here (unshare -m needs root)");
	}
	close(st[0]);
	cu_wait(p, 60000);
	return cu_exit_code(p);
}

/*
 * A /dev/shm too small for the pools (64 MiB, remora's default pool_size is larger): remora
 * bench and remora verbs fail with one line saying how many bytes a pool needs, and not with
 * SIGBUS (exit 135) as when pools were sparse files. In the namespace nothing is left behind.
 */
Test(hosts, a_full_dev_shm_is_an_error_not_sigbus)
{
	const char *bench[] = { "remora", "bench", "--mn", "2", "--cn", "1", "--workload", "kvs",
				"--duration", "0.2", "--warmup", "0", NULL };
	const char *verbs[] = { "remora", "verbs", "--duration", "0.2", NULL };
	const char *const *cmds[] = { bench, verbs };

	for (unsigned i = 0; i < 2; i++) {
		struct cu_proc p;
		int rc = run_on_small_shm(&p, cmds[i], "64m");

		cr_assert(rc == 1 || rc == 2, "%s: exit %d\n%s", cmds[i][1], rc, p.err);
		cr_assert(strstr(p.err, "cannot reserve ") && strstr(p.err, "No space left"),
			  "%s: %s", cmds[i][1], p.err);
		cu_free(&p);
	}
}

/*
 * shm and pmem say and do the same with a kept pool: a smaller pool_size reopens it at its
 * own size (shm refused it), a larger one is refused (a pool never grows), a truncated file
 * is refused as truncated (shm called it "not a remora shm pool"); refused files unchanged.
 */
Test(hosts, shm_and_pmem_agree_on_pool_size_and_truncation)
{
	static const char *const backends[] = { "shm", "pmem" };

	for (unsigned b = 0; b < 2; b++) {
		char name[48], dir[64], dirflag[80], pool[160], size[8] = "2M";
		const char *mn[] = { "remora", "mn", "--id", "0", "--cluster", name, "--backend",
				     backends[b], dirflag, "--pool-size", size, "--keep-pool",
				     "--port", "0", "--foreground", NULL };
		const char *clean[] = { "remora", "clean", "--cluster", name, "--backend",
					backends[b], dirflag, NULL };
		struct cu_proc p;
		size_t lb, la;
		char *before, *after;

		cu_name("agree", name, sizeof(name));
		snprintf(dir, sizeof(dir), "/tmp/remora-agree-XXXXXX");
		cr_assert_not_null(mkdtemp(dir));
		snprintf(dirflag, sizeof(dirflag), "--dir=%s", dir);
		snprintf(pool, sizeof(pool), "%s/remora-%s-mn0", dir, name);
		for (unsigned k = 0; k < 2; k++) { /* create at 2M, then reopen at 1M */
			spawn(&p, mn);
			if (!await_err(&p, "bytes, port ", 30000) && b == 1) {
				cu_wait(&p, 10000); /* pmem not built here */
				cu_free(&p);
				break;
			}
			/* and says so: it serves its own 2 MiB, not the 1M asked */
			cr_assert(k == 0 || (strstr(p.err, " pool of 2097152 bytes, port ") &&
					     strstr(p.err, "(a kept pool keeps its size; pool_size "
							   "is 1M)\n")), "%s: %s", backends[b], p.err);
			kill(p.pid, SIGTERM);
			cu_wait(&p, 30000);
			cr_assert_eq(cu_exit_code(&p), 0, "%s at %s: %s", backends[b], size, p.err);
			cu_free(&p);
			snprintf(size, sizeof(size), "1M");
		}
		if (access(pool, F_OK)) {
			rmdir(dir);
			continue;
		}
		snprintf(size, sizeof(size), "4M");
		cr_assert_eq(cu_run(&p, mn, 30000), 1, "%s: %s", backends[b], p.err);
		cr_assert(one_line(p.err) && strstr(p.err, ": pool holds 2097152 usable bytes, "
			  "4194304 requested (a pool never grows; left untouched)\n"), "%s: %s",
			  backends[b], p.err);
		cu_free(&p);
		cr_assert_eq(truncate(pool, 1 << 20), 0);
		before = slurp(pool, &lb);
		snprintf(size, sizeof(size), "2M");
		cr_assert_eq(cu_run(&p, mn, 30000), 1, "%s: %s", backends[b], p.err);
		cr_assert(one_line(p.err) && strstr(p.err, ": file truncated: 1048576 bytes, the "
			  "pool needs ") && strstr(p.err, " (left untouched)\n"), "%s: %s",
			  backends[b], p.err);
		cu_free(&p);
		after = slurp(pool, &la);
		cr_assert(la == lb && memcmp(before, after, lb) == 0, "%s: refused pool changed",
			  backends[b]);
		free(before);
		free(after);
		unlink(pool);
		cr_assert_eq(cu_run(&p, clean, 30000), 0, "%s", p.err);
		cu_free(&p);
		cr_assert_eq(cu_leftovers(name), 0, "files of %s left behind", name);
		cr_assert_eq(rmdir(dir), 0, "%s", dir);
	}
}
