// SPDX-License-Identifier: MIT
/*
 * TPC-C and TATP input generation (no store needed): NURand stays in its bounds and is
 * non-uniform, the C constants follow clause 2.1.6.1, mixes are drawn at their percentages
 * within a tolerance over many draws, NewOrder's rollbacks, remote lines and distinct items,
 * Payment's remote customers and by-name lookups, TATP's subscriber ids; and bad inputs
 * (zero warehouses, a mix that does not sum to 100, an unknown transaction name) are one-line
 * configuration errors.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "mix.h"
#include "tatp.h"
#include "tpcc.h"

#define DRAWS 200000

static void setup(struct wl *wl, const struct wl_desc *d, const char *const *kv)
{
	struct wl_args a = { 0 };
	int rc;

	for (unsigned i = 0; kv && kv[i]; i += 2)
		cr_assert_eq(wl_args_set(&a, kv[i], kv[i + 1]), 0);
	rc = wl_setup(wl, d, &a, 42, 8);
	cr_assert_eq(rc, 0, "wl_setup(%s): %s", d->name, wl->err);
}

/* Fails unless `got` draws out of n are within 5 standard deviations of pct percent. */
static void expect_pct(const char *what, uint64_t got, uint64_t n, double pct)
{
	double p = pct / 100.0, mean = p * (double)n, sd = sqrt((double)n * p * (1 - p));

	cr_expect(fabs((double)got - mean) <= 5 * sd + 1, "%s: %llu of %llu, expected %.2f%%",
		  what, (unsigned long long)got, (unsigned long long)n, pct);
}

Test(oltp_gen, nurand_bounds_and_skew)
{
	static const struct {
		uint64_t a, x, y;
	} cases[] = { { 255, 0, 999 }, { 1023, 1, 3000 }, { 8191, 1, 100000 }, { 1023, 1, 30 } };
	struct wl_rng r;

	wl_rng_seed(&r, 3, 0);
	for (unsigned k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
		uint64_t span = cases[k].y - cases[k].x + 1, *hist = calloc(span, sizeof(*hist));
		uint64_t c = wl_rng_below(&r, cases[k].a + 1), max = 0, lo = UINT64_MAX, hi = 0;

		cr_assert_not_null(hist);
		for (unsigned i = 0; i < DRAWS; i++) {
			uint64_t v = tpcc_nurand(&r, cases[k].a, c, cases[k].x, cases[k].y);

			lo = v < lo ? v : lo;
			hi = v > hi ? v : hi;
			hist[v - cases[k].x]++;
		}
		cr_expect_geq(lo, cases[k].x, "NURand(%llu) below x", (unsigned long long)cases[k].a);
		cr_expect_leq(hi, cases[k].y, "NURand(%llu) above y", (unsigned long long)cases[k].a);
		for (uint64_t i = 0; i < span; i++)
			max = hist[i] > max ? hist[i] : max;
		/* non-uniform: the most frequent value is well above the uniform share */
		if (span > 100)
			cr_expect_gt((double)max, 2.0 * DRAWS / (double)span,
				     "NURand(%llu, %llu, %llu) looks uniform",
				     (unsigned long long)cases[k].a, (unsigned long long)cases[k].x,
				     (unsigned long long)cases[k].y);
		free(hist);
	}
}

Test(oltp_gen, c_constants_follow_the_delta_rule)
{
	for (uint64_t seed = 0; seed < 2000; seed++) {
		struct tpcc_nurand_c c;
		unsigned delta;

		tpcc_nurand_constants(seed, &c);
		delta = c.c_last_run > c.c_last_load ? c.c_last_run - c.c_last_load :
						       c.c_last_load - c.c_last_run;
		cr_assert_leq(c.c_last_load, 255);
		cr_assert_leq(c.c_last_run, 255);
		cr_assert(delta >= 65 && delta <= 119 && delta != 96 && delta != 112,
			  "seed %llu: |C_run - C_load| = %u", (unsigned long long)seed, delta);
		cr_assert_leq(c.c_id, 1023);
		cr_assert_leq(c.ol_i_id, 8191);
	}
}

