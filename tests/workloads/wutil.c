// SPDX-License-Identifier: MIT
#include "wutil.h"

#include <criterion/criterion.h>
#include <criterion/hooks.h>
#include <criterion/options.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define WU_MAX_ARGS 64

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
	printf("SKIP: criterion cannot run under ThreadSanitizer\n");
	return 77;
#endif
	tests = criterion_initialize();
	/*
	 * The end-to-end tests start whole clusters, and the negative controls depend on the
	 * contention a run reaches: one test at a time (overridable with -j).
	 */
	criterion_options.jobs = 1;
	if (criterion_handle_args(argc, argv, true))
		rc = !criterion_run_all_tests(tests);
	criterion_finalize(tests);
	if (rc == 0 && all_skipped) {
		fprintf(stderr, "every test skipped (reasons above)\n");
		return 77;
	}
	return rc;
}

static void rm_tree(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *de;

	if (!d)
		return;
	while ((de = readdir(d))) {
		char p[512];

		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		snprintf(p, sizeof(p), "%s/%s", dir, de->d_name);
		if (unlink(p) && errno == EISDIR)
			rm_tree(p);
	}
	closedir(d);
	rmdir(dir);
}

static void read_tail(const char *path, char *buf, size_t len)
{
	FILE *f = fopen(path, "r");
	long size;
	size_t n;

	buf[0] = '\0';
	if (!f)
		return;
	fseek(f, 0, SEEK_END);
	size = ftell(f);
	fseek(f, size > (long)len - 1 ? size - (long)len + 1 : 0, SEEK_SET);
	n = fread(buf, 1, len - 1, f);
	buf[n] = '\0';
	fclose(f);
}

/* Replaces %DIR% in arg (into a static slot per argument). */
static char *expand(const char *arg, const char *dir, char *slot, size_t len)
{
	const char *at = strstr(arg, "%DIR%");

	if (!at)
		return (char *)arg;
	snprintf(slot, len, "%.*s%s%s", (int)(at - arg), arg, dir, at + 5);
	return slot;
}

static int wait_bounded(pid_t pid, unsigned timeout_s)
{
	struct timespec start, now;
	int st;

	clock_gettime(CLOCK_MONOTONIC, &start);
	for (;;) {
		pid_t w = waitpid(pid, &st, WNOHANG);

		if (w == pid)
			return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
		clock_gettime(CLOCK_MONOTONIC, &now);
		if (now.tv_sec - start.tv_sec >= (time_t)timeout_s) {
			/* SIGTERM lets the run machinery stop its children and remove the pools */
			kill(pid, SIGTERM);
			sleep(2);
			kill(pid, SIGKILL);
			waitpid(pid, &st, 0);
			return 124;
		}
		usleep(20 * 1000);
	}
}

void wu_bench(struct wu_run *r, const char *mutate, unsigned timeout_s, const char *const *args)
{
	static char slots[WU_MAX_ARGS][256];
	const char *cli = getenv("REMORA_BIN");
	char *argv[WU_MAX_ARGS + 8];
	char json[128], logp[128];
	json_error_t jerr;
	unsigned n = 0;
	pid_t pid;

	memset(r, 0, sizeof(*r));
	if (!cli || !*cli)
		cr_skip_test("REMORA_BIN is not set (run the suite through meson test)");
	snprintf(r->dir, sizeof(r->dir), "/tmp/remora-wl-XXXXXX");
	cr_assert_not_null(mkdtemp(r->dir));
	snprintf(json, sizeof(json), "--json=%s/out.json", r->dir);
	snprintf(logp, sizeof(logp), "%s/log", r->dir);
	argv[n++] = "remora";
	argv[n++] = "bench";
	/*
	 * These runs check workloads, not failure detection. Under the whole suite on a 2-core
	 * VM, every process of a run (the memory node and both compute nodes) once stopped for
	 * over 3 s at the same moment: the memory node declared both compute nodes dead ("no
	 * heartbeat for 3000 ms"), and they stopped ("renewed no lease for 3.1 s"), a false
	 * suspicion that is safe but fails the run. A 15 s lease rides such a stall out; the
	 * cluster tests keep the default lease and test detection.
	 */
	argv[n++] = "--lease-ms=15000";
	/*
	 * For the same reason: the start deadline of remora run is connect_ms + 10 s, and one
	 * ASan run of the suite saw a memory node not ready after those 15 s (it is ready in
	 * well under a second on an idle host).
	 */
	argv[n++] = "--connect-ms=30000";
	for (unsigned i = 0; args[i] && n < WU_MAX_ARGS; i++)
		argv[n] = expand(args[i], r->dir, slots[n], sizeof(slots[n])), n++;
	argv[n++] = json;
	argv[n] = NULL;
	fflush(NULL);
	pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		int fd = open(logp, O_WRONLY | O_CREAT | O_TRUNC, 0600);

		if (fd >= 0) {
			dup2(fd, STDOUT_FILENO);
			dup2(fd, STDERR_FILENO);
			close(fd);
		}
		if (mutate)
			setenv("REMORA_MUTATE", mutate, 1);
		else
			unsetenv("REMORA_MUTATE");
		execv(cli, argv);
		_exit(127);
	}
	r->status = wait_bounded(pid, timeout_s);
	read_tail(logp, r->log, sizeof(r->log));
	snprintf(json, sizeof(json), "%s/out.json", r->dir);
	r->summary = json_load_file(json, 0, &jerr);
}

