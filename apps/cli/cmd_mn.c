/* SPDX-License-Identifier: MIT */
/*
 * `remora mn`: the memory-node daemon. Creates and registers its pool, serves the control
 * plane until SHUTDOWN, SIGTERM, SIGINT or SIGHUP, then removes its pool (unless keep_pool).
 * Without --foreground it detaches once the pool and the listener are up, so the command
 * returns when the node is ready (or with the reason it could not start).
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <remora/cluster.h>

#include "cli.h"
#include "cmd.h"

/* Exit status when the pool exists already (remora run then leaves that cluster's files). */
#define MN_EXIT_EXISTS 3

struct mn_opts {
	unsigned long id;
	bool foreground;
	bool remove_cluster; /* remove every file of the cluster on exit (remora run's nodes) */
	bool stop;
	bool format;     /* erase the pool's database before serving */
	long port;       /* -1: the configured one */
	long ready_fd;   /* -1: none */
	const char *log; /* daemon's stderr, or NULL */
};

/* No --id: required. */
#define MN_NO_ID ((unsigned long)-1)

static int mn_fd_arg(const char *cmd, const char *name, const char *val, long *out)
{
	unsigned long v;

	if (cli_uint(cmd, name, val, 0, 65535, &v))
		return 2;
	*out = (long)v;
	return 0;
}

static int mn_port(void *opts, const char *cmd, const char *name, const char *val)
{
	return mn_fd_arg(cmd, name, val, &((struct mn_opts *)opts)->port);
}

static int mn_ready_fd(void *opts, const char *cmd, const char *name, const char *val)
{
	return mn_fd_arg(cmd, name, val, &((struct mn_opts *)opts)->ready_fd);
}

static const struct cli_opt mn_opt_table[] = {
	CLI_OPT_UINT("--id", "N", struct mn_opts, id, 0, REMORA_MAX_MN - 1,
		     "this memory node, 0 .. mn-1"),
	CLI_OPT_FLAG("--foreground", struct mn_opts, foreground,
		     "stay attached to the terminal (default: detach once ready)"),
	CLI_OPT_FN("--port", "P", mn_port,
		   "listen on port P instead of the configured one (0: any free)"),
	CLI_OPT_STR("--log", "FILE", struct mn_opts, log,
		    "detached: append messages to FILE (default: discard them)"),
	CLI_OPT_FLAG("--stop", struct mn_opts, stop,
		     "ask the running memory node N to exit, then return"),
	CLI_OPT_FLAG("--format", struct mn_opts, format,
		     "erase the database in the pool (keep_pool reopens it otherwise)"),
	CLI_OPT_FN("--ready-fd", "FD", mn_ready_fd,
		   "write \"ready <port>\" to FD once serving (used by remora run)"),
	CLI_OPT_FLAG("--remove-cluster-on-exit", struct mn_opts, remove_cluster,
		     "on exit, remove every file of the cluster, not only this pool\n"
		     "(remora run's nodes: nothing outlives a run, even if it is killed)"),
	{ 0 },
};

static const struct cli_cmd mn_cmd = {
	.name = "mn",
	.usage = "usage: remora mn --id N [--config FILE] [--<param> VALUE...] [options]\n"
		 "Runs memory node N: creates its pool (remora-<cluster>-mn<N> in the pool "
		 "directory),\n"
		 "registers it, and serves the control plane on its [mn.N] address (or --port).\n"
		 "It stops on SIGTERM, SIGINT, SIGHUP or `remora mn --id N --stop` and then "
		 "removes\n"
		 "its pool unless keep_pool is set. Exit status 3: the pool exists already.\n",
	.opts = mn_opt_table,
	.params = true,
};

static int mn_parse(int argc, char **argv, struct cli_params *cp, struct mn_opts *o)
{
	int i = 1, rc;

	*o = (struct mn_opts){ .id = MN_NO_ID, .port = -1, .ready_fd = -1 };
	rc = cli_parse(&mn_cmd, o, cp, argc, argv, &i);
	if (rc)
		return rc;
	if (o->id == MN_NO_ID) {
		fprintf(stderr, "remora mn: --id N is required (see remora mn --help)\n");
		return 2;
	}
	return cli_params_finish(cp);
}

static int write_line(int fd, const char *line)
{
	size_t len = strlen(line);

	return write(fd, line, len) == (ssize_t)len ? 0 : -EPIPE;
}

/* Blocks the stop signals and returns a signalfd that reports them. */
static int stop_signals(void)
{
	sigset_t set;

	sigemptyset(&set);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGHUP);
	if (sigprocmask(SIG_BLOCK, &set, NULL))
		return -errno;
	return signalfd(-1, &set, SFD_CLOEXEC);
}

/*
 * Detaching: the child goes on; the parent waits for one line on a pipe ("ready <port>" or
 * the error) and exits with the child's verdict. Returns the fd the child reports on, or
 * never returns in the parent.
 */
static int detach(const struct mn_opts *o)
{
	int p[2], null_fd;
	char line[400];
	ssize_t n;
	pid_t pid;

	if (pipe2(p, O_CLOEXEC))
		return -errno;
	pid = fork();
	if (pid < 0)
		return -errno;
	if (pid > 0) {
		close(p[1]);
		n = read(p[0], line, sizeof(line) - 1);
		line[n > 0 ? n : 0] = '\0';
		if (n > 6 && strncmp(line, "ready ", 6) == 0) {
			printf("remora mn %lu: serving on port %s", o->id, line + 6);
			printf("remora mn %lu: pid %d; stop it with SIGTERM or `remora mn --id %lu "
			       "--stop` (same --config)\n",
			       o->id, (int)pid, o->id);
			exit(0);
		}
		fprintf(stderr, "%s", n > 0 ? line : "remora mn: the daemon died while starting\n");
		waitpid(pid, NULL, WNOHANG);
		exit(1);
	}
	close(p[0]);
	setsid();
	/* Let go of the terminal and of whatever pipes the caller reads until end of file. */
	null_fd = open("/dev/null", O_RDWR | O_CLOEXEC);
	if (null_fd >= 0) {
		dup2(null_fd, STDIN_FILENO);
		dup2(null_fd, STDOUT_FILENO);
		dup2(null_fd, STDERR_FILENO);
		close(null_fd);
	}
	return p[1];
}

