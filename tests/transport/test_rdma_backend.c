/* SPDX-License-Identifier: MIT */
/*
 * rdma backend specifics (every test skips on other backends): masked-CAS emulated by READ +
 * CAS and counted exactly, verbs behind an emulated masked-CAS kept in posting order, the
 * emulation atomic across processes; run-time configuration errors with one-line messages
 * (device, port, GID index, MTU), a device whose port is down (refused by name, passed over by
 * the automatic choice), unreachable and malformed memory-node locators; verbs too large for
 * the bounce arena (the caller's buffer is registered) and back-pressure when the arena is
 * full, and a batch that alone outgrows the arena; a deregistered region (-REMORA_EBADKEY, the
 * channel recovers) and a dead memory node (-EIO in bounded time, never a hang; attaching it
 * again fails). FAA and CAS loops from threads of several processes
 * are the conformance suite's (test_concurrency.c), at full size here too.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "tutil.h"

static struct tu_ctx c;

TestSuite(rdma, .fini = tu_fini, .timeout = TU_TIMEOUT);

static void need_rdma(void)
{
	if (strcmp(tu_backend(), "rdma") != 0)
		tu_skip("rdma backend only (backend is %s)", tu_backend());
}

static remora_gaddr ga(unsigned node, uint64_t off)
{
	return remora_gaddr_make((uint16_t)node, off);
}

static uint64_t word(uint64_t off)
{
	uint64_t v;

	memcpy(&v, c.mn[0].base + off, 8);
	return v;
}

static void set_word(uint64_t off, uint64_t v)
{
	memcpy(c.mn[0].base + off, &v, 8);
}

static int64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---- capabilities and masked-CAS ---------------------------------------------------------- */

Test(rdma, caps_label_mcas_emulated)
{
	struct remora_caps caps;

	need_rdma();
	tu_open(&c, 0, 1, TU_POOL_BYTES);
	tu_caps(c.tp, &caps);
	cr_assert(caps.ops & (1u << REMORA_OP_MCAS), "masked-CAS not offered");
	cr_assert(caps.emulated_ops & (1u << REMORA_OP_MCAS), "masked-CAS not labelled emulated");
	cr_assert_not(caps.flags & REMORA_CAP_NATIVE_MCAS, "upstream verbs have no masked-CAS");
	cr_assert_not(caps.flags & REMORA_CAP_COHERENT_ATOMICS,
		      "NIC atomics are not atomic against CPU atomics");
	cr_assert(caps.flags & REMORA_CAP_FENCING);
	cr_assert(caps.flags & REMORA_CAP_MSG);
}

/* Emulated verbs of node 0 since the channel opened, by class. */
static void emulated(uint64_t *reads, uint64_t *cas)
{
	struct remora_counters k;

	remora_chan_counters(c.ch, &k);
	*reads = k.emulated[0][REMORA_OP_READ];
	*cas = k.emulated[0][REMORA_OP_CAS];
}

Test(rdma, mcas_emulation_counted_exactly)
{
	uint64_t old = 0, r0, c0, r1, c1;
	uint32_t k;
	int rc;

	need_rdma();
	tu_open(&c, 0, 1, TU_POOL_BYTES);
	k = c.mn[0].key;
	set_word(64, 0xab00);

	/* Compare holds, swap changes the word: one READ, one CAS. */
	emulated(&r0, &c0);
	rc = remora_mcas(c.ch, ga(0, 64), k, 0xab00, 0xff00, 0x00cd, 0x00ff, &old);
	cr_assert_eq(rc, 0, "mcas = %d (%s)", rc, remora_strerror(rc));
	emulated(&r1, &c1);
	cr_assert_eq(old, 0xab00);
	cr_assert_eq(word(64), 0xabcd);
	cr_assert_eq(r1 - r0, 1, "%llu emulated READs for one uncontended MCAS",
		     (unsigned long long)(r1 - r0));
	cr_assert_eq(c1 - c0, 1, "%llu emulated CAS for one uncontended MCAS",
		     (unsigned long long)(c1 - c0));

	/* Compare fails under the mask: the READ alone decides, no CAS. */
	rc = remora_mcas(c.ch, ga(0, 64), k, 0x1100, 0xff00, 0, ~0ull, &old);
	cr_assert_eq(rc, 0);
	emulated(&r0, &c0);
	cr_assert_eq(old, 0xabcd);
	cr_assert_eq(word(64), 0xabcd, "a failed masked compare changed the word");
	cr_assert_eq(r0 - r1, 1);
	cr_assert_eq(c0 - c1, 0, "a failed masked compare still issued a CAS");

	/* Compare holds but the masked swap writes what is there: nothing to do, no CAS. */
	rc = remora_mcas(c.ch, ga(0, 64), k, 0xab00, 0xff00, 0x00cd, 0x00ff, &old);
	cr_assert_eq(rc, 0);
	emulated(&r1, &c1);
	cr_assert_eq(old, 0xabcd);
	cr_assert_eq(r1 - r0, 1);
	cr_assert_eq(c1 - c0, 0, "a no-op swap still issued a CAS");
}

