/* SPDX-License-Identifier: MIT */
/*
 * TPC-C (TPC BENCHMARK C, Standard Specification, revision 5.11): the nine tables with their
 * columns, the key layout, the input generators (NURand and its C constants, last names), and
 * what the consistency checks (apps/bench/tpcc_check.c) and the tests need from the workload.
 * Prefix tpcc_.
 *
 * Key layout (64 bits): the warehouse in the low bits, because LOTUS shards a key by its bits
 * 11:0 and TPC-C's critical field is the warehouse (W_ID); the other protocols hash the whole
 * key and do not care:
 *
 *   63                                   20 19    16 15          0
 *   | table-local part                     | district | warehouse  |
 *
 *   warehouse     w | 0 | 0                 district   w | d | 0
 *   customer      w | d | c_id              history    w | d | origin << 28 | seq
 *   order         w | d | o_id              new_order  w | d | o_id
 *   order_line    w | d | o_id << 4 | ol_number (1..15)
 *   stock         w | 0 | i_id              item       i_id alone (read-only, no warehouse:
 *                                                      sharded by the item id)
 *   customer_name w | d | last-name number (0..999)   secondary index: sorted customer ids
 *   customer_order w | d | c_id             secondary index: the customer's latest order
 *   delivery      w | d | 0                 the district's oldest undelivered order id
 *
 * Money is integer cents and rates are integer ten-thousandths, so the consistency conditions
 * compare exact integers.
 */
#ifndef REMORA_APPS_TPCC_H
#define REMORA_APPS_TPCC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "workload.h"

enum tpcc_table {
	TPCC_WAREHOUSE,
	TPCC_DISTRICT,
	TPCC_CUSTOMER,
	TPCC_HISTORY,
	TPCC_NEW_ORDER,
	TPCC_ORDER,
	TPCC_ORDER_LINE,
	TPCC_ITEM,
	TPCC_STOCK,
	TPCC_CUSTOMER_NAME,  /* (w, d, C_LAST) -> customer ids sorted by C_FIRST */
	TPCC_CUSTOMER_ORDER, /* (w, d, c) -> the customer's latest O_ID and its O_OL_CNT */
	TPCC_DELIVERY,       /* (w, d) -> the oldest NO_O_ID not delivered yet */
	TPCC__TABLES
};

enum tpcc_type {
	TPCC_NEW_ORDER_TX,
	TPCC_PAYMENT_TX,
	TPCC_ORDER_STATUS_TX,
	TPCC_DELIVERY_TX,
	TPCC_STOCK_LEVEL_TX,
	TPCC__TYPES
};

/* Sizes of the specification (clause 1.2 and 4.3.3.1), before --scale. */
#define TPCC_DISTRICTS 10
#define TPCC_ITEMS 100000
#define TPCC_CUSTOMERS 3000       /* per district; also the initial orders per district */
#define TPCC_NEW_ORDERS 900       /* per district: the last 900 initial orders are undelivered */
#define TPCC_NAMES 1000           /* distinct last names */
#define TPCC_MIN_OL 5
#define TPCC_MAX_OL 15
/*
 * Customers one last-name index record holds. NURand(255, 0, 999) makes some names frequent:
 * 2000 draws give a name about 51 times on average at the peak, ~80 at most over hundreds of
 * districts (4 standard deviations), so 128 is far above anything a load produces.
 */
#define TPCC_NAME_IDS 128
#define TPCC_MAX_WAREHOUSES 65535

/* ---- records (values; the key is not repeated beyond the columns the spec lists) -------- */

struct tpcc_warehouse {
	int64_t w_ytd;            /* cents */
	int32_t w_tax;            /* 1/10000 */
	uint16_t w_id;
	char w_name[11];
	char w_street_1[21];
	char w_street_2[21];
	char w_city[21];
	char w_state[3];
	char w_zip[10];
	char _pad[3];
};
_Static_assert(sizeof(struct tpcc_warehouse) == 104, "warehouse record layout");

