/* SPDX-License-Identifier: MIT */
/*
 * The smoke job: proves a cluster works end to end with exact, checkable numbers.
 *
 * Every compute node runs `threads` threads; each does `--ops` rounds of, on every memory
 * node, one FAA +1 on a counter word and one CAS-increment (CAS with the last value seen,
 * retried until it wins) on another. Meanwhile the main thread passes `--rounds` tokens
 * around a ring of compute-node messages (cn i -> cn i+1 mod n), checking sender and order.
 * merge reads both counters of every memory node: each must equal exactly
 * cn * threads * ops, and every compute node must have exited 0.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "job.h"

#define SMOKE_FAA_OFF 0   /* counter words, in region 0 of every memory node */
#define SMOKE_CAS_OFF 64  /* on another cache line */
#define SMOKE_RING_MAGIC 0x676e6972u /* "ring" */

struct smoke_args {
	unsigned long ops;
	unsigned long rounds;
	unsigned long wait_ms;
};

struct ring_msg {
	uint32_t magic;
	uint32_t round;
	uint32_t from;
	uint32_t _pad;
};

#define SMOKE_MAX_ARG 1000000000ul

static const struct cli_opt smoke_args_table[] = {
	CLI_OPT_UINT("--ops", "K", struct smoke_args, ops, 0, SMOKE_MAX_ARG,
		     "FAA and CAS-increments per thread per memory node (default 1000)"),
	CLI_OPT_UINT("--rounds", "R", struct smoke_args, rounds, 0, SMOKE_MAX_ARG,
		     "tokens passed around the compute-node ring (default 100)"),
	CLI_OPT_UINT("--wait-ms", "T", struct smoke_args, wait_ms, 0, SMOKE_MAX_ARG,
		     "give up when the ring stalls for T ms (default 30000)"),
	{ 0 },
};

static const struct cli_cmd smoke_cmd = {
	.name = "smoke",
	.see = "run",
	.usage = "usage: remora run [options] smoke [arguments]\n",
	.opts = smoke_args_table,
};

static int smoke_parse(int argc, char **argv, struct smoke_args *a)
{
	int i = 1;

	*a = (struct smoke_args){ .ops = 1000, .rounds = 100, .wait_ms = 30000 };
	return cli_parse(&smoke_cmd, a, NULL, argc, argv, &i) ? 2 : 0;
}

static int smoke_check(int argc, char **argv)
{
	struct smoke_args a;

	return smoke_parse(argc, argv, &a);
}

/* Where memory node mn keeps the FAA and the CAS counter: its descriptor's first region. */
static int counter_addrs(const struct remora_node_desc *d, unsigned mn, remora_gaddr *faa,
			 remora_gaddr *cas, uint32_t *key)
{
	if (!d || d->nregions < 1 || d->regions[0].len < SMOKE_CAS_OFF + 8)
		return -REMORA_EBOUNDS;
	*faa = remora_gaddr_make((uint16_t)mn, d->regions[0].off + SMOKE_FAA_OFF);
	*cas = remora_gaddr_make((uint16_t)mn, d->regions[0].off + SMOKE_CAS_OFF);
	*key = d->regions[0].key;
	return 0;
}

/* ---- parent: zero the counters, then check them ----------------------------------------- */

static int smoke_setup(struct job_host *h, int argc, char **argv)
{
	struct remora_chan *ch;
	const uint64_t zero = 0;
	int rc;

	(void)argc;
	(void)argv;
	rc = remora_chan_open(h->tp, &ch);
	if (rc)
		return rc;
	for (unsigned m = 0; m < h->n_mn && !rc; m++) {
		const struct remora_node_desc *d = remora_cluster_desc(h->cluster, m);
		remora_gaddr a, b;
		uint32_t key;

		rc = counter_addrs(d, m, &a, &b, &key);
		if (!rc)
			rc = remora_write(ch, a, key, &zero, sizeof(zero));
		if (!rc)
			rc = remora_write(ch, b, key, &zero, sizeof(zero));
	}
	remora_chan_close(ch);
	return rc;
}

/* Reads "key":<unsigned> from a flat JSON object; false when absent. */
static bool json_u64(const char *json, const char *key, uint64_t *out)
{
	char pat[64];
	const char *p;

	snprintf(pat, sizeof(pat), "\"%s\":", key);
	p = json ? strstr(json, pat) : NULL;
	if (!p)
		return false;
	*out = strtoull(p + strlen(pat), NULL, 10);
	return true;
}