Test(rdma, verbs_behind_an_mcas_keep_posting_order)
{
	uint64_t w5 = 5, w9 = 9, r[3] = { 0 }, old = 0;
	struct remora_wr wrs[6];
	uint32_t k;
	int rc;

	need_rdma();
	tu_open(&c, 0, 1, TU_POOL_BYTES);
	k = c.mn[0].key;
	set_word(128, 0);
	/* WRITE 5, MCAS 5 -> 7, READ (7), WRITE 9, READ (9), FAA +1 (old 9): one post. */
	wrs[0] = tu_wr_write(ga(0, 128), k, &w5, 8);
	wrs[1] = tu_wr_mcas(ga(0, 128), k, 5, ~0ull, 7, ~0ull, &old);
	wrs[2] = tu_wr_read(ga(0, 128), k, &r[0], 8);
	wrs[3] = tu_wr_write(ga(0, 128), k, &w9, 8);
	wrs[4] = tu_wr_read(ga(0, 128), k, &r[1], 8);
	wrs[5] = tu_wr_faa(ga(0, 128), k, 1, &r[2]);
	w5 = 5;
	rc = remora_exec(c.ch, wrs, 6);
	cr_assert_eq(rc, 0, "exec = %d (%s)", rc, remora_strerror(rc));
	cr_assert_eq(old, 5, "MCAS did not see the WRITE before it (old %llu)",
		     (unsigned long long)old);
	cr_assert_eq(r[0], 7, "READ after the MCAS saw %llu", (unsigned long long)r[0]);
	cr_assert_eq(r[1], 9, "READ after the second WRITE saw %llu", (unsigned long long)r[1]);
	cr_assert_eq(r[2], 9, "FAA after the READ saw %llu", (unsigned long long)r[2]);
	cr_assert_eq(word(128), 10);
}

#define FIELD_ROUNDS 150u
#define FIELD_PROCS 3

struct field_arg {
	int cn;
	unsigned field;
};

/* Increments an 8-bit field of a shared word with masked-CAS, FIELD_ROUNDS times. */
static int field_worker(void *argp, int rd, int wr)
{
	struct field_arg *a = argp;
	struct remora_transport *tp;
	struct remora_chan *ch;
	uint64_t mask = UINT64_C(0xff) << (8 * a->field), cur = 0, old;
	int rc;

	rc = tu_transport_try(a->cn, NULL, &tp);
	TU_CHILD_CHECK(rc == 0, "transport_open = %d", rc);
	rc = remora_transport_attach(tp, &c.mn[0].desc);
	TU_CHILD_CHECK(rc == 0, "attach = %d (%s)", rc, remora_strerror(rc));
	rc = remora_chan_open(tp, &ch);
	TU_CHILD_CHECK(rc == 0, "chan_open = %d", rc);
	TU_CHILD_CHECK(tu_child_ready(rd, wr) == 0, "no start signal");
	for (unsigned i = 0; i < FIELD_ROUNDS;) {
		uint64_t next = (cur & mask) + (UINT64_C(1) << (8 * a->field));

		rc = remora_mcas(ch, ga(0, 256), c.mn[0].key, cur, mask, next, mask, &old);
		TU_CHILD_CHECK(rc == 0, "mcas = %d (%s)", rc, remora_strerror(rc));
		if (((old ^ cur) & mask) == 0) {
			i++;
			cur = (old & ~mask) | (next & mask);
		} else {
			cur = old;
		}
	}
	remora_chan_close(ch);
	remora_transport_close(tp);
	return 0;
}

