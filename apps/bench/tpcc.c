// SPDX-License-Identifier: MIT
/*
 * TPC-C (TPC BENCHMARK C, revision 5.11) on the transaction API: nine tables with their
 * columns, five transactions mixed 45/43/4/4/4, inputs generated per clause 2 (NURand with the
 * run's C constants, 1% remote supply warehouses, 15% remote customers, 60% customers by last
 * name, 1% NewOrder rollbacks), the initial population of clause 4.3.3.1 (scaled by --scale),
 * and three secondary tables a hash store needs where SQL would use an index or a scan:
 *
 *   customer_name   (w, d, C_LAST) -> every C_ID with that name, sorted by C_FIRST
 *                   (static: names never change, so Payment and OrderStatus never conflict on it)
 *   customer_order  (w, d, C_ID) -> the customer's latest O_ID and O_OL_CNT (OrderStatus),
 *                   written by NewOrder
 *   delivery        (w, d) -> the oldest undelivered order (min NO_O_ID), as FORD and Motor
 *                   keep a per-district cursor; Delivery reads new_order at the cursor and
 *                   advances it. NewOrder inserts new_order rows in O_ID order (each holds the
 *                   district's lock), so the rows of a district are always [cursor, next).
 *
 * Key layout and records: tpcc.h. Consistency conditions: apps/bench/tpcc_check.c.
 */
#include "tpcc.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "mix.h"

static const char *const tpcc_type_names[TPCC__TYPES] = {
	"NewOrder", "Payment", "OrderStatus", "Delivery", "StockLevel",
};

static const struct wl_knob tpcc_knobs[] = {
	{ "warehouses", "2", "warehouses (CREST: 20-100, LOTUS: 105, OOCC: 8)" },
	{ "scale", "0.05", "fraction of the spec's 100000 items and 3000 customers per district "
			  "(1: full size, ~90 MB per warehouse)" },
	{ "room", "20000", "NewOrder and Payment transactions the tables have room for over the "
			   "run (each NewOrder adds ~1.5 KB)" },
	{ "mix", "45,43,4,4,4", "percent of NewOrder,Payment,OrderStatus,Delivery,StockLevel "
				"(or Name=pct,...)" },
	{ NULL, NULL, NULL },
};

/* Load order: [items][warehouse 1][warehouse 2]... ; a warehouse is [row][stock][10 districts]. */
struct tpcc {
	struct tpcc_cfg cfg;
	uint64_t load_time;        /* C_SINCE, O_ENTRY_D, H_DATE of the population */
	uint64_t *seg;             /* start of each segment: items, then per warehouse 11 */
	unsigned nseg;
	uint64_t total;
};

#define SEGS_PER_W (1 + TPCC_DISTRICTS)

/* Per coordinator: buffers the staged reads land in. */
#define SL_ORDERS 20
struct tpcc_coord {
	struct tpcc_warehouse wh;
	struct tpcc_district dist[TPCC_DISTRICTS];
	struct tpcc_customer cust[TPCC_DISTRICTS];
	struct tpcc_customer_name name;
	struct tpcc_customer_order co[TPCC_DISTRICTS];
	struct tpcc_delivery deliv[TPCC_DISTRICTS];
	struct tpcc_new_order no[TPCC_DISTRICTS];
	struct tpcc_order order[SL_ORDERS];
	struct tpcc_item item[TPCC_MAX_OL];
	struct tpcc_order_line line[SL_ORDERS * TPCC_MAX_OL];
	struct tpcc_stock stock[SL_ORDERS * TPCC_MAX_OL];
	uint32_t ids[SL_ORDERS * TPCC_MAX_OL];
	bool f_a[SL_ORDERS * TPCC_MAX_OL];
	bool f_b[SL_ORDERS * TPCC_MAX_OL];
	bool f_c[TPCC_DISTRICTS];
};

const struct tpcc_cfg *tpcc_cfg_of(const struct wl *wl)
{
	return &((const struct tpcc *)wl->priv)->cfg;
}

/* ---- generators ------------------------------------------------------------------------ */

void tpcc_nurand_constants(uint64_t seed, struct tpcc_nurand_c *out)
{
	struct wl_rng r;
	uint32_t delta;

	wl_rng_seed(&r, seed, UINT64_C(0x7470636320430000)); /* "tpcc C" */
	out->c_last_load = (uint32_t)wl_rng_below(&r, 256);
	do
		delta = 65 + (uint32_t)wl_rng_below(&r, 119 - 65 + 1);
	while (delta == 96 || delta == 112);
	/* C_run = C_load +- delta, kept in [0, 255] */
	out->c_last_run = out->c_last_load + delta <= 255 ? out->c_last_load + delta :
							    out->c_last_load - delta;
	out->c_id = (uint32_t)wl_rng_below(&r, 1024);
	out->ol_i_id = (uint32_t)wl_rng_below(&r, 8192);
}

size_t tpcc_last_name(unsigned n, char out[17])
{
	static const char *const syl[10] = {
		"BAR", "OUGHT", "ABLE", "PRI", "PRES", "ESE", "ANTI", "CALLY", "ATION", "EING",
	};

	return (size_t)snprintf(out, 17, "%s%s%s", syl[(n / 100) % 10], syl[(n / 10) % 10],
				syl[n % 10]);
}

