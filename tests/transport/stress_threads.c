/* SPDX-License-Identifier: MIT */
/*
 * Threads of one process, each with its own channel on one transport: FAA, CAS-increment
 * loops and masked-CAS bit fields add up exactly, while a monitor thread reads the transport's
 * counters and opens and closes channels. A plain program, not a criterion suite, because
 * criterion cannot run under ThreadSanitizer (its sandbox arena collides with TSan's memory
 * layout, Snaipe/Criterion#274): this is the transport's ThreadSanitizer target.
 *
 * Usage: stress_threads [native|arbiter]   (atomics mode; exit 0 pass, 1 fail, 77 skip)
 */
#include <errno.h>
#include <ftw.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <remora/transport.h>

#include "counting.h"

#define NT 4
#define K 4000u

static int stop_monitor;

/* Reads counters and churns channels while the workers run. */
static void *monitor_main(void *arg)
{
	struct remora_transport *tp = arg;
	struct remora_counters k;
	uint64_t last = 0;

	while (!__atomic_load_n(&stop_monitor, __ATOMIC_ACQUIRE)) {
		struct remora_chan *ch;

		remora_transport_counters(tp, &k);
		if (k.verbs[0][REMORA_OP_FAA] < last) {
			fprintf(stderr, "FAIL: FAA counter went backwards\n");
			exit(1);
		}
		last = k.verbs[0][REMORA_OP_FAA];
		if (remora_chan_open(tp, &ch) == 0)
			remora_chan_close(ch);
	}
	return NULL;
}

static int rm_entry(const char *p, const struct stat *s, int t, struct FTW *f)
{
	(void)s, (void)t, (void)f;
	remove(p);
	return 0;
}

int main(int argc, char **argv)
{
	const char *mode = argc > 1 ? argv[1] : "native";
	const char *tmp = getenv("TMPDIR");
	char dir[512], cluster[32];
	struct remora_transport_cfg cfg = { .size = sizeof(cfg), .self_cn = 0, .numa_node = -1 };
	struct remora_pool_spec spec = { .size = sizeof(spec), .node = 0, .bytes = 65536,
					 .flags = REMORA_POOL_CREATE | REMORA_POOL_UNLINK_ON_CLOSE };
	struct remora_transport *tp = NULL;
	struct remora_pool *pool = NULL;
	struct remora_node_desc desc;
	struct remora_caps caps = { .size = sizeof(caps) };
	struct cw_worker w[NT];
	pthread_t th[NT], mon;
	uint32_t key;
	char why[160];
	int rc, bad = 0;

	snprintf(dir, sizeof(dir), "%s/remora-stress-XXXXXX", tmp && *tmp ? tmp : "/tmp");
	if (!mkdtemp(dir)) {
		perror("mkdtemp");
		return 1;
	}
	snprintf(cluster, sizeof(cluster), "s%ld", (long)getpid());
	cfg.cluster = cluster;
	cfg.dir = dir;
	cfg.atomics = mode;
	rc = remora_transport_open(&cfg, &tp);
	if (rc == -REMORA_ECONFIG || rc == -ENODEV || rc == -EOPNOTSUPP) {
		printf("SKIP: %s\n", remora_last_error());
		bad = 77;
		goto out_dir;
	}
	if (rc) {
		fprintf(stderr, "FAIL: transport_open = %d: %s\n", rc, remora_last_error());
		bad = 1;
		goto out_dir;
	}
	remora_transport_caps(tp, &caps);
	rc = remora_pool_open(tp, &spec, &pool);
	if (!rc)
		rc = remora_pool_reg(pool, 0, spec.bytes, &key);
	if (!rc)
		rc = remora_pool_describe(pool, &desc);
	if (!rc)
		rc = remora_transport_attach(tp, &desc);
	if (rc) {
		fprintf(stderr, "FAIL: setup = %d: %s\n", rc, remora_transport_errmsg(tp));
		bad = 1;
		goto out_tp;
	}
	memset(remora_pool_base(pool), 0, CW_BYTES);
	pthread_create(&mon, NULL, monitor_main, tp);
	for (unsigned i = 0; i < NT; i++) {
		w[i] = (struct cw_worker){ .tp = tp, .key = key, .field = i, .k = K,
					   .mcas = caps.ops & (1u << REMORA_OP_MCAS) };
		pthread_create(&th[i], NULL, cw_worker_main, &w[i]);
	}
	for (unsigned i = 0; i < NT; i++) {
		pthread_join(th[i], NULL);
		if (w[i].file) {
			fprintf(stderr, "FAIL: thread %u: %s (%s:%d)\n", i, w[i].why, w[i].file,
				w[i].line);
			bad = 1;
		}
	}
	__atomic_store_n(&stop_monitor, 1, __ATOMIC_RELEASE);
	pthread_join(mon, NULL);
	if (cw_check(remora_pool_base(pool), NT, K, caps.ops & (1u << REMORA_OP_MCAS), why,
		     sizeof(why))) {
		fprintf(stderr, "FAIL: %s\n", why);
		bad = 1;
	}
	if (!bad)
		printf("PASS: %u threads x %u FAA + %u CAS loops + %u mixed + %u MCAS (atomics=%s)\n",
		       NT, K, K, K, CW_KF, mode);
	remora_pool_close(pool, true);
out_tp:
	remora_transport_close(tp);
	remora_transport_cleanup(&cfg);
out_dir:
	nftw(dir, rm_entry, 8, FTW_DEPTH | FTW_PHYS);
	return bad;
}