/* Three processes on one word, each its own byte: the emulation loses no update. */
Test(rdma, mcas_emulation_atomic_across_processes)
{
	struct field_arg a[FIELD_PROCS];
	uint64_t v;
	unsigned which;
	int rc;

	need_rdma();
	tu_open_pools(&c, -1, 1, TU_POOL_BYTES);
	set_word(256, UINT64_C(0x5a00000000000000)); /* a byte nobody owns must survive */
	for (int i = 0; i < FIELD_PROCS; i++)
		a[i] = (struct field_arg){ .cn = 1 + i, .field = (unsigned)i };
	rc = tu_run_together(field_worker, a, sizeof(a[0]), FIELD_PROCS, &which);
	cr_assert_eq(rc, 0, "worker %u failed (exit %d, its line is above)", which, rc);
	v = word(256);
	for (unsigned f = 0; f < FIELD_PROCS; f++)
		cr_assert_eq((v >> (8 * f)) & 0xff, FIELD_ROUNDS, "field %u holds %llu, want %u", f,
			     (unsigned long long)((v >> (8 * f)) & 0xff), FIELD_ROUNDS);
	cr_assert_eq(v >> 56, 0x5a, "a byte outside every mask changed");
}

/* ---- configuration errors ----------------------------------------------------------------- */

/*
 * Opens a transport with name=value: a backend parameter (rdma_*) in the cfg, anything else as
 * an environment variable of the core; returns its code and copies the message.
 */
static int open_with(const char *name, const char *value, char *msg, size_t size)
{
	struct remora_kv kv = { name, value };
	struct remora_transport_cfg cfg;
	struct remora_transport *tp = NULL;
	bool param = strncmp(name, "rdma_", 5) == 0;
	int rc;

	tu_cfg(&cfg, 0);
	if (param) {
		cfg.backend_params = &kv;
		cfg.n_backend_params = 1;
	} else {
		setenv(name, value, 1);
	}
	rc = remora_transport_open(&cfg, &tp);
	if (!param)
		unsetenv(name);
	snprintf(msg, size, "%s", remora_last_error());
	if (rc == 0)
		remora_transport_close(tp);
	return rc;
}

Test(rdma, config_errors_are_one_line)
{
	static const struct {
		const char *name, *value, *needle;
		int want;
	} cases[] = {
		{ "rdma_device", "nosuchdev9", "nosuchdev9", -ENODEV },
		{ "rdma_port", "0", "rdma_port", -REMORA_ECONFIG },
		{ "rdma_port", "200", "rdma_port", -REMORA_ECONFIG },
		{ "rdma_gid_index", "100000", "GID", -REMORA_ECONFIG },
		{ "rdma_gid_index", "x", "rdma_gid_index", -REMORA_ECONFIG },
		{ "rdma_mtu", "3000", "rdma_mtu", -REMORA_ECONFIG },
		{ "rdma_qp_timeout", "0", "rdma_qp_timeout", -REMORA_ECONFIG },
		{ "rdma_qp_timeout", "32", "rdma_qp_timeout", -REMORA_ECONFIG },
		{ "rdma_colour", "blue", "rdma_colour", -REMORA_ECONFIG },
		{ "REMORA_ATOMICS", "arbiter", "arbiter", -REMORA_ECONFIG },
	};
	char msg[512];

	need_rdma();
	for (unsigned i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		int rc = open_with(cases[i].name, cases[i].value, msg, sizeof(msg));

		cr_assert_eq(rc, cases[i].want, "%s=%s: open = %d (%s), want %d: %s", cases[i].name,
			     cases[i].value, rc, remora_strerror(rc), cases[i].want, msg);
		cr_assert(strstr(msg, cases[i].needle), "%s=%s: message does not name '%s': %s",
			  cases[i].name, cases[i].value, cases[i].needle, msg);
		cr_assert_null(strchr(msg, '\n'), "message is not one line: %s", msg);
	}
	/* The first active device by name works the same as the automatic choice. */
	cr_assert_eq(open_with("rdma_mtu", "256", msg, sizeof(msg)), 0, "MTU 256: %s", msg);
	cr_assert_eq(open_with("rdma_qp_timeout", "19", msg, sizeof(msg)), 0, "timeout 19: %s",
		     msg);
}

