// SPDX-License-Identifier: MIT
/*
 * TPC-C consistency conditions 1-4 (clause 3.3.2), read after a run through transactions that
 * fetch for update and write nothing (so a leaked lock shows too):
 *
 *   1  W_YTD = sum(D_YTD) over the warehouse's districts
 *   2  D_NEXT_O_ID - 1 = max(O_ID) = max(NO_O_ID) of the district
 *   3  max(NO_O_ID) - min(NO_O_ID) + 1 = number of new_order rows of the district
 *   4  sum(O_OL_CNT) = number of order_line rows of the district
 *
 * The store is hashed, so "max" and "count" are taken by probing every key a row could have:
 * orders 1 .. D_NEXT_O_ID - 1 + TPCC_CHECK_PROBE (a row past D_NEXT_O_ID - 1, which only a
 * bug can create, is seen within that window), and for each of them new_order and order
 * lines 1 .. 15. Conditions 2-4 need no new_order row to exist (a district whose orders were
 * all delivered has none); then their new_order parts are vacuous, as in the specification.
 */
#include <errno.h>
#include <inttypes.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tpcc.h"

#define TPCC_CHECK_PROBE 32  /* orders probed past D_NEXT_O_ID - 1 */
#define BATCH_ORDERS 32      /* orders per read-only transaction */

struct rk {
	uint32_t table;
	uint64_t key;
	void *buf;
	bool found;
};

struct chk_read {
	struct rk *rk;
	unsigned n;
};

struct chk {
	const struct wl *wl;
	struct remora_worker *w;
	char *msg;
	size_t msglen;
	unsigned violations;
	uint64_t orders, lines, new_orders;
	/* per batch */
	struct rk *rk;
	struct tpcc_order *ord;
	struct tpcc_order_line *ol;
	struct tpcc_new_order *no;
};

static int stage_all(struct remora_tx *tx, void *arg)
{
	const struct chk_read *r = arg;
	int rc = 0;

	for (unsigned i = 0; !rc && i < r->n; i++)
		rc = remora_tx_stage(tx, r->rk[i].table, r->rk[i].key, REMORA_RW, r->rk[i].buf,
				     &r->rk[i].found);
	return rc;
}

/*
 * Reads every rk in one transaction that fetches them for update and commits without writing
 * (as every after-run scan does, docs/workloads.md): all locks must be free after a run, and a
 * protocol whose read-only validation ignores locks (FORD) would not see a leaked one in a
 * plain read. Retries aborts; a record that stays locked gives -ETIMEDOUT.
 */
static int read_all(struct remora_worker *w, struct rk *rk, unsigned n)
{
	struct chk_read r = { rk, n };

	return wl_fetch_retry(w, 0, stage_all, &r, WL_VERIFY_TIMEOUT_MS);
}