static void describe_exit(const struct job_result *r, char *buf, size_t len)
{
	if (WIFSIGNALED(r->wstatus))
		snprintf(buf, len, "killed by signal %d", WTERMSIG(r->wstatus));
	else if (WIFEXITED(r->wstatus) && WEXITSTATUS(r->wstatus))
		snprintf(buf, len, "exit status %d", WEXITSTATUS(r->wstatus));
	else if (!r->json)
		snprintf(buf, len, "no result");
	else
		snprintf(buf, len, "ok");
}

static int smoke_merge(struct job_host *h, const struct job_result *res,
		       unsigned n, int argc, char **argv)
{
	uint64_t threads = (uint64_t)remora_params_int(h->params, REMORA_P_THREADS);
	uint64_t expect, per_cn;
	struct smoke_args a;
	struct remora_chan *ch;
	bool pass = true;
	int rc;

	if (smoke_parse(argc, argv, &a))
		return 2;
	expect = (uint64_t)h->n_cn * threads * a.ops;
	per_cn = threads * a.ops * h->n_mn;
	printf("smoke: %u compute nodes x %" PRIu64 " threads x %lu ops on %u memory nodes "
	       "(backend %s, profile %s)\n",
	       h->n_cn, threads, a.ops, h->n_mn, remora_transport_backend(h->tp),
	       remora_transport_profile(h->tp));
	printf("  %-4s %-8s %12s %12s  %s\n", "mn", "counter", "expected", "actual", "");
	rc = remora_chan_open(h->tp, &ch);
	if (rc) {
		printf("  cannot open a channel: %s\n", remora_strerror(rc));
		return 1;
	}
	for (unsigned m = 0; m < h->n_mn; m++) {
		static const char *const names[] = { "faa", "cas" };
		const struct remora_node_desc *d = remora_cluster_desc(h->cluster, m);
		remora_gaddr addr[2];
		uint32_t key;
		int arc = counter_addrs(d, m, &addr[0], &addr[1], &key);

		for (unsigned c = 0; c < 2; c++) {
			uint64_t v = 0;

			rc = arc;
			if (!rc)
				rc = remora_read(ch, addr[c], key, &v, sizeof(v));
			if (rc) {
				printf("  %-4u %-8s %12" PRIu64 " %12s  %s\n", m, names[c], expect,
				       "?", remora_strerror(rc));
				pass = false;
				continue;
			}
			printf("  %-4u %-8s %12" PRIu64 " %12" PRIu64 "  %s\n", m, names[c], expect,
			       v, v == expect ? "exact" : "WRONG");
			pass &= v == expect;
		}
	}
	remora_chan_close(ch);
	printf("  %-4s %-8s %12s %12s %12s  %s\n", "cn", "pid", "faa verbs", "cas retries",
	       "ring msgs", "status");
	for (unsigned i = 0; i < n; i++) {
		uint64_t faa = 0, retries = 0, msgs = 0;
		char status[64];

		describe_exit(&res[i], status, sizeof(status));
		json_u64(res[i].json, "faa_verbs", &faa);
		json_u64(res[i].json, "cas_retries", &retries);
		json_u64(res[i].json, "msgs_recv", &msgs);
		if (res[i].ok && res[i].json && faa != per_cn) {
			snprintf(status, sizeof(status),
				 "counted %" PRIu64 " FAA verbs, expected %" PRIu64, faa, per_cn);
			pass = false;
		}
		printf("  %-4u %-8d %12" PRIu64 " %12" PRIu64 " %12" PRIu64 "  %s\n", res[i].cn,
		       (int)res[i].pid, faa, retries, msgs, status);
		pass &= res[i].ok && res[i].json;
	}
	printf("smoke: %s\n", pass ? "PASS" : "FAIL");
	return pass ? 0 : 1;
}

/* ---- compute node: counters ------------------------------------------------------------- */

struct smoke_worker {
	struct job_ctx *ctx;
	unsigned long ops;
	uint64_t cas_retries;
	int err;
	pthread_t th;
};

static int cas_increment(struct remora_chan *ch, remora_gaddr a, uint32_t key, uint64_t *guess,
			 uint64_t *retries)
{
	for (;;) {
		uint64_t old;
		int rc = remora_cas(ch, a, key, *guess, *guess + 1, &old);

		if (rc)
			return rc;
		if (old == *guess) {
			(*guess)++;
			return 0;
		}
		*guess = old;
		(*retries)++;
	}
}