struct tpcc_district {
	int64_t d_ytd;            /* cents */
	int32_t d_tax;            /* 1/10000 */
	uint32_t d_next_o_id;
	uint16_t d_w_id;
	uint8_t d_id;
	char d_name[11];
	char d_street_1[21];
	char d_street_2[21];
	char d_city[21];
	char d_state[3];
	char d_zip[10];
	char _pad[6];
};
_Static_assert(sizeof(struct tpcc_district) == 112, "district record layout");

struct tpcc_customer {
	int64_t c_balance;        /* cents */
	int64_t c_ytd_payment;    /* cents */
	int64_t c_credit_lim;     /* cents */
	int64_t c_since;          /* seconds since the epoch */
	int32_t c_discount;       /* 1/10000 */
	uint32_t c_id;
	uint32_t c_payment_cnt;
	uint32_t c_delivery_cnt;
	uint16_t c_w_id;
	uint8_t c_d_id;
	char c_first[17];
	char c_middle[3];
	char c_last[17];
	char c_street_1[21];
	char c_street_2[21];
	char c_city[21];
	char c_state[3];
	char c_zip[10];
	char c_phone[17];
	char c_credit[3];         /* "GC" or "BC" */
	char c_data[501];
	char _pad[3];
};
_Static_assert(sizeof(struct tpcc_customer) == 688, "customer record layout");

struct tpcc_history {
	int64_t h_date;
	int64_t h_amount;         /* cents */
	uint32_t h_c_id;
	uint16_t h_c_w_id;
	uint16_t h_w_id;
	uint8_t h_c_d_id;
	uint8_t h_d_id;
	char h_data[25];
	char _pad[5];
};
_Static_assert(sizeof(struct tpcc_history) == 56, "history record layout");

struct tpcc_new_order {
	uint32_t no_o_id;
	uint16_t no_w_id;
	uint8_t no_d_id;
	uint8_t _pad;
};
_Static_assert(sizeof(struct tpcc_new_order) == 8, "new_order record layout");

struct tpcc_order {
	int64_t o_entry_d;
	uint32_t o_id;
	uint32_t o_c_id;
	uint16_t o_w_id;
	uint8_t o_d_id;
	uint8_t o_carrier_id;     /* 0: null (not delivered) */
	uint8_t o_ol_cnt;
	uint8_t o_all_local;
	uint8_t _pad[2];
};
_Static_assert(sizeof(struct tpcc_order) == 24, "order record layout");

struct tpcc_order_line {
	int64_t ol_delivery_d;    /* 0: null (not delivered) */
	int64_t ol_amount;        /* cents */
	uint32_t ol_o_id;
	uint32_t ol_i_id;
	uint16_t ol_w_id;
	uint16_t ol_supply_w_id;
	uint8_t ol_d_id;
	uint8_t ol_number;
	uint8_t ol_quantity;
	char ol_dist_info[25];
	char _pad[8];
};
_Static_assert(sizeof(struct tpcc_order_line) == 64, "order_line record layout");

struct tpcc_item {
	int64_t i_price;          /* cents */
	uint32_t i_id;
	uint32_t i_im_id;
	char i_name[25];
	char i_data[51];
	char _pad[4];
};
_Static_assert(sizeof(struct tpcc_item) == 96, "item record layout");

struct tpcc_stock {
	int64_t s_ytd;
	uint32_t s_i_id;
	uint32_t s_order_cnt;
	uint32_t s_remote_cnt;
	int16_t s_quantity;
	uint16_t s_w_id;
	char s_dist[TPCC_DISTRICTS][25];
	char s_data[51];
	char _pad[1];
};
_Static_assert(sizeof(struct tpcc_stock) == 328, "stock record layout");

/* Secondary index: every customer of (w, d) with this last name, sorted by C_FIRST. */
struct tpcc_customer_name {
	uint16_t n;
	uint16_t c_id[TPCC_NAME_IDS]; /* C_ID <= 3000 */
	uint16_t _pad;
};
_Static_assert(sizeof(struct tpcc_customer_name) == 260, "customer_name index layout");

/* Secondary index: the customer's latest order, maintained by NewOrder. */
struct tpcc_customer_order {
	uint32_t o_id;
	uint8_t ol_cnt;
	uint8_t _pad[3];
};
_Static_assert(sizeof(struct tpcc_customer_order) == 8, "customer_order index layout");

