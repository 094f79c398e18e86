/* SPDX-License-Identifier: MIT */
/*
 * OOCC setup, leases and the lease manager. Configuration comes from REMORA_OOCC, a comma
 * list read at db open: lease=<L>[ns|us|ms] (default 10us), delta_ppm=<n> (default 1000),
 * manager=0|1 (default 0: the lease stays at L; on a database for several compute nodes,
 * compute node 0 manages every node's lease, manager.c), late_upgrade=0|1 (default 1). Values are
 * strict: digits only, then the unit; anything else refuses the open with one line.
 * docs/oocc.md, "Leases".
 */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <remora/sched.h>

#include "config/env.h"
#include "oocc.h"

#define OOCC_LEASE_DEFAULT_NS 10000u
#define OOCC_DELTA_DEFAULT_PPM 1000u
#define OOCC_LEASE_MAX_NS 1000000000u /* fits the 32-bit halves of the lease word */

void oocc_lease_derive(uint64_t lease_ns, uint32_t delta_ppm, uint32_t *rv, uint32_t *ww)
{
	uint64_t d = lease_ns * delta_ppm / 1000000u;

	if (delta_ppm && d == 0)
		d = 1;
	if (d > lease_ns)
		d = lease_ns;
	*rv = (uint32_t)(lease_ns - d);
	*ww = (uint32_t)(lease_ns + d);
}

static void wait_ns(uint64_t ns)
{
	uint64_t until = oocc_now_ns() + ns;

	while (oocc_now_ns() < until)
		if (remora_sched_self())
			remora_yield();
}

uint64_t oocc_lease_prepare(struct oocc_db *d, uint32_t rv, uint32_t ww)
{
	uint64_t old = __atomic_load_n(&d->lease_word, __ATOMIC_ACQUIRE), prep;

	do {
		uint32_t orv = (uint32_t)(old >> 32), oww = (uint32_t)old;

		prep = oocc_lease_pack(rv < orv ? rv : orv, ww > oww ? ww : oww);
	} while (!__atomic_compare_exchange_n(&d->lease_word, &old, prep, false, __ATOMIC_ACQ_REL,
					      __ATOMIC_ACQUIRE));
	return old;
}

void oocc_lease_commit(struct oocc_db *d, uint32_t rv, uint32_t ww)
{
	__atomic_store_n(&d->lease_word, oocc_lease_pack(rv, ww), __ATOMIC_RELEASE);
	__atomic_store_n(&d->synced, true, __ATOMIC_RELEASE); /* the word is the manager's */
}

void oocc_lease_wait_out(uint32_t old_ww)
{
	wait_ns((uint64_t)old_ww + old_ww / 1000u + 1u);
}

void oocc_lease_set(struct remora_db *db, uint64_t lease_ns)
{
	struct oocc_db *d = db->proto_priv;
	uint32_t rv, ww;

	if (lease_ns > OOCC_LEASE_MAX_NS)
		lease_ns = OOCC_LEASE_MAX_NS;
	oocc_lease_derive(lease_ns, d->delta_ppm, &rv, &ww);
	/* Prepare: every reader trusts at most the smaller rv, every writer waits the larger ww;
	 * transactions that took the old word finish their reads within the old rv <= old ww */
	oocc_lease_wait_out((uint32_t)oocc_lease_prepare(d, rv, ww));
	oocc_lease_commit(d, rv, ww);
	d->lease_ns = lease_ns;
}

/* The read-phase time under which 80% of read-only transactions since the last tick fell. */
static uint64_t p80_ns(const struct oocc_stats *now, const struct oocc_stats *seen, uint64_t *n)
{
	uint64_t h[OOCC_HIST], total = 0, acc = 0;

	for (unsigned b = 0; b < OOCC_HIST; b++) {
		h[b] = now->hist[b] - seen->hist[b];
		total += h[b];
	}
	*n = total;
	for (unsigned b = 0; b < OOCC_HIST; b++) {
		acc += h[b];
		if (acc * 10 >= total * 8)
			return b ? 1ull << b : 1; /* bucket b holds elapsed < 2^b */
	}
	return 1ull << (OOCC_HIST - 1);
}

/* The relaxed copy of live statistics that a tick judges. */
void oocc_stats_snapshot(const struct oocc_stats *live, struct oocc_stats *out)
{
	out->ro = __atomic_load_n(&live->ro, __ATOMIC_RELAXED);
	out->ro_omit = __atomic_load_n(&live->ro_omit, __ATOMIC_RELAXED);
	for (unsigned b = 0; b < OOCC_HIST; b++)
		out->hist[b] = __atomic_load_n(&live->hist[b], __ATOMIC_RELAXED);
}

