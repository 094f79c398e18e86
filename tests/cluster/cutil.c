/* SPDX-License-Identifier: MIT */
#include "cutil.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <criterion/criterion.h>
#include <criterion/hooks.h>
#include <criterion/options.h>

#include <remora/transport.h>

#include "cluster/ctl.h"

static bool all_skipped;

ReportHook(POST_ALL)(struct criterion_global_stats *stats)
{
	all_skipped = stats->nb_tests > 0 && stats->tests_skipped == stats->nb_tests;
}

/* Visible: criterion's sandbox finds main by symbol to hijack it in its workers. */
__attribute__((visibility("default"))) int main(int argc, char **argv)
{
	struct criterion_test_set *tests;
	int rc = 0;

#ifdef __SANITIZE_THREAD__
	/* Criterion's sandbox arena collides with TSan's memory layout (Snaipe/Criterion#274). */
	(void)argc, (void)argv, (void)tests;
	printf("SKIP: criterion cannot run under ThreadSanitizer; the TSan target of this area is "
	       "tests/cluster/stress_cluster.c\n");
	return 77;
#endif
	tests = criterion_initialize();
	/* The end-to-end tests start whole clusters: one test at a time (overridable: -j). */
	criterion_options.jobs = 1;
	if (criterion_handle_args(argc, argv, true))
		rc = !criterion_run_all_tests(tests);
	criterion_finalize(tests);
	if (rc == 0 && all_skipped) {
		fprintf(stderr, "every test skipped\n");
		return 77;
	}
	return rc;
}

unsigned long long cu_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (unsigned long long)ts.tv_sec * 1000 + (unsigned long long)ts.tv_nsec / 1000000;
}

const char *cu_bin(void)
{
	const char *b = getenv("REMORA_BIN");

	if (!b || !*b || access(b, X_OK) != 0)
		cr_skip_test("REMORA_BIN does not name the remora binary (run through meson test)");
	return b;
}

void cu_need_rdma_device(void)
{
	char cluster[48];
	struct remora_transport_cfg cfg = { .size = sizeof(cfg), .backend = "rdma",
					    .cluster = cu_name("probe", cluster, sizeof(cluster)),
					    .self_cn = -1, .numa_node = -1 };
	struct remora_transport *tp;
	int rc = remora_transport_open(&cfg, &tp);

	if (rc == -REMORA_ENOBACKEND || rc == -ENODEV || rc == -ENETDOWN)
		cr_skip_test("no RDMA device here: %s", remora_last_error());
	cr_assert_eq(rc, 0, "rdma: %s", remora_last_error());
	remora_transport_close(tp);
}

const char *cu_name(const char *prefix, char *buf, size_t len)
{
	static unsigned n;

	snprintf(buf, len, "%s%dx%u", prefix, (int)getpid(), n++);
	return buf;
}

void cu_start(struct cu_proc *p, const char *const *argv)
{
	const char *bin = cu_bin();
	int out[2], err[2];

	memset(p, 0, sizeof(*p));
	cr_assert_eq(pipe2(out, O_CLOEXEC), 0);
	cr_assert_eq(pipe2(err, O_CLOEXEC), 0);
	p->pid = fork();
	cr_assert_geq(p->pid, 0);
	if (p->pid == 0) {
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
	memcpy(*buf + *len, chunk, (size_t)n);
	*len += (size_t)n;
	(*buf)[*len] = '\0';
}

void cu_wait_for(struct cu_proc *p, const char *needle, int timeout_ms)
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
	cr_assert(strstr(p->err, needle), "'%s' never appeared on stderr:\n%s", needle, p->err);
}