static const char alnum[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";

/* A random a-string of length [lo, hi] into out (size > hi), NUL-terminated. */
static void astring(struct wl_rng *r, char *out, unsigned lo, unsigned hi)
{
	unsigned len = (unsigned)tpcc_rand(r, lo, hi), i = 0;

	while (i < len) {
		uint64_t x = wl_rng_next(r);

		for (unsigned k = 0; k < 8 && i < len; k++, x >>= 8)
			out[i++] = alnum[(x & 0xff) % 62];
	}
	out[len] = '\0';
}

/* A random n-string (digits) of exactly len characters. */
static void nstring(struct wl_rng *r, char *out, unsigned len)
{
	for (unsigned i = 0; i < len; i++)
		out[i] = (char)('0' + wl_rng_below(r, 10));
	out[len] = '\0';
}

/* 10% of I_DATA and S_DATA carry "ORIGINAL" at a random position (clause 4.3.3.1). */
static void data_string(struct wl_rng *r, char *out)
{
	astring(r, out, 26, 50);
	if (wl_rng_pct(r, 10)) {
		size_t len = strlen(out), at = (size_t)wl_rng_below(r, len - 8 + 1);

		memcpy(out + at, "ORIGINAL", 8);
	}
}

static void zip(struct wl_rng *r, char out[10])
{
	nstring(r, out, 4);
	memcpy(out + 4, "11111", 6);
}

static void address(struct wl_rng *r, char *s1, char *s2, char *city, char *state, char *z)
{
	astring(r, s1, 10, 20);
	astring(r, s2, 10, 20);
	astring(r, city, 10, 20);
	state[0] = (char)('A' + wl_rng_below(r, 26));
	state[1] = (char)('A' + wl_rng_below(r, 26));
	state[2] = '\0';
	zip(r, z);
}

/* Streams of the population: every row is a function of (seed, table, key). */
static void row_rng(const struct wl *wl, struct wl_rng *r, unsigned table, uint64_t key)
{
	wl_rng_seed(r, wl->seed ^ ((uint64_t)(table + 1) * UINT64_C(0x9e3779b97f4a7c15)), key);
}

/* ---- configuration --------------------------------------------------------------------- */

static int tpcc_segments(struct wl *wl, struct tpcc *t);

static int tpcc_init(struct wl *wl)
{
	struct tpcc *t = calloc(1, sizeof(*t));
	struct tpcc_cfg *cfg;
	uint64_t v;
	double scale;
	int rc;

	if (!t)
		return wl_fail(wl, "out of memory");
	wl->priv = t;
	cfg = &t->cfg;
	rc = wl_knob_u64(wl, "warehouses", 1, TPCC_MAX_WAREHOUSES, &v);
	if (rc)
		return rc;
	cfg->warehouses = (uint32_t)v;
	rc = wl_knob_double(wl, "scale", 0.0, 1.0, &scale);
	if (rc)
		return rc;
	cfg->items = (uint32_t)(TPCC_ITEMS * scale + 0.5);
	cfg->customers = (uint32_t)(TPCC_CUSTOMERS * scale + 0.5);
	if (cfg->items < 100 || cfg->customers < 30)
		return wl_fail(wl, "--scale: %g is too small (at least 0.001: 100 items, 30 "
			       "customers per district)", scale);
	/* the last 900 of 3000 orders are undelivered: 30% */
	cfg->new_orders = cfg->customers * TPCC_NEW_ORDERS / TPCC_CUSTOMERS;
	cfg->names = cfg->customers < TPCC_NAMES ? cfg->customers : TPCC_NAMES;
	rc = wl_knob_u64(wl, "room", 0, UINT64_C(1) << 32, &cfg->room);
	if (rc)
		return rc;
	rc = wl_mix_parse(wl, "mix", tpcc_type_names, TPCC__TYPES, cfg->mix);
	if (rc)
		return rc;
	if (wl->total_coords >= 4095)
		return wl_fail(wl, "tpcc supports at most 4094 coordinators in a cluster (history "
			       "keys carry 12 bits of coordinator)");
	cfg->remote_ol_pct = 1;
	cfg->remote_c_pct = 15;
	cfg->by_name_pct = 60;
	cfg->rollback_pct = 1;
	tpcc_nurand_constants(wl->seed, &cfg->c);
	t->load_time = (uint64_t)time(NULL);
	return tpcc_segments(wl, t);
}

static void tpcc_fini(struct wl *wl)
{
	struct tpcc *t = wl->priv;

	if (t)
		free(t->seg);
	free(t);
}

/* Order lines of initial order o of (w, d): O_OL_CNT uniform in [5, 15]. */
static unsigned init_ol_cnt(const struct wl *wl, unsigned w, unsigned d, unsigned o)
{
	struct wl_rng r;

	row_rng(wl, &r, TPCC_ORDER, tpcc_key(w, d, o));
	return (unsigned)tpcc_rand(&r, TPCC_MIN_OL, TPCC_MAX_OL);
}

static uint64_t district_lines(const struct wl *wl, const struct tpcc_cfg *cfg, unsigned w,
			       unsigned d)
{
	uint64_t n = 0;

	for (unsigned o = 1; o <= cfg->customers; o++)
		n += init_ol_cnt(wl, w, d, o);
	return n;
}

/* Rows of a district's block, in load order (district_emit). */
static uint64_t district_rows(const struct tpcc_cfg *cfg, uint64_t lines)
{
	return 1 + 3 * (uint64_t)cfg->customers + cfg->new_orders + lines + cfg->names +
	       cfg->customers + 1;
}

static int tpcc_segments(struct wl *wl, struct tpcc *t)
{
	const struct tpcc_cfg *cfg = &t->cfg;
	uint64_t at = cfg->items;

	t->nseg = 1 + cfg->warehouses * SEGS_PER_W;
	t->seg = calloc(t->nseg + 1, sizeof(*t->seg));
	if (!t->seg)
		return wl_fail(wl, "out of memory");
	t->seg[0] = 0;
	for (unsigned w = 1; w <= cfg->warehouses; w++) {
		unsigned s = 1 + (w - 1) * SEGS_PER_W;

		t->seg[s] = at;
		at += 1 + cfg->items;
		for (unsigned d = 1; d <= TPCC_DISTRICTS; d++) {
			t->seg[s + d] = at;
			at += district_rows(cfg, district_lines(wl, cfg, w, d));
		}
	}
	t->seg[t->nseg] = at;
	t->total = at;
	return 0;
}

/*
 * Cells (column groups) of the contended tables, as CREST splits them: each group is what one
 * transaction type writes together, so Payment (YTDs, balances) and NewOrder (D_NEXT_O_ID,
 * stock counters) touch disjoint cells of a shared warehouse or district row.
 */
#define C(i) (UINT64_C(1) << (i))
enum {
	WH_YTD = 0, WH_REST = 1,                  /* [0,8) w_ytd | tax, id, name, address */
	DI_YTD = 0, DI_NEXT = 1, DI_REST = 2,     /* d_ytd | d_tax, d_next_o_id | ids, name, ... */
	CU_BAL = 0, CU_CNT = 1, CU_INFO = 2, CU_DATA = 3, /* balance, ytd | lim, since, discount,
							     id, counts | ids, names, address,
							     credit | c_data */
	ST_CNT = 0, ST_INFO = 1,                  /* ytd, i_id, counts, quantity, w_id | dists */
};

static unsigned tpcc_cells(const struct wl *wl, struct remora_cell_def *defs)
{
	static const struct remora_cell_def cells[] = {
		{ .table = TPCC_WAREHOUSE, .ncells = 2, .start = { 0, 8 } },
		{ .table = TPCC_DISTRICT, .ncells = 3, .start = { 0, 8, 16 } },
		{ .table = TPCC_CUSTOMER, .ncells = 4, .start = { 0, 16, 48, 184 } },
		{ .table = TPCC_STOCK, .ncells = 2, .start = { 0, 24 } },
	};

	(void)wl;
	memcpy(defs, cells, sizeof(cells));
	return sizeof(cells) / sizeof(cells[0]);
}
_Static_assert(offsetof(struct tpcc_district, d_w_id) == 16, "district cells");
_Static_assert(offsetof(struct tpcc_customer, c_credit_lim) == 16, "customer cells");
_Static_assert(offsetof(struct tpcc_customer, c_w_id) == 48, "customer cells");
_Static_assert(offsetof(struct tpcc_customer, c_data) == 184, "customer cells");
_Static_assert(offsetof(struct tpcc_stock, s_dist) == 24, "stock cells");

static unsigned tpcc_tables(const struct wl *wl, struct remora_table_def *defs)
{
	static const char *const names[TPCC__TABLES] = {
		"warehouse", "district", "customer", "history", "new_order", "order",
		"order_line", "item", "stock", "customer_name", "customer_order", "delivery",
	};
	static const uint32_t sizes[TPCC__TABLES] = {
		sizeof(struct tpcc_warehouse), sizeof(struct tpcc_district),
		sizeof(struct tpcc_customer), sizeof(struct tpcc_history),
		sizeof(struct tpcc_new_order), sizeof(struct tpcc_order),
		sizeof(struct tpcc_order_line), sizeof(struct tpcc_item),
		sizeof(struct tpcc_stock), sizeof(struct tpcc_customer_name),
		sizeof(struct tpcc_customer_order), sizeof(struct tpcc_delivery),
	};
	const struct tpcc_cfg *cfg = tpcc_cfg_of(wl);
	uint64_t dists = (uint64_t)cfg->warehouses * TPCC_DISTRICTS;
	uint64_t cust = dists * cfg->customers;
	uint64_t recs[TPCC__TABLES] = {
		[TPCC_WAREHOUSE] = cfg->warehouses,
		[TPCC_DISTRICT] = dists,
		[TPCC_CUSTOMER] = cust,
		[TPCC_HISTORY] = cust + cfg->room,
		[TPCC_NEW_ORDER] = dists * cfg->new_orders + cfg->room,
		[TPCC_ORDER] = cust + cfg->room,
		/* initial lines average 10 per order; new orders get 11 each of room */
		[TPCC_ORDER_LINE] = cust * 11 + cfg->room * 11,
		[TPCC_ITEM] = cfg->items,
		[TPCC_STOCK] = (uint64_t)cfg->warehouses * cfg->items,
		[TPCC_CUSTOMER_NAME] = dists * cfg->names,
		[TPCC_CUSTOMER_ORDER] = cust,
		[TPCC_DELIVERY] = dists,
	};

	memset(defs, 0, TPCC__TABLES * sizeof(*defs));
	for (unsigned i = 0; i < TPCC__TABLES; i++) {
		snprintf(defs[i].name, sizeof(defs[i].name), "%s", names[i]);
		defs[i].id = i;
		defs[i].value_size = sizes[i];
		defs[i].max_records = recs[i] ? recs[i] : 1;
	}
	return TPCC__TABLES;
}

static uint64_t tpcc_load_count(const struct wl *wl)
{
	return ((const struct tpcc *)wl->priv)->total;
}

/* ---- population ------------------------------------------------------------------------ */

static void make_item(const struct wl *wl, unsigned i, struct tpcc_item *v)
{
	struct wl_rng r;

	row_rng(wl, &r, TPCC_ITEM, i);
	memset(v, 0, sizeof(*v));
	v->i_id = i;
	v->i_im_id = (uint32_t)tpcc_rand(&r, 1, 10000);
	astring(&r, v->i_name, 14, 24);
	v->i_price = (int64_t)tpcc_rand(&r, 100, 10000);
	data_string(&r, v->i_data);
}

static void make_warehouse(const struct wl *wl, unsigned w, struct tpcc_warehouse *v)
{
	struct wl_rng r;

	row_rng(wl, &r, TPCC_WAREHOUSE, w);
	memset(v, 0, sizeof(*v));
	v->w_id = (uint16_t)w;
	astring(&r, v->w_name, 6, 10);
	address(&r, v->w_street_1, v->w_street_2, v->w_city, v->w_state, v->w_zip);
	v->w_tax = (int32_t)tpcc_rand(&r, 0, 2000);
	v->w_ytd = TPCC_W_YTD_INIT;
}

static void make_stock(const struct wl *wl, unsigned w, unsigned i, struct tpcc_stock *v)
{
	struct wl_rng r;

	row_rng(wl, &r, TPCC_STOCK, tpcc_key(w, 0, i));
	memset(v, 0, sizeof(*v));
	v->s_i_id = i;
	v->s_w_id = (uint16_t)w;
	v->s_quantity = (int16_t)tpcc_rand(&r, 10, 100);
	for (unsigned d = 0; d < TPCC_DISTRICTS; d++)
		astring(&r, v->s_dist[d], 24, 24);
	data_string(&r, v->s_data);
}

static void make_district(const struct wl *wl, unsigned w, unsigned d, struct tpcc_district *v)
{
	const struct tpcc_cfg *cfg = tpcc_cfg_of(wl);
	struct wl_rng r;

	row_rng(wl, &r, TPCC_DISTRICT, tpcc_key(w, d, 0));
	memset(v, 0, sizeof(*v));
	v->d_id = (uint8_t)d;
	v->d_w_id = (uint16_t)w;
	astring(&r, v->d_name, 6, 10);
	address(&r, v->d_street_1, v->d_street_2, v->d_city, v->d_state, v->d_zip);
	v->d_tax = (int32_t)tpcc_rand(&r, 0, 2000);
	v->d_ytd = TPCC_D_YTD_INIT;
	v->d_next_o_id = cfg->customers + 1;
}

/*
 * C_LAST and C_FIRST of customer c: the first `names` customers take every last name once, the
 * others NURand(255, 0, names - 1) with the load constant (clause 4.3.2.3 and 4.3.3.1).
 */
static unsigned customer_name(const struct wl *wl, unsigned w, unsigned d, unsigned c,
			      char first[17])
{
	const struct tpcc_cfg *cfg = tpcc_cfg_of(wl);
	struct wl_rng r;
	unsigned n;

	row_rng(wl, &r, TPCC_CUSTOMER, tpcc_key(w, d, c));
	astring(&r, first, 8, 16);
	n = c <= cfg->names ? c - 1 :
			      (unsigned)tpcc_nurand(&r, 255, cfg->c.c_last_load, 0, cfg->names - 1);
	return n;
}

static void make_customer(const struct wl *wl, unsigned w, unsigned d, unsigned c,
			  const struct tpcc *t, struct tpcc_customer *v)
{
	struct wl_rng r;
	unsigned name;

	memset(v, 0, sizeof(*v));
	name = customer_name(wl, w, d, c, v->c_first);
	row_rng(wl, &r, TPCC_CUSTOMER + 100, tpcc_key(w, d, c));
	v->c_id = c;
	v->c_d_id = (uint8_t)d;
	v->c_w_id = (uint16_t)w;
	tpcc_last_name(name, v->c_last);
	memcpy(v->c_middle, "OE", 3);
	address(&r, v->c_street_1, v->c_street_2, v->c_city, v->c_state, v->c_zip);
	nstring(&r, v->c_phone, 16);
	v->c_since = (int64_t)t->load_time;
	memcpy(v->c_credit, wl_rng_pct(&r, 10) ? "BC" : "GC", 3);
	v->c_credit_lim = 5000000;
	v->c_discount = (int32_t)tpcc_rand(&r, 0, 5000);
	v->c_balance = -1000;
	v->c_ytd_payment = 1000;
	v->c_payment_cnt = 1;
	v->c_delivery_cnt = 0;
	astring(&r, v->c_data, 300, 500);
}

/* What a district's rows need from its other rows: O_C_ID and the last-name index. */
struct dctx {
	unsigned w, d;
	uint32_t *o_c_id;        /* [1..C]: a random permutation of 1..C */
	uint32_t *last_o;        /* [1..C]: the customer's (only) initial order */
	uint32_t *by_name;       /* customers grouped by name, sorted by C_FIRST */
	uint32_t *name_at;       /* [0..names]: start of each name's group in by_name */
	char (*first)[17];       /* [1..C] */
	uint32_t *name;          /* [1..C] */
	uint64_t *line_at;       /* [1..C+1]: index of order o's first line in the block */
};

static int cmp_first(const void *a, const void *b, void *arg)
{
	const struct dctx *x = arg;
	uint32_t p = *(const uint32_t *)a, q = *(const uint32_t *)b;
	int c = strcmp(x->first[p], x->first[q]);

	return c ? c : (p > q) - (p < q);
}

static void dctx_free(struct dctx *x)
{
	free(x->o_c_id);
	free(x->last_o);
	free(x->by_name);
	free(x->name_at);
	free(x->first);
	free(x->name);
	free(x->line_at);
	memset(x, 0, sizeof(*x));
}

static int dctx_build(const struct wl *wl, unsigned w, unsigned d, struct dctx *x)
{
	const struct tpcc_cfg *cfg = tpcc_cfg_of(wl);
	unsigned C = cfg->customers;
	struct wl_rng r;
	uint32_t *fill;

	x->w = w;
	x->d = d;
	x->o_c_id = calloc(C + 1, sizeof(*x->o_c_id));
	x->last_o = calloc(C + 1, sizeof(*x->last_o));
	x->by_name = calloc(C, sizeof(*x->by_name));
	x->name_at = calloc(cfg->names + 1, sizeof(*x->name_at));
	x->first = calloc(C + 1, sizeof(*x->first));
	x->name = calloc(C + 1, sizeof(*x->name));
	x->line_at = calloc(C + 2, sizeof(*x->line_at));
	fill = calloc(cfg->names, sizeof(*fill));
	if (!x->o_c_id || !x->last_o || !x->by_name || !x->name_at || !x->first || !x->name ||
	    !x->line_at || !fill) {
		free(fill);
		dctx_free(x);
		return -ENOMEM;
	}
	/* O_C_ID: a random permutation of [1 .. C] (Fisher-Yates) */
	row_rng(wl, &r, TPCC_ORDER + 100, tpcc_key(w, d, 0));
	for (unsigned o = 1; o <= C; o++)
		x->o_c_id[o] = o;
	for (unsigned o = C; o > 1; o--) {
		unsigned j = 1 + (unsigned)wl_rng_below(&r, o);
		uint32_t tmp = x->o_c_id[o];

		x->o_c_id[o] = x->o_c_id[j];
		x->o_c_id[j] = tmp;
	}
	for (unsigned o = 1; o <= C; o++)
		x->last_o[x->o_c_id[o]] = o;
	x->line_at[1] = 0;
	for (unsigned o = 1; o <= C; o++)
		x->line_at[o + 1] = x->line_at[o] + init_ol_cnt(wl, w, d, o);
	for (unsigned c = 1; c <= C; c++) {
		x->name[c] = customer_name(wl, w, d, c, x->first[c]);
		x->name_at[x->name[c] + 1]++;
	}
	for (unsigned n = 0; n < cfg->names; n++)
		x->name_at[n + 1] += x->name_at[n];
	for (unsigned c = 1; c <= C; c++)
		x->by_name[x->name_at[x->name[c]] + fill[x->name[c]]++] = c;
	free(fill);
	for (unsigned n = 0; n < cfg->names; n++)
		qsort_r(x->by_name + x->name_at[n], x->name_at[n + 1] - x->name_at[n],
			sizeof(uint32_t), cmp_first, x);
	return 0;
}

/* Writes row i (0-based) of the district block of (w, d). */
static int district_row(const struct wl *wl, const struct tpcc *t, struct remora_worker *wk,
			const struct dctx *x, uint64_t i)
{
	const struct tpcc_cfg *cfg = &t->cfg;
	uint64_t C = cfg->customers, NO = cfg->new_orders;
	uint64_t delivered = C - NO; /* orders 1..delivered are delivered */
	unsigned w = x->w, d = x->d;
	union {
		struct tpcc_district dist;
		struct tpcc_customer cust;
		struct tpcc_history hist;
		struct tpcc_order order;
		struct tpcc_new_order no;
		struct tpcc_order_line ol;
		struct tpcc_customer_name name;
		struct tpcc_customer_order co;
		struct tpcc_delivery deliv;
	} v;
	struct wl_rng r;

	memset(&v, 0, sizeof(v));
	if (i == 0) {
		make_district(wl, w, d, &v.dist);
		return remora_db_load(wk, TPCC_DISTRICT, tpcc_key(w, d, 0), &v.dist);
	}
	i -= 1;
	if (i < C) {
		make_customer(wl, w, d, (unsigned)i + 1, t, &v.cust);
		return remora_db_load(wk, TPCC_CUSTOMER, tpcc_key(w, d, i + 1), &v.cust);
	}
	i -= C;
	if (i < C) {
		unsigned c = (unsigned)i + 1;

		row_rng(wl, &r, TPCC_HISTORY, tpcc_key(w, d, c));
		v.hist.h_c_id = c;
		v.hist.h_c_d_id = v.hist.h_d_id = (uint8_t)d;
		v.hist.h_c_w_id = v.hist.h_w_id = (uint16_t)w;
		v.hist.h_date = (int64_t)t->load_time;
		v.hist.h_amount = 1000;
		astring(&r, v.hist.h_data, 12, 24);
		return remora_db_load(wk, TPCC_HISTORY, tpcc_history_key(w, d, 0, c), &v.hist);
	}
	i -= C;
	if (i < C) {
		unsigned o = (unsigned)i + 1;

		row_rng(wl, &r, TPCC_ORDER + 200, tpcc_key(w, d, o));
		v.order.o_id = o;
		v.order.o_c_id = x->o_c_id[o];
		v.order.o_d_id = (uint8_t)d;
		v.order.o_w_id = (uint16_t)w;
		v.order.o_entry_d = (int64_t)t->load_time;
		v.order.o_carrier_id = o <= delivered ? (uint8_t)tpcc_rand(&r, 1, 10) : 0;
		v.order.o_ol_cnt = (uint8_t)(x->line_at[o + 1] - x->line_at[o]);
		v.order.o_all_local = 1;
		return remora_db_load(wk, TPCC_ORDER, tpcc_key(w, d, o), &v.order);
	}
	i -= C;
	if (i < NO) {
		uint64_t o = delivered + 1 + i;

		v.no.no_o_id = (uint32_t)o;
		v.no.no_d_id = (uint8_t)d;
		v.no.no_w_id = (uint16_t)w;
		return remora_db_load(wk, TPCC_NEW_ORDER, tpcc_key(w, d, o), &v.no);
	}
	i -= NO;
	if (i < x->line_at[C + 1]) {
		/* the order whose lines hold index i: binary search over line_at */
		unsigned lo = 1, hi = (unsigned)C;

		while (lo < hi) {
			unsigned mid = (lo + hi + 1) / 2;

			if (x->line_at[mid] <= i)
				lo = mid;
			else
				hi = mid - 1;
		}
		v.ol.ol_o_id = lo;
		v.ol.ol_number = (uint8_t)(i - x->line_at[lo] + 1);
		row_rng(wl, &r, TPCC_ORDER_LINE, tpcc_ol_key(w, d, lo, v.ol.ol_number));
		v.ol.ol_d_id = (uint8_t)d;
		v.ol.ol_w_id = v.ol.ol_supply_w_id = (uint16_t)w;
		v.ol.ol_i_id = (uint32_t)tpcc_rand(&r, 1, cfg->items);
		v.ol.ol_delivery_d = lo <= delivered ? (int64_t)t->load_time : 0;
		v.ol.ol_quantity = 5;
		v.ol.ol_amount = lo <= delivered ? 0 : (int64_t)tpcc_rand(&r, 1, 999999);
		astring(&r, v.ol.ol_dist_info, 24, 24);
		return remora_db_load(wk, TPCC_ORDER_LINE,
				      tpcc_ol_key(w, d, lo, v.ol.ol_number), &v.ol);
	}
	i -= x->line_at[C + 1];
	if (i < cfg->names) {
		unsigned n = (unsigned)i, cnt = x->name_at[n + 1] - x->name_at[n];

		if (cnt > TPCC_NAME_IDS)
			return -REMORA_EFULL; /* 11 standard deviations above the peak: never */
		v.name.n = (uint16_t)cnt;
		for (unsigned k = 0; k < cnt; k++)
			v.name.c_id[k] = (uint16_t)x->by_name[x->name_at[n] + k];
		return remora_db_load(wk, TPCC_CUSTOMER_NAME, tpcc_key(w, d, n), &v.name);
	}
	i -= cfg->names;
	if (i < C) {
		unsigned c = (unsigned)i + 1, o = x->last_o[c];

		v.co.o_id = o;
		v.co.ol_cnt = (uint8_t)(x->line_at[o + 1] - x->line_at[o]);
		return remora_db_load(wk, TPCC_CUSTOMER_ORDER, tpcc_key(w, d, c), &v.co);
	}
	v.deliv.next_o_id = (uint32_t)delivered + 1;
	return remora_db_load(wk, TPCC_DELIVERY, tpcc_key(w, d, 0), &v.deliv);
}

static unsigned find_segment(const struct tpcc *t, uint64_t i)
{
	unsigned lo = 0, hi = t->nseg - 1;

	while (lo < hi) {
		unsigned mid = (lo + hi + 1) / 2;

		if (t->seg[mid] <= i)
			lo = mid;
		else
			hi = mid - 1;
	}
	return lo;
}

static int tpcc_load(const struct wl *wl, struct remora_worker *wk, uint64_t begin, uint64_t end)
{
	const struct tpcc *t = wl->priv;
	struct dctx x = { 0 };
	int rc = 0;

	for (uint64_t i = begin; i < end && !rc; i++) {
		unsigned s = find_segment(t, i), w, d;
		uint64_t off = i - t->seg[s];
		union {
			struct tpcc_item item;
			struct tpcc_warehouse wh;
			struct tpcc_stock stock;
		} v;

		if (s == 0) {
			make_item(wl, (unsigned)off + 1, &v.item);
			rc = remora_db_load(wk, TPCC_ITEM, tpcc_item_key(off + 1), &v.item);
			continue;
		}
		w = 1 + (s - 1) / SEGS_PER_W;
		d = (s - 1) % SEGS_PER_W;
		if (d == 0) {
			if (off == 0) {
				make_warehouse(wl, w, &v.wh);
				rc = remora_db_load(wk, TPCC_WAREHOUSE, tpcc_key(w, 0, 0), &v.wh);
			} else {
				make_stock(wl, w, (unsigned)off, &v.stock);
				rc = remora_db_load(wk, TPCC_STOCK, tpcc_key(w, 0, off), &v.stock);
			}
			continue;
		}
		if (x.w != w || x.d != d) {
			dctx_free(&x);
			rc = dctx_build(wl, w, d, &x);
			if (rc)
				break;
		}
		rc = district_row(wl, t, wk, &x, off);
	}
	dctx_free(&x);
	return rc;
}

/* ---- input generation (clause 2.4.1, 2.5.1, 2.6.1, 2.7.1, 2.8.1) ------------------------ */

static unsigned other_warehouse(const struct tpcc_cfg *cfg, struct wl_rng *r, unsigned w)
{
	unsigned o = (unsigned)tpcc_rand(r, 1, cfg->warehouses - 1);

	return o >= w ? o + 1 : o;
}

static void gen_new_order(const struct tpcc_cfg *cfg, struct wl_rng *r,
			  struct tpcc_in_new_order *in)
{
	bool rollback;

	in->w = (uint16_t)tpcc_rand(r, 1, cfg->warehouses);
	in->d = (uint8_t)tpcc_rand(r, 1, TPCC_DISTRICTS);
	in->c = (uint32_t)tpcc_nurand(r, 1023, cfg->c.c_id, 1, cfg->customers);
	in->ol_cnt = (uint8_t)tpcc_rand(r, TPCC_MIN_OL, TPCC_MAX_OL);
	rollback = wl_rng_pct(r, cfg->rollback_pct);
	for (unsigned i = 0; i < in->ol_cnt; i++) {
		uint32_t item;
		unsigned j;

		/* distinct items: an order names each item once (as FORD and Motor draw them) */
		do {
			item = (uint32_t)tpcc_nurand(r, 8191, cfg->c.ol_i_id, 1, cfg->items);
			for (j = 0; j < i && in->ol[j].i_id != item; j++)
				;
		} while (j < i);
		in->ol[i].i_id = item;
		in->ol[i].supply_w = in->w;
		if (cfg->warehouses > 1 && wl_rng_pct(r, cfg->remote_ol_pct))
			in->ol[i].supply_w = (uint16_t)other_warehouse(cfg, r, in->w);
		in->ol[i].qty = (uint8_t)tpcc_rand(r, 1, 10);
	}
	if (rollback)
		in->ol[in->ol_cnt - 1].i_id = cfg->items + 1; /* an unused item (clause 2.4.1.4) */
}

static void gen_customer(const struct tpcc_cfg *cfg, struct wl_rng *r, uint8_t *by_name,
			 uint32_t *c_or_name)
{
	*by_name = (uint8_t)wl_rng_pct(r, cfg->by_name_pct);
	if (*by_name)
		*c_or_name = (uint32_t)tpcc_nurand(r, 255, cfg->c.c_last_run, 0, cfg->names - 1);
	else
		*c_or_name = (uint32_t)tpcc_nurand(r, 1023, cfg->c.c_id, 1, cfg->customers);
}

static void gen_payment(const struct tpcc_cfg *cfg, struct wl_coord *c,
			struct tpcc_in_payment *in)
{
	struct wl_rng *r = &c->rng;

	in->w = (uint16_t)tpcc_rand(r, 1, cfg->warehouses);
	in->d = (uint8_t)tpcc_rand(r, 1, TPCC_DISTRICTS);
	if (cfg->warehouses > 1 && wl_rng_pct(r, cfg->remote_c_pct)) {
		in->c_w = (uint16_t)other_warehouse(cfg, r, in->w);
		in->c_d = (uint8_t)tpcc_rand(r, 1, TPCC_DISTRICTS);
	} else {
		in->c_w = in->w;
		in->c_d = in->d;
	}
	gen_customer(cfg, r, &in->by_name, &in->c_or_name);
	in->amount = (int64_t)tpcc_rand(r, 100, 500000);
	in->hseq = (uint32_t)(++c->drawn & 0xfffffff);
	in->origin = c->global_index + 1;
}

static void tpcc_gen(const struct wl *wl, struct wl_coord *c, struct wl_input *in)
{
	const struct tpcc_cfg *cfg = tpcc_cfg_of(wl);
	struct wl_rng *r = &c->rng;

	memset(in, 0, sizeof(*in));
	in->type = wl_mix_draw(cfg->mix, TPCC__TYPES, r);
	switch (in->type) {
	case TPCC_NEW_ORDER_TX: {
		struct tpcc_in_new_order x = { 0 };

		gen_new_order(cfg, r, &x);
		memcpy(in->key, &x, sizeof(x));
		break;
	}
	case TPCC_PAYMENT_TX: {
		struct tpcc_in_payment x = { 0 };

		gen_payment(cfg, c, &x);
		memcpy(in->key, &x, sizeof(x));
		break;
	}
	case TPCC_ORDER_STATUS_TX: {
		struct tpcc_in_order_status x = { 0 };

		x.w = (uint16_t)tpcc_rand(r, 1, cfg->warehouses);
		x.d = (uint8_t)tpcc_rand(r, 1, TPCC_DISTRICTS);
		gen_customer(cfg, r, &x.by_name, &x.c_or_name);
		memcpy(in->key, &x, sizeof(x));
		break;
	}
	case TPCC_DELIVERY_TX: {
		struct tpcc_in_delivery x = { 0 };

		x.w = (uint16_t)tpcc_rand(r, 1, cfg->warehouses);
		x.carrier = (uint8_t)tpcc_rand(r, 1, 10);
		memcpy(in->key, &x, sizeof(x));
		break;
	}
	default: {
		struct tpcc_in_stock_level x = { 0 };

		x.w = (uint16_t)tpcc_rand(r, 1, cfg->warehouses);
		x.d = (uint8_t)tpcc_rand(r, 1, TPCC_DISTRICTS);
		x.threshold = (uint8_t)tpcc_rand(r, 10, 20);
		memcpy(in->key, &x, sizeof(x));
		break;
	}
	}
}

/* Every transaction of the mix is one warehouse's: its home is that warehouse's. */
static bool tpcc_home_key(const struct wl *wl, const struct wl_input *in, uint64_t *key)
{
	size_t at;
	uint16_t w;

	(void)wl;
	switch (in->type) {
	case TPCC_NEW_ORDER_TX:
		at = offsetof(struct tpcc_in_new_order, w);
		break;
	case TPCC_PAYMENT_TX:
		at = offsetof(struct tpcc_in_payment, w);
		break;
	case TPCC_ORDER_STATUS_TX:
		at = offsetof(struct tpcc_in_order_status, w);
		break;
	case TPCC_DELIVERY_TX:
		at = offsetof(struct tpcc_in_delivery, w);
		break;
	default:
		at = offsetof(struct tpcc_in_stock_level, w);
		break;
	}
	memcpy(&w, (const unsigned char *)in->key + at, sizeof(w));
	*key = tpcc_key(w, 0, 0);
	return true;
}

static unsigned tpcc_tx_flags(const struct wl *wl, const struct wl_input *in)
{
	(void)wl;
	return in->type == TPCC_ORDER_STATUS_TX || in->type == TPCC_STOCK_LEVEL_TX ?
		       REMORA_TX_READ_ONLY : 0;
}

static int tpcc_coord_init(const struct wl *wl, struct wl_coord *c)
{
	(void)wl;
	c->priv = calloc(1, sizeof(struct tpcc_coord));
	return c->priv ? 0 : -ENOMEM;
}

static void tpcc_coord_fini(const struct wl *wl, struct wl_coord *c)
{
	(void)wl;
	free(c->priv);
}

/* ---- transactions ---------------------------------------------------------------------- */

static int64_t now_s(void)
{
	return (int64_t)time(NULL);
}

/* Stages one access; found may be NULL (then absence is a store bug, seen by must()). */
#define STAGE(tx, table, key, mode, buf, found)                                           \
	do {                                                                               \
		int rc_ = remora_tx_stage(tx, table, key, mode, buf, found);               \
		if (rc_)                                                                   \
			return rc_;                                                        \
	} while (0)

/* Payment's customer: reads the credit and ids, writes balance, counts and (BC) C_DATA. */
#define PAY_CU_RD C(CU_INFO)
#define PAY_CU_WR (C(CU_BAL) | C(CU_CNT) | C(CU_DATA))

/* Stages the cells rd (read) and wr (written) of a row. */
#define STAGE_CELLS(tx, table, key, rd, wr, buf, found)                                   \
	do {                                                                               \
		int rc_ = remora_tx_stage_cells(tx, table, key, rd, wr, buf, found);       \
		if (rc_)                                                                   \
			return rc_;                                                        \
	} while (0)

/* A row the population guarantees (never inserted or deleted): absent means a store bug. */
static int must(bool found)
{
	return found ? 0 : -REMORA_ENOTFOUND;
}

/*
 * A row another transaction inserted, reached through a row that names it (customer_order ->
 * order, D_NEXT_O_ID -> the last orders, new_order -> order -> order lines). A protocol that
 * lets execution read a record a committing writer holds (FORD validates versions only) can
 * show the naming row's new value before the inserted row's commit WRITE lands: a conflict the
 * engine reports only at validation, so the application retries now (WL_RETRY, counted as a
 * not_found abort).
 */
static int race(bool found)
{
	return found ? 0 : WL_RETRY;
}

/* Clause 2.4.2: NewOrder. */
static int tx_new_order(const struct tpcc *t, struct tpcc_coord *x, struct remora_tx *tx,
			const struct tpcc_in_new_order *in, struct wl_result *res)
{
	const struct tpcc_cfg *cfg = &t->cfg;
	unsigned w = in->w, d = in->d, n = in->ol_cnt;
	struct tpcc_district *dist = &x->dist[0];
	struct tpcc_customer *cust = &x->cust[0];
	struct tpcc_customer_order *co = &x->co[0];
	bool fw, fd, fc, fco, all_local = true;
	int64_t total = 0;
	uint32_t o_id;
	int rc;

	STAGE_CELLS(tx, TPCC_WAREHOUSE, tpcc_key(w, 0, 0), C(WH_REST), 0, &x->wh, &fw);
	STAGE_CELLS(tx, TPCC_DISTRICT, tpcc_key(w, d, 0), C(DI_REST), C(DI_NEXT), dist, &fd);
	STAGE_CELLS(tx, TPCC_CUSTOMER, tpcc_key(w, d, in->c), C(CU_CNT) | C(CU_INFO), 0, cust,
		    &fc);
	STAGE(tx, TPCC_CUSTOMER_ORDER, tpcc_key(w, d, in->c), REMORA_RW, co, &fco);
	for (unsigned i = 0; i < n; i++) {
		STAGE(tx, TPCC_ITEM, tpcc_item_key(in->ol[i].i_id), REMORA_RD, &x->item[i],
		      &x->f_a[i]);
		STAGE_CELLS(tx, TPCC_STOCK, tpcc_key(in->ol[i].supply_w, 0, in->ol[i].i_id),
			    C(ST_INFO), C(ST_CNT), &x->stock[i], &x->f_b[i]);
	}
	rc = remora_tx_fetch(tx);
	if (!rc)
		rc = must(fw && fd && fc && fco);
	if (rc)
		return rc;
	for (unsigned i = 0; i < n; i++) {
		if (!x->f_a[i])
			return WL_USER_ABORT; /* unused item: the transaction rolls back */
		rc = must(x->f_b[i]);
		if (rc)
			return rc;
		if (in->ol[i].supply_w != w)
			all_local = false;
	}
	if (dist->d_w_id != w || dist->d_id != d || cust->c_id != in->c)
		res->integrity_errors++;
	o_id = dist->d_next_o_id;
	dist->d_next_o_id++;
	rc = remora_tx_write_cells(tx, TPCC_DISTRICT, tpcc_key(w, d, 0), C(DI_NEXT), dist);
	if (rc)
		return rc;
	{
		struct tpcc_order o = {
			.o_id = o_id, .o_c_id = in->c, .o_d_id = (uint8_t)d, .o_w_id = (uint16_t)w,
			.o_entry_d = now_s(), .o_carrier_id = 0, .o_ol_cnt = (uint8_t)n,
			.o_all_local = all_local,
		};
		struct tpcc_new_order no = {
			.no_o_id = o_id, .no_d_id = (uint8_t)d, .no_w_id = (uint16_t)w,
		};

		rc = remora_tx_insert(tx, TPCC_ORDER, tpcc_key(w, d, o_id), &o);
		if (!rc)
			rc = remora_tx_insert(tx, TPCC_NEW_ORDER, tpcc_key(w, d, o_id), &no);
		if (rc)
			return rc; /* -REMORA_EEXIST: D_NEXT_O_ID named an existing order */
	}
	for (unsigned i = 0; i < n; i++) {
		struct tpcc_stock *s = &x->stock[i];
		const struct tpcc_item *it = &x->item[i];
		unsigned qty = in->ol[i].qty;
		struct tpcc_order_line ol = {
			.ol_o_id = o_id, .ol_d_id = (uint8_t)d, .ol_w_id = (uint16_t)w,
			.ol_number = (uint8_t)(i + 1), .ol_i_id = in->ol[i].i_id,
			.ol_supply_w_id = in->ol[i].supply_w, .ol_delivery_d = 0,
			.ol_quantity = (uint8_t)qty, .ol_amount = (int64_t)qty * it->i_price,
		};

		if (it->i_id != in->ol[i].i_id || s->s_i_id != in->ol[i].i_id ||
		    s->s_w_id != in->ol[i].supply_w)
			res->integrity_errors++;
		if (s->s_quantity >= (int)qty + 10)
			s->s_quantity = (int16_t)(s->s_quantity - (int)qty);
		else
			s->s_quantity = (int16_t)(s->s_quantity - (int)qty + 91);
		s->s_ytd += qty;
		s->s_order_cnt++;
		if (in->ol[i].supply_w != w)
			s->s_remote_cnt++;
		memcpy(ol.ol_dist_info, s->s_dist[d - 1], sizeof(ol.ol_dist_info));
		total += ol.ol_amount;
		rc = remora_tx_write_cells(tx, TPCC_STOCK,
					   tpcc_key(in->ol[i].supply_w, 0, in->ol[i].i_id),
					   C(ST_CNT), s);
		if (!rc)
			rc = remora_tx_insert(tx, TPCC_ORDER_LINE,
					      tpcc_ol_key(w, d, o_id, i + 1), &ol);
		if (rc)
			return rc;
	}
	co->o_id = o_id;
	co->ol_cnt = (uint8_t)n;
	/* the order's total (2.4.2.2) is output only: sum * (1 - C_DISCOUNT) * (1 + taxes) */
	res->delta = total * (10000 - cust->c_discount) / 10000 *
		     (10000 + x->wh.w_tax + dist->d_tax) / 10000;
	(void)cfg;
	return remora_tx_write(tx, TPCC_CUSTOMER_ORDER, tpcc_key(w, d, in->c), co);
}

/* The customer at position ceil(n / 2) of the (w, d, name) index (clause 2.5.2.2). */
static int customer_by_name(struct tpcc_coord *x, bool found, uint32_t *c)
{
	unsigned n = x->name.n;

	if (!found || n == 0 || n > TPCC_NAME_IDS)
		return -REMORA_ENOTFOUND;
	*c = x->name.c_id[(n + 1) / 2 - 1];
	return 0;
}

/* Prepends the payment to C_DATA of a bad-credit customer, keeping 500 characters. */
static void bc_data(struct tpcc_customer *cu, const struct tpcc_in_payment *in, uint32_t c)
{
	char head[64];
	size_t max = sizeof(cu->c_data) - 1, keep, n;
	int len = snprintf(head, sizeof(head), "%u %u %u %u %u %" PRId64 ".%02" PRId64 " ", c,
			   in->c_d, in->c_w, in->d, in->w, in->amount / 100, in->amount % 100);

	if (len < 0)
		return;
	n = (size_t)len < sizeof(head) ? (size_t)len : sizeof(head) - 1;
	keep = strnlen(cu->c_data, max);
	if (keep > max - n)
		keep = max - n;
	memmove(cu->c_data + n, cu->c_data, keep);
	memcpy(cu->c_data, head, n);
	cu->c_data[n + keep] = '\0';
}

/* Clause 2.5.2: Payment. */
static int tx_payment(struct tpcc_coord *x, struct remora_tx *tx,
		      const struct tpcc_in_payment *in, struct wl_result *res)
{
	struct tpcc_customer *cu = &x->cust[0];
	struct tpcc_district *dist = &x->dist[0];
	bool fw, fd, fc = false, fn = false;
	uint32_t cid = in->c_or_name;
	struct tpcc_history h = { 0 };
	bool bc;
	int rc;

	STAGE_CELLS(tx, TPCC_WAREHOUSE, tpcc_key(in->w, 0, 0), C(WH_REST), C(WH_YTD), &x->wh,
		    &fw);
	STAGE_CELLS(tx, TPCC_DISTRICT, tpcc_key(in->w, in->d, 0), C(DI_REST), C(DI_YTD), dist,
		    &fd);
	if (in->by_name)
		STAGE(tx, TPCC_CUSTOMER_NAME, tpcc_key(in->c_w, in->c_d, in->c_or_name), REMORA_RD,
		      &x->name, &fn);
	else
		STAGE_CELLS(tx, TPCC_CUSTOMER, tpcc_key(in->c_w, in->c_d, cid), PAY_CU_RD,
			    PAY_CU_WR, cu, &fc);
	rc = remora_tx_fetch(tx);
	if (!rc && in->by_name) {
		rc = customer_by_name(x, fn, &cid);
		if (!rc)
			STAGE_CELLS(tx, TPCC_CUSTOMER, tpcc_key(in->c_w, in->c_d, cid),
				    PAY_CU_RD, PAY_CU_WR, cu, &fc);
		if (!rc)
			rc = remora_tx_fetch(tx);
	}
	if (!rc)
		rc = must(fw && fd && fc);
	if (rc)
		return rc;
	if (x->wh.w_id != in->w || dist->d_id != in->d || cu->c_id != cid)
		res->integrity_errors++;
	x->wh.w_ytd += in->amount;
	dist->d_ytd += in->amount;
	cu->c_balance -= in->amount;
	cu->c_ytd_payment += in->amount;
	cu->c_payment_cnt++;
	bc = memcmp(cu->c_credit, "BC", 2) == 0;
	if (bc)
		bc_data(cu, in, cid);
	rc = remora_tx_write_cells(tx, TPCC_WAREHOUSE, tpcc_key(in->w, 0, 0), C(WH_YTD), &x->wh);
	if (!rc)
		rc = remora_tx_write_cells(tx, TPCC_DISTRICT, tpcc_key(in->w, in->d, 0), C(DI_YTD),
					   dist);
	if (!rc)
		rc = remora_tx_write_cells(tx, TPCC_CUSTOMER, tpcc_key(in->c_w, in->c_d, cid),
					   C(CU_BAL) | C(CU_CNT) | (bc ? C(CU_DATA) : 0), cu);
	if (rc)
		return rc;
	h.h_c_id = cid;
	h.h_c_d_id = in->c_d;
	h.h_c_w_id = in->c_w;
	h.h_d_id = in->d;
	h.h_w_id = in->w;
	h.h_date = now_s();
	h.h_amount = in->amount;
	snprintf(h.h_data, sizeof(h.h_data), "%.10s    %.10s", x->wh.w_name, dist->d_name);
	rc = remora_tx_insert(tx, TPCC_HISTORY,
			      tpcc_history_key(in->w, in->d, in->origin, in->hseq), &h);
	res->delta = in->amount;
	return rc;
}

/* Clause 2.6.2: OrderStatus (read-only). */
static int tx_order_status(struct tpcc_coord *x, struct remora_tx *tx,
			   const struct tpcc_in_order_status *in, struct wl_result *res)
{
	unsigned w = in->w, d = in->d, n;
	uint32_t cid = in->c_or_name;
	bool fn = false, fc, fco, fo;
	int rc = 0;

	if (in->by_name) {
		STAGE(tx, TPCC_CUSTOMER_NAME, tpcc_key(w, d, in->c_or_name), REMORA_RD, &x->name,
		      &fn);
		rc = remora_tx_fetch(tx);
		if (!rc)
			rc = customer_by_name(x, fn, &cid);
		if (rc)
			return rc;
	}
	STAGE(tx, TPCC_CUSTOMER, tpcc_key(w, d, cid), REMORA_RD, &x->cust[0], &fc);
	STAGE(tx, TPCC_CUSTOMER_ORDER, tpcc_key(w, d, cid), REMORA_RD, &x->co[0], &fco);
	rc = remora_tx_fetch(tx);
	if (!rc)
		rc = must(fc && fco);
	if (rc)
		return rc;
	n = x->co[0].ol_cnt;
	if (n > TPCC_MAX_OL)
		n = TPCC_MAX_OL;
	STAGE(tx, TPCC_ORDER, tpcc_key(w, d, x->co[0].o_id), REMORA_RD, &x->order[0], &fo);
	for (unsigned i = 0; i < n; i++)
		STAGE(tx, TPCC_ORDER_LINE, tpcc_ol_key(w, d, x->co[0].o_id, i + 1), REMORA_RD,
		      &x->line[i], &x->f_a[i]);
	rc = remora_tx_fetch(tx);
	if (!rc)
		rc = race(fo);
	for (unsigned i = 0; !rc && i < n; i++)
		rc = race(x->f_a[i]);
	if (rc)
		return rc;
	if (x->cust[0].c_id != cid || x->order[0].o_c_id != cid || x->order[0].o_ol_cnt != n)
		res->integrity_errors++;
	return 0;
}

/* Clause 2.7.4: Delivery, all ten districts in one transaction. */
static int tx_delivery(struct tpcc_coord *x, struct remora_tx *tx,
		       const struct tpcc_in_delivery *in, struct wl_result *res)
{
	unsigned w = in->w, nl = 0;
	unsigned line0[TPCC_DISTRICTS];
	bool fcur[TPCC_DISTRICTS], fo[TPCC_DISTRICTS];
	int64_t now = now_s();
	int rc;

	for (unsigned d = 0; d < TPCC_DISTRICTS; d++)
		STAGE(tx, TPCC_DELIVERY, tpcc_key(w, d + 1, 0), REMORA_RW, &x->deliv[d], &fcur[d]);
	rc = remora_tx_fetch(tx);
	for (unsigned d = 0; !rc && d < TPCC_DISTRICTS; d++)
		rc = must(fcur[d]);
	if (rc)
		return rc;
	/* the oldest undelivered order of each district: new_order at the cursor */
	for (unsigned d = 0; d < TPCC_DISTRICTS; d++) {
		uint64_t o = x->deliv[d].next_o_id;

		STAGE(tx, TPCC_NEW_ORDER, tpcc_key(w, d + 1, o), REMORA_RW, &x->no[d], &x->f_c[d]);
		STAGE(tx, TPCC_ORDER, tpcc_key(w, d + 1, o), REMORA_RW, &x->order[d], &fo[d]);
	}
	rc = remora_tx_fetch(tx);
	if (rc)
		return rc;
	for (unsigned d = 0; d < TPCC_DISTRICTS; d++) {
		uint64_t o = x->deliv[d].next_o_id;
		unsigned n = x->order[d].o_ol_cnt;

		line0[d] = nl;
		if (!x->f_c[d])
			continue; /* no undelivered order: this district is skipped (2.7.4.2) */
		rc = race(fo[d]);
		if (rc)
			return rc;
		if (n > TPCC_MAX_OL)
			n = TPCC_MAX_OL;
		for (unsigned i = 0; i < n; i++, nl++)
			STAGE(tx, TPCC_ORDER_LINE, tpcc_ol_key(w, d + 1, o, i + 1), REMORA_RW,
			      &x->line[nl], &x->f_a[nl]);
		STAGE(tx, TPCC_CUSTOMER, tpcc_key(w, d + 1, x->order[d].o_c_id), REMORA_RW,
		      &x->cust[d], &x->f_b[d]);
	}
	rc = remora_tx_fetch(tx);
	if (rc)
		return rc;
	for (unsigned d = 0; d < TPCC_DISTRICTS; d++) {
		uint64_t o = x->deliv[d].next_o_id;
		struct tpcc_order *ord = &x->order[d];
		unsigned n = ord->o_ol_cnt > TPCC_MAX_OL ? TPCC_MAX_OL : ord->o_ol_cnt;
		int64_t sum = 0;

		if (!x->f_c[d])
			continue;
		rc = must(x->f_b[d]);
		if (rc)
			return rc;
		if (x->no[d].no_o_id != o || ord->o_id != o)
			res->integrity_errors++;
		rc = remora_tx_delete(tx, TPCC_NEW_ORDER, tpcc_key(w, d + 1, o));
		if (rc)
			return rc;
		ord->o_carrier_id = in->carrier;
		rc = remora_tx_write(tx, TPCC_ORDER, tpcc_key(w, d + 1, o), ord);
		for (unsigned i = 0; !rc && i < n; i++) {
			struct tpcc_order_line *ol = &x->line[line0[d] + i];

			rc = race(x->f_a[line0[d] + i]);
			if (rc)
				break;
			ol->ol_delivery_d = now;
			sum += ol->ol_amount;
			rc = remora_tx_write(tx, TPCC_ORDER_LINE, tpcc_ol_key(w, d + 1, o, i + 1),
					     ol);
		}
		if (rc)
			return rc;
		x->cust[d].c_balance += sum;
		x->cust[d].c_delivery_cnt++;
		rc = remora_tx_write(tx, TPCC_CUSTOMER, tpcc_key(w, d + 1, ord->o_c_id),
				     &x->cust[d]);
		x->deliv[d].next_o_id++;
		if (!rc)
			rc = remora_tx_write(tx, TPCC_DELIVERY, tpcc_key(w, d + 1, 0),
					     &x->deliv[d]);
		if (rc)
			return rc;
		res->delta++;
	}
	return 0;
}

static int cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	return (x > y) - (x < y);
}

