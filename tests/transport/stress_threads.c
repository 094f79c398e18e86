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

#define NT 4
#define K 4000u
#define KF 200u
#define FAA_OFF 0u
#define CAS_OFF 64u
#define MIX_OFF 128u
#define FLD_OFF 192u

struct worker {
	struct remora_transport *tp;
	uint32_t key;
	unsigned field;
	bool mcas;
	char why[160]; /* empty: passed */
};

static int stop_monitor;

static remora_gaddr ga(uint64_t off)
{
	return remora_gaddr_make(0, off);
}

static int cas_increment(struct remora_chan *ch, uint64_t off, uint32_t key, uint64_t *cur)
{
	for (;;) {
		uint64_t old = 0;
		int rc = remora_cas(ch, ga(off), key, *cur, *cur + 1, &old);

		if (rc)
			return rc;
		if (old == *cur) {
			*cur = old + 1;
			return 0;
		}
		*cur = old;
	}
}

#define FAIL(w, ...)                                                                               \
	do {                                                                                       \
		snprintf((w)->why, sizeof((w)->why), __VA_ARGS__);                                 \
		goto out;                                                                          \
	} while (0)

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	struct remora_chan *ch = NULL;
	uint64_t cur = 0, mix = 0, shift = 8ull * w->field, fmask = 0xffull << (8 * w->field);
	int rc;

	rc = remora_chan_open(w->tp, &ch);
	if (rc)
		FAIL(w, "chan_open = %d", rc);
	for (unsigned i = 0; i < K; i++) {
		rc = remora_faa(ch, ga(FAA_OFF), w->key, 1, NULL);
		if (rc)
			FAIL(w, "FAA = %d (%s)", rc, remora_strerror(rc));
		rc = cas_increment(ch, CAS_OFF, w->key, &cur);
		if (rc)
			FAIL(w, "CAS = %d (%s)", rc, remora_strerror(rc));
		rc = i % 2 ? remora_faa(ch, ga(MIX_OFF), w->key, 1, NULL)
			   : cas_increment(ch, MIX_OFF, w->key, &mix);
		if (rc)
			FAIL(w, "mixed = %d (%s)", rc, remora_strerror(rc));
	}
	for (uint64_t v = 0; w->mcas && v < KF; v++) {
		uint64_t old = 0;

		rc = remora_mcas(ch, ga(FLD_OFF), w->key, v << shift, fmask, (v + 1) << shift, fmask,
				 &old);
		if (rc)
			FAIL(w, "MCAS = %d (%s)", rc, remora_strerror(rc));
		if (((old & fmask) >> shift) != v)
			FAIL(w, "field %u: MCAS saw %llu, expected %llu", w->field,
			     (unsigned long long)((old & fmask) >> shift), (unsigned long long)v);
	}
out:
	remora_chan_close(ch);
	return NULL;
}

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

static uint64_t word(const uint8_t *base, uint64_t off)
{
	uint64_t v;

	memcpy(&v, base + off, 8);
	return v;
}

static int check(const uint8_t *base, bool mcas)
{
	uint64_t want = (uint64_t)NT * K;
	int bad = 0;

	if (word(base, FAA_OFF) != want || word(base, CAS_OFF) != want ||
	    word(base, MIX_OFF) != want) {
		fprintf(stderr, "FAIL: FAA %llu, CAS %llu, mixed %llu, want %llu each\n",
			(unsigned long long)word(base, FAA_OFF),
			(unsigned long long)word(base, CAS_OFF),
			(unsigned long long)word(base, MIX_OFF), (unsigned long long)want);
		bad = 1;
	}
	for (unsigned f = 0; mcas && f < NT; f++)
		if (((word(base, FLD_OFF) >> (8 * f)) & 0xff) != KF) {
			fprintf(stderr, "FAIL: field %u holds %llu, want %u\n", f,
				(unsigned long long)((word(base, FLD_OFF) >> (8 * f)) & 0xff), KF);
			bad = 1;
		}
	return bad;
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
	struct worker w[NT];
	pthread_t th[NT], mon;
	uint32_t key;
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
	memset(remora_pool_base(pool), 0, 4096);
	pthread_create(&mon, NULL, monitor_main, tp);
	for (unsigned i = 0; i < NT; i++) {
		w[i] = (struct worker){ .tp = tp, .key = key, .field = i,
					.mcas = caps.ops & (1u << REMORA_OP_MCAS) };
		pthread_create(&th[i], NULL, worker_main, &w[i]);
	}
	for (unsigned i = 0; i < NT; i++) {
		pthread_join(th[i], NULL);
		if (w[i].why[0]) {
			fprintf(stderr, "FAIL: thread %u: %s\n", i, w[i].why);
			bad = 1;
		}
	}
	__atomic_store_n(&stop_monitor, 1, __ATOMIC_RELEASE);
	pthread_join(mon, NULL);
	bad |= check(remora_pool_base(pool), caps.ops & (1u << REMORA_OP_MCAS));
	if (!bad)
		printf("PASS: %u threads x %u FAA + %u CAS loops + %u mixed + %u MCAS (atomics=%s)\n",
		       NT, K, K, K, KF, mode);
	remora_pool_close(pool, true);
out_tp:
	remora_transport_close(tp);
	remora_transport_cleanup(&cfg);
out_dir:
	nftw(dir, rm_entry, 8, FTW_DEPTH | FTW_PHYS);
	return bad;
}