static void *smoke_worker_main(void *arg)
{
	struct smoke_worker *w = arg;
	struct job_ctx *ctx = w->ctx;
	uint64_t guess[REMORA_MAX_MN] = { 0 };
	struct remora_chan *ch;
	int rc;

	rc = remora_chan_open(ctx->tp, &ch);
	if (rc) {
		w->err = rc;
		return NULL;
	}
	for (unsigned long k = 0; k < w->ops && !rc; k++) {
		for (unsigned m = 0; m < ctx->n_mn && !rc; m++) {
			const struct remora_node_desc *d = remora_cluster_desc(ctx->cluster, m);
			remora_gaddr fa, ca;
			uint32_t key;

			rc = counter_addrs(d, m, &fa, &ca, &key);
			if (!rc)
				rc = remora_faa(ch, fa, key, 1, NULL);
			if (!rc)
				rc = cas_increment(ch, ca, key, &guess[m], &w->cas_retries);
		}
	}
	w->err = rc;
	remora_chan_close(ch);
	return NULL;
}

/* ---- compute node: message ring --------------------------------------------------------- */

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* Checked every few thousand polls: stop waiting when the peer or this node is gone. */
static int ring_alive(struct job_ctx *ctx, unsigned peer, uint64_t deadline, char *err,
		      size_t errlen)
{
	struct remora_cluster_view v;

	if (!remora_cluster_lease_valid(ctx->cluster)) {
		snprintf(err, errlen, "ring: this compute node lost its lease");
		return -REMORA_EFENCED;
	}
	if (remora_cluster_view(ctx->cluster, &v) == 0 && (v.dead >> peer & 1)) {
		snprintf(err, errlen, "ring: cn %u was declared dead", peer);
		return -REMORA_ENODE;
	}
	if (now_ms() > deadline) {
		snprintf(err, errlen, "ring: no progress from cn %u for the --wait-ms limit", peer);
		return -ETIMEDOUT;
	}
	return 0;
}

static int ring_send(struct job_ctx *ctx, struct remora_chan *ch, unsigned next,
		     const struct ring_msg *m, uint64_t deadline, char *err, size_t errlen)
{
	for (unsigned spins = 1;; spins++) {
		int rc = remora_msg_send(ch, (uint16_t)next, m, sizeof(*m));

		if (rc != -EAGAIN) {
			if (rc)
				snprintf(err, errlen, "ring: send to cn %u: %s", next,
					 remora_strerror(rc));
			return rc;
		}
		if (spins % 4096 == 0) {
			rc = ring_alive(ctx, next, deadline, err, errlen);
			if (rc)
				return rc;
			sched_yield();
		}
	}
}

static int ring_recv(struct job_ctx *ctx, struct remora_chan *ch, unsigned prev,
		     uint32_t round, uint64_t deadline, char *err, size_t errlen)
{
	for (unsigned spins = 1;; spins++) {
		struct ring_msg m;
		uint16_t src;
		int rc = remora_msg_recv(ch, &src, &m, sizeof(m));

		if (rc >= 0) {
			if (rc != sizeof(m) || m.magic != SMOKE_RING_MAGIC || src != prev ||
			    m.from != prev || m.round != round) {
				snprintf(err, errlen,
					 "ring: got %d bytes (round %u) from cn %u, expected "
					 "round %u from cn %u",
					 rc, m.round, src, round, prev);
				return -REMORA_EPROTO;
			}
			return 0;
		}
		if (rc != -EAGAIN) {
			snprintf(err, errlen, "ring: receive: %s", remora_strerror(rc));
			return rc;
		}
		if (spins % 4096 == 0) {
			rc = ring_alive(ctx, prev, deadline, err, errlen);
			if (rc)
				return rc;
			sched_yield();
		}
	}
}