/* Per district: the oldest order Delivery has not delivered yet (min NO_O_ID when present). */
struct tpcc_delivery {
	uint32_t next_o_id;
	uint32_t _pad;
};
_Static_assert(sizeof(struct tpcc_delivery) == 8, "delivery cursor layout");

/*
 * Delivery writes, per district, the customer, the order, up to 15 order lines, the delivery
 * cursor and deletes the new_order row: each write set entry is logged as a 48 B header plus
 * the record image (32 B record header + value). All ten districts must fit the default 32 KiB
 * log slot of one coordinator.
 */
#define TPCC_LOG_IMG(v) (48u + 32u + (uint32_t)sizeof(v))
_Static_assert(64u + TPCC_DISTRICTS * (TPCC_LOG_IMG(struct tpcc_customer) +
				      TPCC_LOG_IMG(struct tpcc_order) +
				      TPCC_LOG_IMG(struct tpcc_new_order) +
				      TPCC_MAX_OL * TPCC_LOG_IMG(struct tpcc_order_line) +
				      TPCC_LOG_IMG(struct tpcc_delivery)) <= 32768u,
	       "a Delivery of ten full orders fits one 32 KiB log slot");

/* ---- keys ------------------------------------------------------------------------------ */

#define TPCC_D_SHIFT 16
#define TPCC_LOCAL_SHIFT 20
#define TPCC_W_MASK ((UINT64_C(1) << TPCC_D_SHIFT) - 1)
#define TPCC_LOCAL_MASK ((UINT64_C(1) << (64 - TPCC_LOCAL_SHIFT)) - 1)
_Static_assert(TPCC_MAX_WAREHOUSES <= TPCC_W_MASK, "a warehouse id fits its key bits");

static inline uint64_t tpcc_key(uint64_t w, uint64_t d, uint64_t local)
{
	return (local & TPCC_LOCAL_MASK) << TPCC_LOCAL_SHIFT | d << TPCC_D_SHIFT | w;
}

/* Items belong to no warehouse: the item id alone, so that their shards spread. */
static inline uint64_t tpcc_item_key(uint64_t i_id)
{
	return i_id;
}

static inline uint64_t tpcc_ol_key(uint64_t w, uint64_t d, uint64_t o, uint64_t ol)
{
	return tpcc_key(w, d, o << 4 | ol);
}

static inline unsigned tpcc_key_w(uint64_t key)
{
	return (unsigned)(key & TPCC_W_MASK);
}

/*
 * History has no key in the spec; here it is (w, d, origin, seq): origin 0 for the loaded
 * rows (seq = c_id), else the inserting coordinator's cluster index + 1 (12 bits) and its own
 * sequence (28 bits), so concurrent Payments never collide.
 */
static inline uint64_t tpcc_history_key(uint64_t w, uint64_t d, uint64_t origin, uint64_t seq)
{
	return tpcc_key(w, d, (origin & 0xfff) << 28 | (seq & 0xfffffff));
}

/* ---- generators (clause 2.1.6 and 4.3.2) ---------------------------------------------- */

/* The run's C constants of NURand (clause 2.1.6): one per A, plus C_LAST for the load. */
struct tpcc_nurand_c {
	uint32_t c_last_load;  /* A = 255, used to generate the loaded C_LAST values */
	uint32_t c_last_run;   /* A = 255, used by Payment and OrderStatus */
	uint32_t c_id;         /* A = 1023 */
	uint32_t ol_i_id;      /* A = 8191 */
};

/*
 * Draws the constants from a seed: C_LAST's run value differs from the load value by
 * 65..119 and not by 96 or 112 (clause 2.1.6.1).
 */
void tpcc_nurand_constants(uint64_t seed, struct tpcc_nurand_c *out);

/* NURand(A, x, y) = (((random(0, A) | random(x, y)) + C) % (y - x + 1)) + x. */
static inline uint64_t tpcc_nurand(struct wl_rng *r, uint64_t a, uint64_t c, uint64_t x,
				   uint64_t y)
{
	uint64_t lo = wl_rng_below(r, a + 1);
	uint64_t hi = x + wl_rng_below(r, y - x + 1);

	return (((lo | hi) + c) % (y - x + 1)) + x;
}