/*
 * The last-name index holds TPCC_NAME_IDS customers per name: at full scale 2000 customers
 * per district draw NURand(255, 0, 999); the most frequent name of 240 districts (24
 * warehouses) must stay well below the bound, for many load constants.
 */
Test(oltp_gen, last_name_index_bound_holds_at_full_scale)
{
	unsigned *count = calloc(TPCC_NAMES, sizeof(*count)), worst = 0;
	struct wl_rng r;

	cr_assert_not_null(count);
	wl_rng_seed(&r, 11, 0);
	for (unsigned dist = 0; dist < 240; dist++) {
		uint64_t c = wl_rng_below(&r, 256);

		memset(count, 0, TPCC_NAMES * sizeof(*count));
		for (unsigned i = 0; i < TPCC_NAMES; i++)
			count[i] = 1; /* the first 1000 customers take every name once */
		for (unsigned i = TPCC_NAMES; i < TPCC_CUSTOMERS; i++)
			count[tpcc_nurand(&r, 255, c, 0, TPCC_NAMES - 1)]++;
		for (unsigned i = 0; i < TPCC_NAMES; i++)
			worst = count[i] > worst ? count[i] : worst;
	}
	free(count);
	cr_expect_lt(worst, TPCC_NAME_IDS * 3 / 4, "a last name has %u customers", worst);
	cr_expect_gt(worst, 30, "NURand(255) should make some names frequent (%u)", worst);
}

Test(oltp_gen, last_names_are_three_syllables)
{
	char name[17];

	tpcc_last_name(0, name);
	cr_expect_str_eq(name, "BARBARBAR");
	tpcc_last_name(371, name);
	cr_expect_str_eq(name, "PRICALLYOUGHT");
	tpcc_last_name(999, name);
	cr_expect_str_eq(name, "EINGEINGEING");
	cr_expect_leq(tpcc_last_name(888, name), 15); /* ATIONATIONATION fits C_LAST[16] */
}

static void mix_frequencies(const struct wl_desc *d, const char *mix, const double *pct)
{
	const char *kv[] = { "mix", mix, NULL };
	uint64_t count[WL_MAX_TYPES] = { 0 };
	struct wl_coord c;
	struct wl_input in;
	struct wl wl;

	setup(&wl, d, mix ? kv : NULL);
	wl_coord_prepare(&wl, &c, NULL, 0, 0, 0, 0);
	for (unsigned i = 0; i < DRAWS; i++) {
		d->gen(&wl, &c, &in);
		cr_assert_lt(in.type, d->ntypes);
		count[in.type]++;
		c.seq++;
	}
	for (unsigned t = 0; t < d->ntypes; t++)
		expect_pct(d->type_names[t], count[t], DRAWS, pct[t]);
	wl_teardown(&wl);
}

Test(oltp_gen, tpcc_mix_frequencies)
{
	static const double std[] = { 45, 43, 4, 4, 4 }, custom[] = { 50, 0, 0, 50, 0 };

	mix_frequencies(&wl_tpcc, NULL, std);
	mix_frequencies(&wl_tpcc, "NewOrder=50,Delivery=50", custom);
}

Test(oltp_gen, tatp_mix_frequencies)
{
	static const double std[] = { 35, 10, 35, 2, 14, 2, 2 };
	static const double custom[] = { 10, 10, 10, 10, 20, 20, 20 };

	mix_frequencies(&wl_tatp, NULL, std);
	mix_frequencies(&wl_tatp, "10,10,10,10,20,20,20", custom);
}