static void violation(struct chk *k, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Keeps the first violation's text; later ones are only counted. */
static void violation(struct chk *k, const char *fmt, ...)
{
	va_list ap;

	if (k->violations++)
		return;
	va_start(ap, fmt);
	vsnprintf(k->msg, k->msglen, fmt, ap);
	va_end(ap);
}

static int read_fail(struct chk *k, int rc, const char *what, unsigned w, unsigned d)
{
	char note[WL_LOCK_NOTE_LEN];

	if (rc == -ETIMEDOUT)
		snprintf(k->msg, k->msglen, "a %s row of warehouse %u district %u stays locked "
			 "after the run (a leaked lock)%s", what, w, d,
			 wl_lock_note(k->w, note, sizeof(note)));
	else
		snprintf(k->msg, k->msglen, "reading the %s rows of warehouse %u district %u: %s",
			 what, w, d, remora_strerror(rc));
	return rc == -ETIMEDOUT ? 1 : rc;
}

/* Condition 1 for warehouse w; fills dist[0..9] for the per-district conditions. */
static int check_warehouse(struct chk *k, unsigned w, struct tpcc_district *dist)
{
	struct tpcc_warehouse wh;
	struct rk rk[1 + TPCC_DISTRICTS];
	int64_t sum = 0;
	int rc;

	rk[0] = (struct rk){ .table = TPCC_WAREHOUSE, .key = tpcc_key(w, 0, 0), .buf = &wh };
	for (unsigned d = 0; d < TPCC_DISTRICTS; d++)
		rk[1 + d] = (struct rk){ .table = TPCC_DISTRICT, .key = tpcc_key(w, d + 1, 0),
					 .buf = &dist[d] };
	rc = read_all(k->w, rk, 1 + TPCC_DISTRICTS);
	if (rc)
		return read_fail(k, rc, "warehouse or district", w, 0);
	for (unsigned i = 0; i < 1 + TPCC_DISTRICTS; i++) {
		if (!rk[i].found) {
			violation(k, "warehouse %u: the %s row%s%u is missing", w,
				  i ? "district" : "warehouse", i ? " of district " : "",
				  i ? i : w);
			return 0;
		}
	}
	for (unsigned d = 0; d < TPCC_DISTRICTS; d++)
		sum += dist[d].d_ytd;
	if (wh.w_ytd != sum)
		violation(k, "TPC-C consistency condition 1 (W_YTD = sum(D_YTD)) fails at "
			  "warehouse %u: W_YTD = %" PRId64 ", sum(D_YTD) = %" PRId64, w, wh.w_ytd,
			  sum);
	return 0;
}

struct dist_scan {
	uint64_t max_o, sum_ol_cnt, lines;
	uint64_t no_min, no_max, no_count;
};

/* Orders [o0, o0 + n) of (w, d), with their new_order rows and lines 1..15. */
static int scan_batch(struct chk *k, unsigned w, unsigned d, uint64_t o0, unsigned n,
		      struct dist_scan *s)
{
	unsigned per = 2 + TPCC_MAX_OL, m = 0;
	int rc;

	for (unsigned i = 0; i < n; i++) {
		uint64_t o = o0 + i;

		k->rk[m++] = (struct rk){ .table = TPCC_ORDER, .key = tpcc_key(w, d, o),
					  .buf = &k->ord[i] };
		k->rk[m++] = (struct rk){ .table = TPCC_NEW_ORDER, .key = tpcc_key(w, d, o),
					  .buf = &k->no[i] };
		for (unsigned l = 0; l < TPCC_MAX_OL; l++)
			k->rk[m++] = (struct rk){ .table = TPCC_ORDER_LINE,
						  .key = tpcc_ol_key(w, d, o, l + 1),
						  .buf = &k->ol[i * TPCC_MAX_OL + l] };
	}
	rc = read_all(k->w, k->rk, m);
	if (rc)
		return read_fail(k, rc, "order", w, d);
	for (unsigned i = 0; i < n; i++) {
		const struct rk *r = &k->rk[i * per];
		uint64_t o = o0 + i;

		if (r[0].found) {
			s->max_o = o;
			s->sum_ol_cnt += k->ord[i].o_ol_cnt;
			k->orders++;
		}
		if (r[1].found) {
			if (!s->no_count || o < s->no_min)
				s->no_min = o;
			if (o > s->no_max)
				s->no_max = o;
			s->no_count++;
			k->new_orders++;
		}
		for (unsigned l = 0; l < TPCC_MAX_OL; l++)
			if (r[2 + l].found) {
				s->lines++;
				k->lines++;
			}
	}
	return 0;
}

/* Conditions 2, 3 and 4 for district (w, d) whose row is dist. */
static int check_district(struct chk *k, unsigned w, unsigned d, const struct tpcc_district *dist)
{
	uint64_t last = dist->d_next_o_id - 1, end = last + TPCC_CHECK_PROBE;
	struct dist_scan s = { 0 };
	int rc;

	for (uint64_t o = 1; o <= end; o += BATCH_ORDERS) {
		unsigned n = end - o + 1 < BATCH_ORDERS ? (unsigned)(end - o + 1) : BATCH_ORDERS;

		rc = scan_batch(k, w, d, o, n, &s);
		if (rc)
			return rc;
	}
	if (s.max_o != last || (s.no_count && s.no_max != last))
		violation(k, "TPC-C consistency condition 2 (D_NEXT_O_ID - 1 = max(O_ID) = "
			  "max(NO_O_ID)) fails at warehouse %u district %u: D_NEXT_O_ID - 1 = "
			  "%" PRIu64 ", max(O_ID) = %" PRIu64 ", max(NO_O_ID) = %" PRIu64 "%s", w, d,
			  last, s.max_o, s.no_max, s.no_count ? "" : " (no new_order rows)");
	if (s.no_count && s.no_max - s.no_min + 1 != s.no_count)
		violation(k, "TPC-C consistency condition 3 (max(NO_O_ID) - min(NO_O_ID) + 1 = "
			  "rows in new_order) fails at warehouse %u district %u: max %" PRIu64
			  " - min %" PRIu64 " + 1 = %" PRIu64 ", rows = %" PRIu64, w, d, s.no_max,
			  s.no_min, s.no_max - s.no_min + 1, s.no_count);
	if (s.sum_ol_cnt != s.lines)
		violation(k, "TPC-C consistency condition 4 (sum(O_OL_CNT) = rows in order_line) "
			  "fails at warehouse %u district %u: sum(O_OL_CNT) = %" PRIu64
			  ", order_line rows = %" PRIu64, w, d, s.sum_ol_cnt, s.lines);
	return 0;
}

static int check_all(struct chk *k, const struct tpcc_cfg *cfg)
{
	struct tpcc_district dist[TPCC_DISTRICTS];
	int rc;

	for (unsigned w = 1; w <= cfg->warehouses; w++) {
		unsigned before = k->violations;

		rc = check_warehouse(k, w, dist);
		if (rc)
			return rc;
		if (k->violations > before && strstr(k->msg, "missing"))
			continue;
		for (unsigned d = 1; d <= TPCC_DISTRICTS; d++) {
			rc = check_district(k, w, d, &dist[d - 1]);
			if (rc)
				return rc;
		}
	}
	return 0;
}

int tpcc_check(const struct wl *wl, struct remora_worker *w, char *msg, size_t msglen)
{
	const struct tpcc_cfg *cfg = tpcc_cfg_of(wl);
	unsigned per = 2 + TPCC_MAX_OL;
	struct chk k = { .wl = wl, .w = w, .msg = msg, .msglen = msglen };
	int rc = -ENOMEM;

	k.rk = calloc((size_t)BATCH_ORDERS * per, sizeof(*k.rk));
	k.ord = calloc(BATCH_ORDERS, sizeof(*k.ord));
	k.ol = calloc((size_t)BATCH_ORDERS * TPCC_MAX_OL, sizeof(*k.ol));
	k.no = calloc(BATCH_ORDERS, sizeof(*k.no));
	if (!k.rk || !k.ord || !k.ol || !k.no) {
		snprintf(msg, msglen, "out of memory");
		goto free_all;
	}
	rc = check_all(&k, cfg);
	if (rc)
		goto free_all;
	if (k.violations) {
		if (k.violations > 1) {
			size_t len = strlen(msg);

			snprintf(msg + len, msglen > len ? msglen - len : 0, " (and %u more)",
				 k.violations - 1);
		}
		rc = 1;
		goto free_all;
	}
	snprintf(msg, msglen, "TPC-C consistency conditions 1-4 hold: %u warehouses, %u "
		 "districts, %" PRIu64 " orders, %" PRIu64 " order lines, %" PRIu64 " new orders",
		 cfg->warehouses, cfg->warehouses * TPCC_DISTRICTS, k.orders, k.lines,
		 k.new_orders);
	rc = 0;
free_all:
	free(k.rk);
	free(k.ord);
	free(k.ol);
	free(k.no);
	return rc;
}