static int ring_run(struct job_ctx *ctx, const struct smoke_args *a, uint64_t *done,
		    char *err, size_t errlen)
{
	unsigned me = (unsigned)ctx->cn, next = (me + 1) % ctx->n_cn;
	unsigned prev = (me + ctx->n_cn - 1) % ctx->n_cn;
	struct remora_chan *ch;
	int rc;

	rc = remora_chan_open(ctx->tp, &ch);
	if (rc) {
		snprintf(err, errlen, "ring: channel: %s", remora_strerror(rc));
		return rc;
	}
	for (uint32_t r = 0; r < a->rounds && !rc; r++) {
		struct ring_msg m = { .magic = SMOKE_RING_MAGIC, .round = r, .from = me };
		uint64_t deadline = now_ms() + a->wait_ms;

		rc = ring_send(ctx, ch, next, &m, deadline, err, errlen);
		if (!rc)
			rc = ring_recv(ctx, ch, prev, r, deadline, err, errlen);
		if (!rc)
			(*done)++;
	}
	remora_chan_close(ch);
	return rc;
}

/* Copies s into a JSON string body (quotes and control characters escaped). */
static void json_escape(const char *s, char *out, size_t len)
{
	size_t o = 0;

	for (; *s && o + 7 < len; s++) {
		unsigned char c = (unsigned char)*s;

		if (c == '"' || c == '\\') {
			out[o++] = '\\';
			out[o++] = (char)c;
		} else if (c < 0x20) {
			o += (size_t)snprintf(out + o, len - o, "\\u%04x", c);
		} else {
			out[o++] = (char)c;
		}
	}
	out[o] = '\0';
}

static int smoke_run(struct job_ctx *ctx, int argc, char **argv)
{
	unsigned threads = (unsigned)remora_params_int(ctx->params, REMORA_P_THREADS);
	struct smoke_worker *w;
	struct smoke_args a;
	struct remora_caps caps = { .size = sizeof(caps) };
	struct remora_counters cnt;
	char err[256] = "", esc[512];
	uint64_t rounds_done = 0, retries = 0;
	const char *ring_state = "ok";
	int rc = 0, first_err = 0;

	if (smoke_parse(argc, argv, &a))
		return -REMORA_ECONFIG;
	w = calloc(threads, sizeof(*w));
	if (!w)
		return -ENOMEM;
	for (unsigned t = 0; t < threads; t++) {
		w[t].ctx = ctx;
		w[t].ops = a.ops;
		rc = -pthread_create(&w[t].th, NULL, smoke_worker_main, &w[t]);
		if (rc) {
			threads = t;
			first_err = rc;
			snprintf(err, sizeof(err), "thread: %s", strerror(-rc));
			break;
		}
	}
	remora_transport_caps(ctx->tp, &caps);
	if (!(caps.flags & REMORA_CAP_MSG)) {
		ring_state = "unsupported";
	} else if (!first_err) {
		rc = ring_run(ctx, &a, &rounds_done, err, sizeof(err));
		if (rc) {
			ring_state = "failed";
			first_err = rc;
		}
	}
	for (unsigned t = 0; t < threads; t++) {
		pthread_join(w[t].th, NULL);
		retries += w[t].cas_retries;
		if (w[t].err && !first_err) {
			first_err = w[t].err;
			snprintf(err, sizeof(err), "thread %u: %s", t, remora_strerror(w[t].err));
		}
	}
	free(w);
	remora_transport_counters(ctx->tp, &cnt);
	json_escape(err, esc, sizeof(esc));
	job_emit(ctx,
			"{\"job\":\"smoke\",\"cn\":%d,\"pid\":%d,\"threads\":%u,\"ops\":%lu,"
			"\"mn\":%u,\"faa_verbs\":%" PRIu64 ",\"cas_verbs\":%" PRIu64
			",\"cas_retries\":%" PRIu64 ",\"ring\":\"%s\",\"ring_rounds\":%" PRIu64
			",\"msgs_sent\":%" PRIu64 ",\"msgs_recv\":%" PRIu64 ",\"error\":\"%s\"}",
			ctx->cn, (int)getpid(), threads, a.ops, ctx->n_mn,
			remora_counters_total(&cnt, REMORA_OP_FAA),
			remora_counters_total(&cnt, REMORA_OP_CAS), retries, ring_state,
			rounds_done, cnt.msgs_sent, cnt.msgs_recv, esc);
	if (first_err)
		fprintf(stderr, "remora cn %d: smoke: %s\n", ctx->cn, err);
	return first_err;
}

const struct job job_smoke = {
	.name = "smoke",
	.help = "FAA and CAS counters on every memory node plus a message ring; exact totals",
	.args = smoke_args_table,
	.check = smoke_check,
	.setup = smoke_setup,
	.run = smoke_run,
	.merge = smoke_merge,
};