/* Uniform in [x, y]. */
static inline uint64_t tpcc_rand(struct wl_rng *r, uint64_t x, uint64_t y)
{
	return x + wl_rng_below(r, y - x + 1);
}

/* C_LAST of last-name number n (0..999): three syllables; returns the length written. */
size_t tpcc_last_name(unsigned n, char out[17]);

/* ---- transaction inputs ---------------------------------------------------------------- */

/* Transaction inputs, packed into wl_input.key[] (kept across retries). */
struct tpcc_in_new_order {
	uint16_t w;
	uint8_t d;
	uint8_t ol_cnt;
	uint32_t c;
	struct {
		uint32_t i_id;     /* items + 1: the unused item of a rollback */
		uint16_t supply_w;
		uint8_t qty;
		uint8_t _pad;
	} ol[TPCC_MAX_OL];
};

struct tpcc_in_payment {
	int64_t amount;            /* cents */
	uint32_t c_or_name;        /* C_ID, or last-name number when by_name */
	uint32_t hseq;             /* history key: its coordinator's wl_coord.drawn, */
	uint32_t origin;           /* ... and that coordinator's global index + 1 (a routed
				    * payment runs on another node's coordinator) */
	uint16_t w, c_w;
	uint8_t d, c_d;
	uint8_t by_name;
	uint8_t _pad;
};

struct tpcc_in_order_status {
	uint32_t c_or_name;
	uint16_t w;
	uint8_t d;
	uint8_t by_name;
};

struct tpcc_in_delivery {
	uint16_t w;
	uint8_t carrier;
	uint8_t _pad;
};

struct tpcc_in_stock_level {
	uint16_t w;
	uint8_t d;
	uint8_t threshold;
};

#define TPCC_IN_FITS(t) _Static_assert(sizeof(t) <= sizeof(((struct wl_input *)0)->key), #t)
TPCC_IN_FITS(struct tpcc_in_new_order);
TPCC_IN_FITS(struct tpcc_in_payment);
TPCC_IN_FITS(struct tpcc_in_order_status);
TPCC_IN_FITS(struct tpcc_in_delivery);
TPCC_IN_FITS(struct tpcc_in_stock_level);

/* ---- the workload's configuration, for the checks and the tests ------------------------ */

struct tpcc_mix {
	unsigned pct[TPCC__TYPES];
};

struct tpcc_cfg {
	uint32_t warehouses;
	uint32_t items;           /* 100000 x scale */
	uint32_t customers;       /* per district: 3000 x scale (also the initial orders) */
	uint32_t new_orders;      /* per district: initial undelivered orders */
	uint32_t names;           /* distinct last names: min(1000, customers) */
	uint64_t room;            /* NewOrder and Payment transactions the tables have room for */
	unsigned remote_ol_pct;   /* NewOrder: percent of lines from a remote warehouse (1) */
	unsigned remote_c_pct;    /* Payment: percent of remote customers (15) */
	unsigned by_name_pct;     /* Payment, OrderStatus: percent by last name (60) */
	unsigned rollback_pct;    /* NewOrder: percent with an unused item (1) */
	unsigned mix[TPCC__TYPES]; /* cumulative percentages */
	struct tpcc_nurand_c c;
};

/* The configuration of a tpcc workload instance (wl->desc must be the tpcc workload). */
const struct tpcc_cfg *tpcc_cfg_of(const struct wl *wl);

/* Initial value of W_YTD and D_YTD (clause 4.3.3.1), in cents. */
#define TPCC_W_YTD_INIT 30000000
#define TPCC_D_YTD_INIT 3000000

/*
 * The consistency conditions 1-4 of clause 3.3.2, over every warehouse and district, read
 * through read-only transactions on w (outside coroutines). Returns 0 when all hold, 1 when
 * one is violated (msg names the condition, the warehouse and district, and the values), or a
 * negative code when the store could not be read (msg says why). apps/bench/tpcc_check.c.
 */
int tpcc_check(const struct wl *wl, struct remora_worker *w, char *msg, size_t msglen);

extern const struct wl_desc wl_tpcc;

#endif