/* Clause 2.8.2: StockLevel (read-only): distinct items of the last 20 orders below threshold. */
static int tx_stock_level(struct tpcc_coord *x, struct remora_tx *tx,
			  const struct tpcc_in_stock_level *in, struct wl_result *res)
{
	unsigned w = in->w, d = in->d, norders, nl = 0, nids = 0, low = 0;
	uint32_t next, first;
	bool fd, fo[SL_ORDERS];
	int rc;

	STAGE(tx, TPCC_DISTRICT, tpcc_key(w, d, 0), REMORA_RD, &x->dist[0], &fd);
	rc = remora_tx_fetch(tx);
	if (!rc)
		rc = must(fd);
	if (rc)
		return rc;
	next = x->dist[0].d_next_o_id;
	first = next > SL_ORDERS ? next - SL_ORDERS : 1;
	norders = next - first;
	for (unsigned i = 0; i < norders; i++)
		STAGE(tx, TPCC_ORDER, tpcc_key(w, d, first + i), REMORA_RD, &x->order[i], &fo[i]);
	rc = remora_tx_fetch(tx);
	if (rc)
		return rc;
	for (unsigned i = 0; i < norders; i++) {
		unsigned n = x->order[i].o_ol_cnt;

		if (n > TPCC_MAX_OL)
			n = TPCC_MAX_OL;

		rc = race(fo[i]);
		if (rc)
			return rc;
		for (unsigned l = 0; l < n; l++, nl++)
			STAGE(tx, TPCC_ORDER_LINE, tpcc_ol_key(w, d, first + i, l + 1), REMORA_RD,
			      &x->line[nl], &x->f_a[nl]);
	}
	rc = remora_tx_fetch(tx);
	if (rc)
		return rc;
	for (unsigned i = 0; i < nl; i++) {
		rc = race(x->f_a[i]);
		if (rc)
			return rc;
		x->ids[i] = x->line[i].ol_i_id;
	}
	qsort(x->ids, nl, sizeof(x->ids[0]), cmp_u32);
	for (unsigned i = 0; i < nl; i++)
		if (i == 0 || x->ids[i] != x->ids[i - 1])
			x->ids[nids++] = x->ids[i];
	for (unsigned i = 0; i < nids; i++)
		STAGE(tx, TPCC_STOCK, tpcc_key(w, 0, x->ids[i]), REMORA_RD, &x->stock[i],
		      &x->f_b[i]);
	rc = remora_tx_fetch(tx);
	if (rc)
		return rc;
	for (unsigned i = 0; i < nids; i++) {
		rc = must(x->f_b[i]);
		if (rc)
			return rc;
		if (x->stock[i].s_quantity < in->threshold)
			low++;
	}
	res->delta = low;
	return 0;
}