Test(oltp_gen, tpcc_new_order_and_payment_inputs)
{
	const char *kv[] = { "warehouses", "8", "scale", "0.1", NULL };
	uint64_t no = 0, rollbacks = 0, lines = 0, remote_lines = 0, pay = 0, remote_c = 0;
	uint64_t by_name = 0;
	const struct tpcc_cfg *cfg;
	struct wl_coord c;
	struct wl_input in;
	struct wl wl;

	setup(&wl, &wl_tpcc, kv);
	cfg = tpcc_cfg_of(&wl);
	wl_coord_prepare(&wl, &c, NULL, 0, 0, 0, 0);
	for (unsigned i = 0; i < DRAWS; i++) {
		wl_tpcc.gen(&wl, &c, &in);
		c.seq++;
		if (in.type == TPCC_NEW_ORDER_TX) {
			struct tpcc_in_new_order x;

			memcpy(&x, in.key, sizeof(x));
			no++;
			cr_assert(x.w >= 1 && x.w <= 8 && x.d >= 1 && x.d <= 10);
			cr_assert(x.c >= 1 && x.c <= cfg->customers);
			cr_assert(x.ol_cnt >= 5 && x.ol_cnt <= 15, "ol_cnt %u", x.ol_cnt);
			for (unsigned l = 0; l < x.ol_cnt; l++) {
				bool last = l + 1 == x.ol_cnt;

				for (unsigned m = 0; m < l; m++)
					cr_assert_neq(x.ol[m].i_id, x.ol[l].i_id, "item named twice");
				if (last && x.ol[l].i_id == cfg->items + 1) {
					rollbacks++;
					continue;
				}
				cr_assert(x.ol[l].i_id >= 1 && x.ol[l].i_id <= cfg->items);
				cr_assert(x.ol[l].qty >= 1 && x.ol[l].qty <= 10);
				lines++;
				remote_lines += x.ol[l].supply_w != x.w;
			}
		} else if (in.type == TPCC_PAYMENT_TX) {
			struct tpcc_in_payment x;

			memcpy(&x, in.key, sizeof(x));
			pay++;
			remote_c += x.c_w != x.w;
			by_name += x.by_name;
			cr_assert(x.amount >= 100 && x.amount <= 500000);
			if (x.by_name)
				cr_assert_lt(x.c_or_name, cfg->names);
			else
				cr_assert(x.c_or_name >= 1 && x.c_or_name <= cfg->customers);
		}
	}
	expect_pct("NewOrder rollbacks", rollbacks, no, 1);
	expect_pct("remote order lines", remote_lines, lines, 1);
	expect_pct("remote Payment customers", remote_c, pay, 15);
	expect_pct("Payment by last name", by_name, pay, 60);
	wl_teardown(&wl);
}

Test(oltp_gen, tatp_subscriber_ids)
{
	const char *kv[] = { "subscribers", "5000", NULL };
	uint64_t *hist = calloc(5001, sizeof(*hist)), max = 0;
	struct wl_coord c;
	struct wl_input in;
	struct wl wl;

	cr_assert_not_null(hist);
	setup(&wl, &wl_tatp, kv);
	wl_coord_prepare(&wl, &c, NULL, 0, 0, 0, 0);
	for (unsigned i = 0; i < DRAWS; i++) {
		struct tatp_in x;

		wl_tatp.gen(&wl, &c, &in);
		memcpy(&x, in.key, sizeof(x));
		cr_assert(x.s_id >= 1 && x.s_id <= 5000, "s_id %u", x.s_id);
		cr_assert_eq(strtoull(x.sub_nbr, NULL, 10), x.s_id);
		cr_assert_eq(strlen(x.sub_nbr), 15);
		cr_assert(x.sf_type >= 1 && x.sf_type <= 4 && x.ai_type >= 1 && x.ai_type <= 4);
		cr_assert(x.start_time == 0 || x.start_time == 8 || x.start_time == 16);
		cr_assert(x.end_time >= 1 && x.end_time <= 24);
		hist[x.s_id]++;
	}
	for (unsigned s = 1; s <= 5000; s++)
		max = hist[s] > max ? hist[s] : max;
	cr_expect_gt(max, 3 * DRAWS / 5000, "subscriber ids look uniform (max %llu)",
		     (unsigned long long)max);
	free(hist);
	wl_teardown(&wl);
}