void cu_wait(struct cu_proc *p, int timeout_ms)
{
	unsigned long long deadline = cu_now_ms() + (unsigned long long)timeout_ms;

	while (p->out_fd >= 0 || p->err_fd >= 0 || !p->exited) {
		struct pollfd fds[2] = { { .fd = p->out_fd, .events = POLLIN },
					 { .fd = p->err_fd, .events = POLLIN } };

		if (cu_now_ms() > deadline) {
			kill(p->pid, SIGKILL);
			waitpid(p->pid, &p->wstatus, 0);
			p->exited = true;
			cr_assert_fail("timeout after %d ms; stderr so far:\n%s", timeout_ms,
				       p->err);
		}
		if (poll(fds, 2, 50) > 0) {
			if (fds[0].revents)
				drain(&p->out_fd, &p->out, &p->out_len);
			if (fds[1].revents)
				drain(&p->err_fd, &p->err, &p->err_len);
		}
		if (!p->exited && waitpid(p->pid, &p->wstatus, WNOHANG) == p->pid)
			p->exited = true;
	}
}

int cu_exit_code(const struct cu_proc *p)
{
	if (WIFSIGNALED(p->wstatus))
		return 128 + WTERMSIG(p->wstatus);
	return WEXITSTATUS(p->wstatus);
}

int cu_run(struct cu_proc *p, const char *const *argv, int timeout_ms)
{
	cu_start(p, argv);
	cu_wait(p, timeout_ms);
	return cu_exit_code(p);
}

void cu_free(struct cu_proc *p)
{
	free(p->out);
	free(p->err);
	p->out = p->err = NULL;
}

/* Reads /proc/<pid>/task/<pid>/children and matches each child's command line. */
pid_t cu_find_child(pid_t pid, const char *needle)
{
	char path[64], list[4096], cmd[1024];
	FILE *f;
	size_t n;

	snprintf(path, sizeof(path), "/proc/%d/task/%d/children", (int)pid, (int)pid);
	f = fopen(path, "r");
	if (!f)
		return 0;
	n = fread(list, 1, sizeof(list) - 1, f);
	fclose(f);
	list[n] = '\0';
	for (char *tok = strtok(list, " \n"); tok; tok = strtok(NULL, " \n")) {
		int fd;
		ssize_t len;

		snprintf(path, sizeof(path), "/proc/%s/cmdline", tok);
		fd = open(path, O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			continue;
		len = read(fd, cmd, sizeof(cmd) - 1);
		close(fd);
		if (len <= 0)
			continue;
		for (ssize_t i = 0; i < len; i++)
			if (cmd[i] == '\0')
				cmd[i] = ' ';
		cmd[len] = '\0';
		if (strstr(cmd, needle))
			return (pid_t)atoi(tok);
	}
	return 0;
}

unsigned cu_leftovers(const char *cluster)
{
	char prefix[128];
	struct dirent *e;
	unsigned n = 0;
	DIR *d = opendir("/dev/shm");

	if (!d)
		return 0;
	snprintf(prefix, sizeof(prefix), "remora-%s-", cluster);
	while ((e = readdir(d)) != NULL)
		if (strncmp(e->d_name, prefix, strlen(prefix)) == 0)
			n++;
	closedir(d);
	return n;
}

void cu_raw_send(int fd, const void *buf, size_t len)
{
	cr_assert_eq(send(fd, buf, len, MSG_NOSIGNAL), (ssize_t)len);
}

size_t cu_raw_reply(int fd, void *buf, size_t cap)
{
	struct rctl_hdr *h = buf;
	size_t got = 0;

	while (got < sizeof(*h)) {
		ssize_t n = recv(fd, (char *)buf + got, sizeof(*h) - got, 0);

		cr_assert_geq(n, 0, "no reply: %s", strerror(errno));
		if (n == 0) {
			cr_assert_eq(got, 0, "connection closed inside a reply header");
			return 0;
		}
		got += (size_t)n;
	}
	cr_assert_eq(h->magic, RCTL_MAGIC);
	cr_assert_leq(h->len, cap);
	while (got < h->len) {
		ssize_t n = recv(fd, (char *)buf + got, h->len - got, 0);

		cr_assert_gt(n, 0, "reply cut short");
		got += (size_t)n;
	}
	return got;
}