static bool stats_went_back(const struct oocc_stats *now, const struct oocc_stats *seen)
{
	if (now->ro < seen->ro || now->ro_omit < seen->ro_omit)
		return true;
	for (unsigned b = 0; b < OOCC_HIST; b++)
		if (now->hist[b] < seen->hist[b])
			return true;
	return false;
}

uint64_t oocc_lease_policy(struct oocc_db *d, const struct oocc_stats *now)
{
	uint64_t ro = now->ro - d->seen.ro, omit = now->ro_omit - d->seen.ro_omit;
	uint64_t n, target, lease = d->lease_ns;

	if (stats_went_back(now, &d->seen)) {
		d->seen = *now; /* a node's counters restarted (it opened again): judge from here */
		return lease;
	}
	target = p80_ns(now, &d->seen, &n);
	target += target / 4;
	d->seen = *now;
	if (ro < 16)
		return lease; /* too few samples to judge */
	if (omit * 10 < ro * 8)
		lease = target > lease + lease / 2 ? target : lease + lease / 2;
	else if (lease > 2 * target)
		lease = target;
	return lease > OOCC_LEASE_MAX_NS ? OOCC_LEASE_MAX_NS : lease;
}

uint64_t oocc_lease_tick(struct remora_db *db)
{
	struct oocc_db *d = db->proto_priv;
	struct oocc_stats now;
	uint64_t lease;

	oocc_stats_snapshot(&d->stats, &now);
	lease = oocc_lease_policy(d, &now);
	if (lease != d->lease_ns)
		oocc_lease_set(db, lease);
	return d->lease_ns;
}

/*
 * A decimal number that is the whole of s[0, len): digits only (no sign, space or suffix),
 * 1 to 19 of them. -1 otherwise.
 */
static int parse_u64(const char *s, size_t len, uint64_t *out)
{
	uint64_t v = 0;

	if (len == 0 || len > 19)
		return -1;
	for (size_t i = 0; i < len; i++) {
		if (s[i] < '0' || s[i] > '9')
			return -1;
		v = v * 10u + (uint64_t)(s[i] - '0');
	}
	*out = v;
	return 0;
}

/* "10us", "800ns", "1ms", "7000" (ns): digits, then at most one of the three units. */
static int parse_ns(const char *s, size_t len, uint64_t *out)
{
	static const struct { const char *unit; uint64_t mul; } units[] = {
		{ "ns", 1u }, { "us", 1000u }, { "ms", 1000000u },
	};
	size_t digits = 0;
	uint64_t v, mul = 1;

	while (digits < len && s[digits] >= '0' && s[digits] <= '9')
		digits++;
	if (digits < len) {
		size_t i;

		for (i = 0; i < sizeof(units) / sizeof(units[0]); i++)
			if (len - digits == 2 && !memcmp(s + digits, units[i].unit, 2))
				break;
		if (i == sizeof(units) / sizeof(units[0]))
			return -1;
		mul = units[i].mul;
	}
	if (parse_u64(s, digits, &v) || v == 0 || v > OOCC_LEASE_MAX_NS / mul)
		return -1;
	*out = v * mul;
	return 0;
}

/* 0|1 */
static int parse_bool(const char *s, size_t len, bool *out)
{
	if (len != 1 || (s[0] != '0' && s[0] != '1'))
		return -1;
	*out = s[0] == '1';
	return 0;
}

static bool key_is(const char *s, size_t k, const char *name)
{
	return k == strlen(name) && !strncmp(s, name, k);
}

/* One item "key=value"; -1 for anything else (unknown key, bad or out-of-range value). */
static int parse_item(struct oocc_db *d, const char *s, size_t len)
{
	const char *eq = memchr(s, '=', len);
	size_t k = eq ? (size_t)(eq - s) : len, vl = eq ? len - k - 1 : 0;
	const char *val = eq ? eq + 1 : NULL;
	uint64_t v;

	if (!eq)
		return -1;
	if (key_is(s, k, "lease"))
		return parse_ns(val, vl, &d->lease_ns);
	if (key_is(s, k, "delta_ppm")) {
		if (parse_u64(val, vl, &v) || v > 1000000u)
			return -1;
		d->delta_ppm = (uint32_t)v;
		return 0;
	}
	if (key_is(s, k, "manager"))
		return parse_bool(val, vl, &d->manager);
	if (key_is(s, k, "late_upgrade"))
		return parse_bool(val, vl, &d->late_upgrade);
	return -1;
}

/* The item as it can go into a one-line message: at most 48 bytes, controls as '?'. */
static void item_text(const char *s, size_t len, char *buf, size_t size)
{
	size_t n = len < size - 1 ? len : size - 1;

	for (size_t i = 0; i < n; i++)
		buf[i] = (unsigned char)s[i] < 0x20 || s[i] == 0x7f ? '?' : s[i];
	buf[n] = 0;
}

