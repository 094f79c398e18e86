/* SPDX-License-Identifier: MIT */
/*
 * An application of the lock service (<remora/lock.h>) alone, without transactions: writer
 * coroutines add 1 to both words of a pair in memory-node memory under an exclusive lock
 * (one READ, then one WRITE), and reader coroutines check under a shared lock that the two
 * words are equal (two READs). Verbs go through the ConnectX-3 cost model, so a coroutine
 * parks in every verb and the others run: without the lock, updates are lost and readers see
 * the pair torn. At the end both words must equal the number of increments.
 *
 * usage: remora-example-lock-pair [TYPE] [--no-lock]
 *   TYPE       a lock type (default declock); --no-lock skips the locks: the check must fail.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <remora/lock.h>
#include <remora/remora.h>

#define WRITERS 6
#define READERS 2
#define ROUNDS 300
#define N_LOCKS 4

struct app {
	struct remora_chan *ch;
	struct remora_lock_svc *svc;
	remora_gaddr pair;
	uint32_t key;
	bool no_lock;
	unsigned torn;
	int failed;
};

static int lock_if(struct app *a, struct remora_lock_cli *c, enum remora_lock_mode m,
		   struct remora_lock_hold *h)
{
	return a->no_lock ? 0 : remora_lock_acquire(c, 1, m, h);
}

static int unlock_if(struct app *a, struct remora_lock_cli *c, const struct remora_lock_hold *h)
{
	return a->no_lock ? 0 : remora_lock_release(c, h);
}

/* One READ or WRITE that parks this coroutine until it completes (the others run meanwhile). */
static int verb(struct app *a, enum remora_op op, remora_gaddr at, void *buf, uint32_t len)
{
	struct remora_wr wr = { .raddr = at, .rkey = a->key, .len = len, .op = op, .local = buf };

	return remora_co_exec(a->ch, &wr, 1);
}

/* One increment of both words, or one check that they are equal. */
static int round_once(struct app *a, struct remora_lock_cli *c, bool writer)
{
	struct remora_lock_hold h;
	uint64_t v[2];
	int rc = lock_if(a, c, writer ? REMORA_LOCK_X : REMORA_LOCK_S, &h);

	if (rc)
		return rc;
	if (writer) {
		rc = verb(a, REMORA_OP_READ, a->pair, v, sizeof(v));
		v[0]++, v[1]++;
		if (!rc)
			rc = verb(a, REMORA_OP_WRITE, a->pair, v, sizeof(v));
	} else {
		rc = verb(a, REMORA_OP_READ, a->pair, &v[0], 8);
		if (!rc)
			rc = verb(a, REMORA_OP_READ, a->pair + 8, &v[1], 8);
		a->torn += !rc && v[0] != v[1];
	}
	int urc = unlock_if(a, c, &h);

	return rc ? rc : urc;
}

static void coordinator(void *arg)
{
	struct app *a = arg;
	unsigned me = remora_coro_index(remora_coro_self());
	struct remora_lock_cli *c;
	int rc = remora_lock_cli_open(a->svc, a->ch, NULL, me, &c);

	for (unsigned i = 0; rc == 0 && i < ROUNDS && !a->failed; i++)
		rc = round_once(a, c, me < WRITERS);
	if (rc) {
		fprintf(stderr, "lock-pair: coordinator %u: %s\n", me, remora_strerror(rc));
		a->failed = 1;
	}
	if (c)
		remora_lock_cli_close(c);
}

/* Formats the lock table, runs the coroutines and checks the pair: 0, 1 (check failed) or
 * a negative error. */