static int tpcc_exec(const struct wl *wl, struct wl_coord *c, struct remora_tx *tx,
		     const struct wl_input *in, struct wl_result *res)
{
	const struct tpcc *t = wl->priv;
	struct tpcc_coord *x = c->priv;

	switch (in->type) {
	case TPCC_NEW_ORDER_TX: {
		struct tpcc_in_new_order a;

		memcpy(&a, in->key, sizeof(a));
		return tx_new_order(t, x, tx, &a, res);
	}
	case TPCC_PAYMENT_TX: {
		struct tpcc_in_payment a;

		memcpy(&a, in->key, sizeof(a));
		return tx_payment(x, tx, &a, res);
	}
	case TPCC_ORDER_STATUS_TX: {
		struct tpcc_in_order_status a;

		memcpy(&a, in->key, sizeof(a));
		return tx_order_status(x, tx, &a, res);
	}
	case TPCC_DELIVERY_TX: {
		struct tpcc_in_delivery a;

		memcpy(&a, in->key, sizeof(a));
		return tx_delivery(x, tx, &a, res);
	}
	default: {
		struct tpcc_in_stock_level a;

		memcpy(&a, in->key, sizeof(a));
		return tx_stock_level(x, tx, &a, res);
	}
	}
}

/* Accumulators: new orders and delivered orders committed (the checks report them). */
static void tpcc_commit(const struct wl *wl, struct wl_coord *c, const struct wl_input *in,
			const struct wl_result *res, uint64_t txid)
{
	(void)wl;
	(void)txid;
	if (in->type == TPCC_NEW_ORDER_TX)
		c->acc[0]++;
	else if (in->type == TPCC_DELIVERY_TX)
		c->acc[1] += res->delta;
	else if (in->type == TPCC_PAYMENT_TX)
		c->acc[2] += res->delta;
}