static int serve(struct cli_params *cp, const struct mn_opts *o, int report_fd)
{
	struct remora_mn_cfg cfg = { .size = sizeof(cfg), .params = cp->p, .id = (uint16_t)o->id,
				     .port = (int)o->port, .pool_check = mn_pool_check,
				     .pool_check_arg = (void *)&o->format };
	struct remora_mn *mn;
	char err[400], line[480];
	int rc, sfd;

	/*
	 * Messages go to stderr, which may be a pipe nobody reads any more (remora run died):
	 * a write must fail with EPIPE, not kill the node before it removed its pool.
	 */
	signal(SIGPIPE, SIG_IGN);
	sfd = stop_signals();
	if (sfd < 0) {
		fprintf(stderr, "remora mn %lu: signalfd: %s\n", o->id, strerror(-sfd));
		return 1;
	}
	cfg.signal_fd = sfd;
	rc = remora_mn_open(&cfg, &mn, err, sizeof(err));
	if (rc) {
		snprintf(line, sizeof(line), "remora mn: %s\n", err);
		if (report_fd >= 0 && report_fd != (int)o->ready_fd)
			write_line(report_fd, line);
		else
			fputs(line, stderr);
		close(sfd);
		return rc == -REMORA_ECONFIG ? 2 : rc == -EEXIST ? MN_EXIT_EXISTS : 1;
	}
	snprintf(line, sizeof(line), "ready %u\n", remora_mn_port(mn));
	if (report_fd >= 0) {
		write_line(report_fd, line);
		close(report_fd);
	} else {
		uint64_t want = remora_params_size(cp->p, REMORA_P_POOL_SIZE);
		uint64_t have = remora_mn_pool_bytes(mn);
		char size[32];

		/* a kept pool reopens at its own size, which may be more than pool_size */
		if (have == want)
			snprintf(size, sizeof(size), "%s", remora_params_str(cp->p,
									 REMORA_P_POOL_SIZE));
		else
			snprintf(size, sizeof(size), "%llu", (unsigned long long)have);
		fprintf(stderr, "remora mn %lu: cluster '%s', %s pool of %s bytes, port %u%s%s%s\n",
			o->id, remora_params_str(cp->p, REMORA_P_CLUSTER),
			remora_params_str(cp->p, REMORA_P_BACKEND), size, remora_mn_port(mn),
			have == want ? "" : " (a kept pool keeps its size; pool_size is ",
			have == want ? "" : remora_params_str(cp->p, REMORA_P_POOL_SIZE),
			have == want ? "" : ")");
	}
	rc = remora_mn_run(mn);
	if (rc)
		fprintf(stderr, "remora mn %lu: event loop: %s\n", o->id, remora_strerror(rc));
	remora_mn_close(mn);
	if (o->remove_cluster) {
		struct remora_transport_cfg tcfg;

		remora_cluster_transport_cfg(cp->p, -1, &tcfg);
		remora_transport_cleanup(&tcfg);
		remora_cluster_key_remove(cp->p);
	}
	close(sfd);
	return rc ? 1 : 0;
}

int cmd_mn(int argc, char **argv)
{
	struct cli_params cp;
	struct mn_opts o;
	int rc, report_fd = -1;

	if (cli_params_init(&cp, "mn"))
		return 2;
	rc = mn_parse(argc, argv, &cp, &o);
	if (rc) {
		cli_params_fini(&cp);
		return rc == 1 ? 0 : 2;
	}
	if (o.id >= remora_params_mn_count(cp.p)) {
		fprintf(stderr, "remora mn: --id %lu out of range (mn = %u)\n", o.id,
			remora_params_mn_count(cp.p));
		cli_params_fini(&cp);
		return 2;
	}
	if (o.stop) {
		char err[320];

		rc = remora_mn_shutdown(cp.p, (unsigned)o.id, err, sizeof(err));
		if (rc)
			fprintf(stderr, "remora mn: --stop: %s\n", err);
		cli_params_fini(&cp);
		return rc ? 1 : 0;
	}
	if (o.ready_fd >= 0) {
		report_fd = (int)o.ready_fd;
		if (fcntl(report_fd, F_SETFD, FD_CLOEXEC) < 0) {
			fprintf(stderr, "remora mn: --ready-fd %ld: %s\n", o.ready_fd,
				strerror(errno));
			cli_params_fini(&cp);
			return 2;
		}
	} else if (!o.foreground) {
		int log_fd = -1;

		/* Opened before detaching, so a bad path is reported where someone reads it. */
		if (o.log) {
			log_fd = open(o.log, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
			if (log_fd < 0) {
				fprintf(stderr, "remora mn: --log %s: %s\n", o.log,
					strerror(errno));
				cli_params_fini(&cp);
				return 2;
			}
		}
		fflush(NULL);
		report_fd = detach(&o);
		if (report_fd < 0) {
			fprintf(stderr, "remora mn: detach: %s\n", strerror(-report_fd));
			cli_params_fini(&cp);
			return 1;
		}
		if (log_fd >= 0) {
			dup2(log_fd, STDERR_FILENO);
			close(log_fd);
		}
	}
	rc = serve(&cp, &o, report_fd);
	cli_params_fini(&cp);
	return rc;
}