static int run(struct app *a, const char *type, remora_gaddr table)
{
	struct remora_lock_cfg cfg = { .size = sizeof(cfg), .type = type, .n_cn = 1,
				       .base = table, .rkey = a->key, .n_locks = N_LOCKS };
	struct remora_lock_cli *fmt = NULL;
	struct remora_sched *sched = NULL;
	uint64_t v[2] = { 0, 0 };
	int rc = remora_lock_svc_create(&cfg, &a->svc);

	if (rc) {
		fprintf(stderr, "lock-pair: %s\n", remora_lock_errmsg());
		return rc;
	}
	rc = remora_lock_cli_open(a->svc, a->ch, NULL, 0, &fmt);
	if (!rc)
		rc = remora_lock_format(fmt);
	if (fmt)
		remora_lock_cli_close(fmt);
	if (!rc)
		rc = remora_write(a->ch, a->pair, a->key, v, sizeof(v));
	if (!rc)
		rc = remora_sched_create(a->ch, 0, &sched);
	for (unsigned i = 0; !rc && i < WRITERS + READERS; i++)
		rc = remora_sched_spawn(sched, coordinator, a);
	if (!rc)
		rc = remora_sched_run(sched);
	if (sched)
		remora_sched_destroy(sched);
	if (!rc)
		rc = remora_read(a->ch, a->pair, a->key, v, sizeof(v));
	remora_lock_svc_destroy(a->svc);
	if (rc || a->failed)
		return rc ? rc : -EIO;
	printf("lock-pair: %s%s: pair %" PRIu64 " %" PRIu64 " (expected %u each), %u torn reads\n",
	       type, a->no_lock ? " (no locks)" : "", v[0], v[1], WRITERS * ROUNDS, a->torn);
	if (v[0] == WRITERS * ROUNDS && v[1] == v[0] && a->torn == 0)
		return 0;
	fprintf(stderr, "lock-pair: check failed: lost updates or torn reads\n");
	return 1; /* not an error code: the run worked and its result is wrong */
}

/* A memory node in this process (a pool on the default backend), then run(). */
static int with_pool(struct app *a, const char *type)
{
	char cluster[32];
	struct remora_transport_cfg tcfg = { .size = sizeof(tcfg), .cluster = cluster,
					     .self_cn = 0, .numa_node = -1, .profile = "cx3" };
	struct remora_pool_spec spec = { .size = sizeof(spec), .node = 0, .bytes = 1 << 20,
					 .flags = REMORA_POOL_CREATE | REMORA_POOL_EXCL };
	size_t stride = remora_lock_stride(type);
	struct remora_transport *tp;
	struct remora_node_desc desc;
	struct remora_pool *pool;
	int rc;

	if (!stride) {
		fprintf(stderr, "lock-pair: unknown lock type '%s'\n", type);
		return -EINVAL;
	}
	snprintf(cluster, sizeof(cluster), "lockpair%d", (int)getpid());
	rc = remora_transport_open(&tcfg, &tp);
	if (rc) {
		fprintf(stderr, "lock-pair: %s\n", remora_last_error());
		return rc;
	}
	rc = remora_pool_open(tp, &spec, &pool);
	if (!rc) {
		rc = remora_pool_reg(pool, 0, remora_pool_bytes(pool), &a->key);
		if (!rc)
			rc = remora_pool_describe(pool, &desc);
		if (!rc)
			rc = remora_transport_attach(tp, &desc);
		if (!rc)
			rc = remora_chan_open(tp, &a->ch);
		/* The pair first, the lock table after it. */
		a->pair = remora_gaddr_make(0, 0);
		if (!rc)
			rc = run(a, type, remora_gaddr_make(0, 64));
		if (a->ch)
			remora_chan_close(a->ch);
		remora_pool_close(pool, true);
	}
	if (rc < 0)
		fprintf(stderr, "lock-pair: %s (%s)\n", remora_strerror(rc),
			remora_transport_errmsg(tp));
	remora_transport_cleanup(&tcfg);
	remora_transport_close(tp);
	return rc;
}

int main(int argc, char **argv)
{
	struct app a = { 0 };
	const char *type = "declock";

	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--no-lock") == 0)
			a.no_lock = true;
		else if (argv[i][0] != '-')
			type = argv[i];
		else {
			fprintf(stderr, "usage: %s [TYPE] [--no-lock]\n", argv[0]);
			return 2;
		}
	}
	return with_pool(&a, type) ? 1 : 0;
}