void wu_free(struct wu_run *r)
{
	json_decref(r->summary);
	r->summary = NULL;
	if (r->dir[0])
		rm_tree(r->dir);
}

static json_t *lookup(const struct wu_run *r, const char *path)
{
	json_t *v = r->summary;
	char buf[128], *save = NULL;

	snprintf(buf, sizeof(buf), "%s", path);
	for (char *tok = strtok_r(buf, ".", &save); tok && v; tok = strtok_r(NULL, ".", &save))
		v = json_is_array(v) ? json_array_get(v, strtoul(tok, NULL, 10)) :
				       json_object_get(v, tok);
	return v;
}

double wu_num(const struct wu_run *r, const char *path)
{
	return json_number_value(lookup(r, path));
}

const char *wu_str(const struct wu_run *r, const char *path)
{
	const char *s = json_string_value(lookup(r, path));

	return s ? s : "";
}

bool wu_bool(const struct wu_run *r, const char *path)
{
	return json_is_true(lookup(r, path));
}

/* Appends the lines of log that begin with "remora " to msg, as far as msg has room. */
static void own_lines(const char *log, char *msg, size_t msglen)
{
	size_t at = strlen(msg);

	for (const char *l = log; *l && at + 1 < msglen;) {
		const char *nl = strchr(l, '\n');
		size_t len = nl ? (size_t)(nl - l) : strlen(l);

		if (!strncmp(l, "remora ", 7))
			at += (size_t)snprintf(msg + at, msglen - at, "\n%.*s", (int)len, l);
		l += len + (nl != NULL);
	}
}

bool wu_check(const char *const *base, const char *const *wl, const char *label,
	      const char *mutate, unsigned timeout_s, char *msg, size_t msglen)
{
	const char *args[WU_MAX_ARGS];
	struct wu_run r;
	unsigned n = 0;
	bool ok;

	for (unsigned i = 0; base[i] && n < WU_MAX_ARGS - 2; i++)
		args[n++] = base[i];
	args[n++] = "--check";
	for (unsigned i = 0; wl[i] && n < WU_MAX_ARGS - 1; i++)
		args[n++] = wl[i];
	args[n] = NULL;
	wu_bench(&r, mutate, timeout_s, args);
	cr_assert_not_null(r.summary, "%s %s: no summary\n%s", wl[0], label, r.log);
	ok = r.status == 0 && wu_bool(&r, "check.run") && wu_bool(&r, "check.ok");
	/* A failed exit with a passing check is told by the nodes' own lines ("remora ..."),
	 * which come before the summary's. */
	snprintf(msg, msglen, "%s %s: exit %d: %s", wl[0], label, r.status,
		 wu_str(&r, "check.message"));
	if (r.status)
		own_lines(r.log, msg, msglen);
	/* A correct run that commits nothing would pass every check vacuously. */
	if (!mutate)
		cr_expect_gt(wu_num(&r, "committed"), 0, "%s: nothing committed", msg);
	/* The engine's own lock count (ford, pandora) balances; no other protocol reports one. */
	if (!mutate)
		cr_expect_null(strstr(r.log, "neither given back"), "%s: %s", msg, r.log);
	wu_free(&r);
	return ok;
}