static int parse_env(struct remora_db *db, struct oocc_db *d)
{
	const char *s = cfg_knob(CFG_KNOB_OOCC);
	char item[49];

	while (s && *s) {
		size_t len = strcspn(s, ",");

		if (len && parse_item(d, s, len)) {
			item_text(s, len, item, sizeof(item));
			snprintf(db->errmsg, sizeof(db->errmsg),
				 "REMORA_OOCC: bad item '%s' (known: lease=<1ns..1000ms>[ns|us|ms], "
				 "delta_ppm=<0..1000000>, manager=0|1, late_upgrade=0|1)", item);
			return -REMORA_ECONFIG;
		}
		s += len + (s[len] == ',');
	}
	return 0;
}

int oocc_db_init(struct remora_db *db, const struct oocc_variant *v)
{
	struct oocc_db *d = calloc(1, sizeof(*d));
	uint32_t rv, ww;
	int rc;

	if (!d)
		return -ENOMEM;
	d->v = *v;
	d->lease_ns = OOCC_LEASE_DEFAULT_NS;
	d->delta_ppm = OOCC_DELTA_DEFAULT_PPM;
	d->late_upgrade = true;
	rc = parse_env(db, d);
	if (rc) {
		free(d);
		return rc;
	}
	oocc_lease_derive(d->lease_ns, d->delta_ppm, &rv, &ww);
	if (mut_on(db->mutations, MUT_OOCC_RV_GT_WW))
		rv = ww;
	/*
	 * Several compute nodes: compute node 0 changes every node's word by messages. Until its
	 * first round reaches this db, the word is not the cluster's (another node may trust a
	 * longer rv): readers trust rv 0 and writers wait for the round (manager.c).
	 */
	d->ncn = db->st.sb.max_cn;
	d->synced = !oocc_cluster(d) || mut_on(db->mutations, MUT_OOCC_START_SYNCED);
	d->lease_word = oocc_lease_pack(d->synced ? rv : 0, ww);
	d->next_tick_ns = oocc_now_ns() + (d->synced ? OOCC_TICK_NS : 0);
	db->wants_msg = oocc_cluster(d);
	db->proto_priv = d;
	return 0;
}

void oocc_db_fini(struct remora_db *db)
{
	free(db->proto_priv);
	db->proto_priv = NULL;
}

int oocc_coord_init(struct txn_coord *c)
{
	struct oocc_coord *oc = c->priv;

	oc->logbuf = aligned_alloc(64, c->w->db->st.sb.log_slot_bytes);
	return oc->logbuf ? 0 : -ENOMEM;
}

void oocc_coord_fini(struct txn_coord *c)
{
	if (c->priv)
		free(((struct oocc_coord *)c->priv)->logbuf);
}

/* ---- the plug-ins: the full protocol and the Fig. 11 ablation steps ------------------- */

static const struct oocc_variant v_full = { "oocc", true, true, true, false, false };
static const struct oocc_variant v_lease = { "oocc_lease", true, false, false, false, false };
static const struct oocc_variant v_wu = { "oocc_wu", true, true, false, false, false };
static const struct oocc_variant v_unsafe = { "oocc_unsafe", true, true, true, true, false };
/* The lock-based baseline (DrTM-style 2PL, no-wait): read locks are a reader count taken and
 * given back with memory-node atomics, write locks a CAS; no validation, no lease. */
static const struct oocc_variant v_twopl = { "twopl", false, true, false, false, true };

static int init_full(struct remora_db *db)
{
	return oocc_db_init(db, &v_full);
}

static int init_lease(struct remora_db *db)
{
	return oocc_db_init(db, &v_lease);
}

static int init_wu(struct remora_db *db)
{
	return oocc_db_init(db, &v_wu);
}

static int init_unsafe(struct remora_db *db)
{
	return oocc_db_init(db, &v_unsafe);
}

static int init_twopl(struct remora_db *db)
{
	return oocc_db_init(db, &v_twopl);
}

const struct txn_proto_ops txn_proto_oocc = OOCC_PROTO_OPS("oocc", init_full);
const struct txn_proto_ops txn_proto_oocc_lease = OOCC_PROTO_OPS("oocc_lease", init_lease);
const struct txn_proto_ops txn_proto_oocc_wu = OOCC_PROTO_OPS("oocc_wu", init_wu);
/* Upper bound of Fig. 11: read-write conflicts are not checked. NOT serializable. */
const struct txn_proto_ops txn_proto_oocc_unsafe =
	OOCC_PROTO_OPS("oocc_unsafe", init_unsafe);
const struct txn_proto_ops txn_proto_twopl = OOCC_PROTO_OPS("twopl", init_twopl);