/*
 * A device whose only port is down: the soft-RoCE guest makes rxedown on a netdev it keeps
 * down, before rxe0, so that ibverbs lists it first. Named, it is refused with -ENETDOWN and one
 * line naming it and its port's state; left to the automatic choice, it is passed over (were it
 * chosen, opening would fail: its netdev has no address for rdma_cm).
 */
#define DOWN_DEV "rxedown"

static bool rdma_device_exists(const char *name)
{
	char path[128];

	snprintf(path, sizeof(path), "/sys/class/infiniband/%s", name);
	return access(path, F_OK) == 0;
}

Test(rdma, device_with_port_down_refused_by_name_and_passed_over)
{
	struct remora_transport *tp = NULL;
	char msg[512];
	int rc;

	need_rdma();
	if (!rdma_device_exists(DOWN_DEV))
		tu_skip("no RDMA device %s here (the soft-RoCE guest makes it on a netdev kept down)",
			DOWN_DEV);
	rc = open_with("rdma_device", DOWN_DEV, msg, sizeof(msg));
	cr_assert_eq(rc, -ENETDOWN, "rdma_device=%s: open = %d (%s), want -ENETDOWN: %s",
		     DOWN_DEV, rc, remora_strerror(rc), msg);
	cr_assert(strstr(msg, "RDMA device " DOWN_DEV " "), "message does not name %s: %s",
		  DOWN_DEV, msg);
	cr_assert(strcasestr(msg, "port 1 down"), "message does not say its port is down: %s",
		  msg);
	cr_assert_null(strchr(msg, '\n'), "message is not one line: %s", msg);

	rc = tu_transport_try(0, NULL, &tp);
	cr_assert_eq(rc, 0, "automatic device choice with %s present: open = %d (%s): %s",
		     DOWN_DEV, rc, remora_strerror(rc), remora_last_error());
	remora_transport_close(tp);
}

Test(rdma, unreachable_and_malformed_locators)
{
	struct remora_node_desc stale;
	struct tu_node mn;
	struct remora_transport *tp;
	int64_t t0;
	int rc;

	need_rdma();
	tp = tu_transport(0);
	c.tp = tp;
	tu_node_open(tp, 0, TU_POOL_BYTES, &mn);
	stale = mn.desc;
	tu_node_close(&mn); /* its listener is gone: nobody answers at that address any more */
	t0 = now_ms();
	rc = remora_transport_attach(tp, &stale);
	cr_assert_eq(rc, -ECONNREFUSED, "attach to a closed node = %d (%s): %s", rc,
		     remora_strerror(rc), remora_transport_errmsg(tp));
	cr_assert(strstr(remora_transport_errmsg(tp), stale.locator), "message lacks %s: %s",
		  stale.locator, remora_transport_errmsg(tp));
	cr_assert_lt(now_ms() - t0, 10000, "refusal took %lld ms", (long long)(now_ms() - t0));
	snprintf(stale.locator, sizeof(stale.locator), "not-an-address");
	rc = remora_transport_attach(tp, &stale);
	cr_assert_eq(rc, -EINVAL, "malformed locator = %d (%s)", rc, remora_strerror(rc));
	cr_assert(strstr(remora_transport_errmsg(tp), "not-an-address"));
	tu_close(&c);
}

/* ---- large verbs and back-pressure -------------------------------------------------------- */

Test(rdma, verbs_larger_than_the_arena_slot_register_the_buffer)
{
	enum { BIG = 300 * 1024, POOL = 1 << 20 };
	uint8_t *src = malloc(BIG), *dst = malloc(BIG);
	uint64_t seed = 7;
	int rc;

	need_rdma();
	cr_assert(src && dst);
	tu_open(&c, 0, 1, POOL);
	for (unsigned i = 0; i < BIG; i++)
		src[i] = (uint8_t)tu_rand64(&seed);
	rc = remora_write(c.ch, ga(0, 4096), c.mn[0].key, src, BIG);
	cr_assert_eq(rc, 0, "300 KiB WRITE = %d (%s)", rc, remora_strerror(rc));
	cr_assert_eq(memcmp(c.mn[0].base + 4096, src, BIG), 0, "300 KiB WRITE landed wrong");
	memset(dst, 0, BIG);
	rc = remora_read(c.ch, ga(0, 4096), c.mn[0].key, dst, BIG);
	cr_assert_eq(rc, 0, "300 KiB READ = %d (%s)", rc, remora_strerror(rc));
	cr_assert_eq(memcmp(dst, src, BIG), 0, "300 KiB READ returned other bytes");
	free(src);
	free(dst);
}