static void expect_bad(const struct wl_desc *d, const char *k, const char *v, const char *needle)
{
	struct wl_args a = { 0 };
	struct wl wl;
	int rc;

	wl_args_set(&a, k, v);
	rc = wl_setup(&wl, d, &a, 1, 1);
	cr_expect_eq(rc, -REMORA_ECONFIG, "%s --%s %s was accepted", d->name, k, v);
	cr_expect(strstr(wl.err, needle) != NULL, "%s --%s %s: '%s' lacks '%s'", d->name, k, v,
		  wl.err, needle);
	cr_expect_null(strchr(wl.err, '\n'), "not one line: %s", wl.err);
	wl_teardown(&wl);
}

Test(oltp_gen, bad_inputs_are_one_line_errors)
{
	expect_bad(&wl_tpcc, "warehouses", "0", "--warehouses");
	expect_bad(&wl_tpcc, "mix", "45,43,4,4,5", "sum to 101");
	expect_bad(&wl_tpcc, "mix", "45,43,4,4", "4 percentages given");
	expect_bad(&wl_tpcc, "mix", "NewOrder=50,Refund=50", "unknown transaction 'Refund'");
	expect_bad(&wl_tpcc, "mix", "NewOrder=50,NewOrder=50", "given twice");
	expect_bad(&wl_tpcc, "mix", "NewOrder=x", "not a percentage");
	expect_bad(&wl_tpcc, "scale", "0", "too small");
	expect_bad(&wl_tatp, "subscribers", "0", "--subscribers");
	expect_bad(&wl_tatp, "mix", "35,10,35,2,14,2,3", "sum to 101");
	expect_bad(&wl_tatp, "mix", "GetSubscriberData=90,Foo=10", "unknown transaction 'Foo'");
}

Test(oltp_gen, named_mix_is_case_insensitive)
{
	const char *kv[] = { "mix", "neworder=100", NULL };
	struct wl_coord c;
	struct wl_input in;
	struct wl wl;

	setup(&wl, &wl_tpcc, kv);
	wl_coord_prepare(&wl, &c, NULL, 0, 0, 0, 0);
	for (unsigned i = 0; i < 1000; i++) {
		wl_tpcc.gen(&wl, &c, &in);
		cr_assert_eq(in.type, TPCC_NEW_ORDER_TX);
	}
	wl_teardown(&wl);
}

/*
 * LOTUS shards a key by its bits 11:0 (LOTUS_SHARDS = 4096): every TPC-C row of a warehouse
 * and every TATP row of a subscriber must land in the shard of that warehouse (subscriber),
 * whatever the table-local part, and distinct rows must keep distinct keys.
 */
Test(oltp_keys, critical_field_in_the_shard_bits)
{
	for (uint64_t w = 1; w < 5000; w += 37)
		for (uint64_t d = 0; d <= TPCC_DISTRICTS; d++) {
			uint64_t k = tpcc_key(w, d, 123456789), ol = tpcc_ol_key(w, d, 3000, 15);
			uint64_t h = tpcc_history_key(w, d, 4094, 0xfffffff);

			cr_assert_eq(k % 4096, w % 4096, "tpcc w %lu d %lu", (unsigned long)w,
				     (unsigned long)d);
			cr_assert_eq(ol % 4096, w % 4096);
			cr_assert_eq(h % 4096, w % 4096);
			cr_assert_eq(tpcc_key_w(k), w);
			cr_assert_neq(tpcc_key(w, d, 1), tpcc_key(w, d, 2));
			cr_assert_neq(tpcc_key(w, d, 1), tpcc_key(w + 1, d, 1));
		}
	for (uint64_t s = 1; s < 100000; s += 997)
		for (uint64_t local = 0; local < 5 * 256; local += 77) {
			uint64_t k = tatp_key(s, local);

			cr_assert_eq(k % 4096, s % 4096, "tatp s_id %lu", (unsigned long)s);
			cr_assert_eq(tatp_key_s_id(k), s);
			cr_assert_eq(tatp_key_local(k), local);
		}
}