static int tpcc_verify(const struct wl *wl, struct remora_worker *w, const int64_t *acc,
		       char *msg, size_t msglen)
{
	(void)acc;
	return tpcc_check(wl, w, msg, msglen);
}

const struct wl_desc wl_tpcc = {
	.name = "tpcc",
	.summary = "TPC-C: 9 tables, NewOrder/Payment/OrderStatus/Delivery/StockLevel 45/43/4/4/4",
	.source = "TPC-C standard specification 5.11; FORD (FAST'22) and Motor (OSDI'24) TPC-C",
	.knobs = tpcc_knobs,
	.ntypes = TPCC__TYPES,
	.type_names = { "NewOrder", "Payment", "OrderStatus", "Delivery", "StockLevel" },
	.acc_names = { "new_orders", "delivered", "paid_cents" },
	.init = tpcc_init,
	.fini = tpcc_fini,
	.tables = tpcc_tables,
	.cells = tpcc_cells,
	.load_count = tpcc_load_count,
	.load = tpcc_load,
	.coord_init = tpcc_coord_init,
	.coord_fini = tpcc_coord_fini,
	.gen = tpcc_gen,
	.tx_flags = tpcc_tx_flags,
	.home_key = tpcc_home_key,
	.exec = tpcc_exec,
	.commit = tpcc_commit,
	.verify = tpcc_verify,
};