Test(rdma, full_arena_pushes_back_then_drains)
{
	enum { LEN = 60 * 1024, N = 40, POOL = 4 << 20 };
	static uint8_t bufs[N][LEN];
	struct remora_wr wr;
	struct remora_cqe cq[N];
	unsigned posted = 0, eagain = 0;
	int rc, got = 0;

	need_rdma();
	tu_open(&c, 0, 1, POOL);
	for (unsigned i = 0; i < N; i++)
		memset(c.mn[0].base + (size_t)i * LEN, (int)(i + 1), LEN);
	while (posted < N) {
		wr = tu_wr_read(ga(0, (uint64_t)posted * LEN), c.mn[0].key, bufs[posted], LEN);
		wr.wr_id = posted;
		rc = remora_post(c.ch, &wr, 1);
		if (rc == -EAGAIN) {
			eagain++;
			rc = tu_drain(c.ch, cq + got, 1);
			cr_assert_eq(rc, 1, "no completion while the arena was full");
			got++;
			continue;
		}
		cr_assert_eq(rc, 0, "post %u = %d (%s)", posted, rc, remora_strerror(rc));
		posted++;
	}
	cr_assert_gt(eagain, 0, "%d READs of 60 KiB never filled the bounce arena", N);
	cr_assert_eq(tu_drain(c.ch, cq + got, (unsigned)(N - got)), N - got);
	for (unsigned i = 0; i < N; i++) {
		cr_assert_eq(cq[i].status, 0, "READ %llu: %d", (unsigned long long)cq[i].wr_id,
			     cq[i].status);
		cr_assert_eq(bufs[i][0], i + 1, "READ %u brought other data", i);
		cr_assert_eq(bufs[i][LEN - 1], i + 1, "READ %u brought other data", i);
	}
}

/*
 * One batch of verbs that alone outgrows the 1 MiB bounce arena (20 x 64 KiB, each small
 * enough to be staged): waiting cannot make room, so the post must succeed at once (the
 * overflow registers the callers' buffers) instead of pushing back for ever.
 */
Test(rdma, batch_larger_than_the_arena_posts_at_once)
{
	enum { LEN = 64 * 1024, N = 20, POOL = 4 << 20 };
	static uint8_t bufs[N][LEN];
	struct remora_wr wr[N];
	struct remora_cqe cq[N];
	int rc;

	need_rdma();
	tu_open(&c, 0, 1, POOL);
	for (unsigned i = 0; i < N; i++) {
		memset(c.mn[0].base + (size_t)i * LEN, (int)(i + 1), LEN);
		wr[i] = tu_wr_read(ga(0, (uint64_t)i * LEN), c.mn[0].key, bufs[i], LEN);
		wr[i].wr_id = i;
	}
	rc = remora_post(c.ch, wr, N);
	cr_assert_eq(rc, 0, "a batch of %d READs of 64 KiB on an idle channel = %d (%s)", N, rc,
		     remora_strerror(rc));
	cr_assert_eq(tu_drain(c.ch, cq, N), N);
	for (unsigned i = 0; i < N; i++) {
		cr_assert_eq(cq[i].status, 0, "READ %llu: %d", (unsigned long long)cq[i].wr_id,
			     cq[i].status);
		cr_assert(bufs[i][0] == i + 1 && bufs[i][LEN - 1] == i + 1, "READ %u: other data", i);
		memset(bufs[i], (int)(0x80 + i), LEN);
		wr[i] = tu_wr_write(ga(0, (uint64_t)(N + i) * LEN), c.mn[0].key, bufs[i], LEN);
	}
	rc = remora_post(c.ch, wr, N);
	cr_assert_eq(rc, 0, "a batch of %d WRITEs of 64 KiB on an idle channel = %d (%s)", N, rc,
		     remora_strerror(rc));
	cr_assert_eq(tu_drain(c.ch, cq, N), N);
	for (unsigned i = 0; i < N; i++) {
		const uint8_t *at = c.mn[0].base + (size_t)(N + i) * LEN;

		cr_assert_eq(cq[i].status, 0, "WRITE %u: %d", i, cq[i].status);
		cr_assert(at[0] == 0x80 + i && at[LEN - 1] == 0x80 + i, "WRITE %u landed wrong", i);
	}
}

/* ---- failures: a revoked region, a dead memory node --------------------------------------- */

Test(rdma, deregistered_region_fails_with_ebadkey_then_recovers)
{
	uint32_t kb;
	uint64_t v = 42, r = 0;
	int rc;

	need_rdma();
	tu_open_pools(&c, 0, 1, TU_POOL_BYTES);
	rc = remora_pool_reg(c.mn[0].pool, 8192, 4096, &kb);
	cr_assert_eq(rc, 0);
	tu_attach_all(&c);
	cr_assert_eq(remora_write(c.ch, ga(0, 8192), kb, &v, 8), 0);
	/* The node revokes region B; this channel still holds its key. */
	cr_assert_eq(remora_pool_dereg(c.mn[0].pool, kb), 0);
	rc = remora_write(c.ch, ga(0, 8200), kb, &v, 8);
	cr_assert_eq(rc, -REMORA_EBADKEY, "WRITE to a revoked region = %d (%s)", rc,
		     remora_strerror(rc));
	cr_assert_eq(word(8200), 0, "the revoked region changed");
	/* The whole-pool region still works on the same channel. */
	rc = remora_read(c.ch, ga(0, 8192), c.mn[0].key, &r, 8);
	cr_assert_eq(rc, 0, "READ after the failure = %d (%s)", rc, remora_strerror(rc));
	cr_assert_eq(r, 42);
}

/* A memory node in a child process; the parent is its compute node. */
struct shared_desc {
	struct remora_node_desc desc;
};

static struct shared_desc *shared;

static int short_lived_mn(void *argp, int rd, int wr)
{
	struct remora_transport *tp;
	struct tu_node mn;
	uint64_t msg;

	(void)argp;
	TU_CHILD_CHECK(tu_transport_try(-1, NULL, &tp) == 0, "transport_open");
	tu_node_open(tp, 0, TU_POOL_BYTES, &mn);
	shared->desc = mn.desc;
	tu_send(wr, 1);
	tu_recv(rd, &msg);
	_exit(0); /* dies without closing anything, as a crash would */
}

Test(rdma, dead_memory_node_fails_with_eio_not_a_hang)
{
	struct tu_proc p;
	uint64_t v = 1, msg;
	int64_t t0;
	int rc;

	need_rdma();
	shared = mmap(NULL, sizeof(*shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
		      -1, 0);
	cr_assert_neq(shared, MAP_FAILED);
	c.tp = tu_transport(0);
	tu_spawn(&p, short_lived_mn, NULL);
	cr_assert_eq(tu_recv(p.rd, &msg), 0, "memory node did not start");
	rc = remora_transport_attach(c.tp, &shared->desc);
	cr_assert_eq(rc, 0, "attach = %d (%s): %s", rc, remora_strerror(rc),
		     remora_transport_errmsg(c.tp));
	cr_assert_eq(remora_chan_open(c.tp, &c.ch), 0);
	cr_assert_eq(remora_write(c.ch, ga(0, 64), shared->desc.regions[0].key, &v, 8), 0);
	tu_send(p.wr, 1);
	cr_assert_eq(tu_proc_wait(&p), 0);
	t0 = now_ms();
	rc = remora_write(c.ch, ga(0, 64), shared->desc.regions[0].key, &v, 8);
	cr_assert_eq(rc, -EIO, "WRITE to a dead memory node = %d (%s)", rc, remora_strerror(rc));
	cr_assert_lt(now_ms() - t0, 15000, "took %lld ms", (long long)(now_ms() - t0));
	t0 = now_ms();
	rc = remora_faa(c.ch, ga(0, 64), shared->desc.regions[0].key, 1, NULL);
	cr_assert_eq(rc, -EIO, "FAA to a dead memory node = %d", rc);
	cr_assert_lt(now_ms() - t0, 1000, "a known-dead node must fail at once");
	/* Attaching it again asks the node, which is gone: an error, not a silent success. */
	rc = remora_transport_attach(c.tp, &shared->desc);
	cr_assert(rc == -ECONNREFUSED || rc == -ETIMEDOUT || rc == -EHOSTUNREACH,
		  "attach again to a dead node = %d (%s): %s", rc, remora_strerror(rc),
		  remora_transport_errmsg(c.tp));
	munmap(shared, sizeof(*shared));
	tu_close(&c);
}
