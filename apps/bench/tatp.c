// SPDX-License-Identifier: MIT
/*
 * TATP (Telecom Application Transaction Processing benchmark, description 1.0) as FORD, Motor,
 * Pandora, LOTUS and OOCC run it: four tables, seven transactions mixed
 * 35/10/35/2/14/2/2 (GetSubscriberData, GetNewDestination, GetAccessData,
 * UpdateSubscriberData, UpdateLocation, InsertCallForwarding, DeleteCallForwarding), subscriber
 * ids drawn with the specification's non-uniform NURand.
 *
 * UpdateLocation and Insert/DeleteCallForwarding name the subscriber by SUB_NBR (a 15-digit
 * string). A hash store has no secondary index, so, as FORD does, a fifth table sub_nbr maps
 * SUB_NBR to S_ID: those transactions first read it (one more round trip), then the subscriber.
 *
 * Outcomes: a read-only transaction that finds no row (GetAccessData without that ai_type,
 * GetNewDestination without an active facility or a matching forwarding) commits its empty
 * answer and counts a not-found read; a write transaction whose row is missing or already
 * there (UpdateSubscriberData without the facility, InsertCallForwarding on an existing
 * forwarding or a missing facility, DeleteCallForwarding of a missing forwarding) fails as the
 * specification says: the application rolls it back (counted as user_aborted, not retried).
 *
 * Invariant (--check): call_forwarding rows = loaded + committed inserts - committed deletes,
 * and every call_forwarding row has its special_facility row (the foreign key InsertCF keeps).
 */
#include "tatp.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mix.h"

static const char *const tatp_type_names[TATP__TYPES] = {
	"GetSubscriberData", "GetNewDestination", "GetAccessData", "UpdateSubscriberData",
	"UpdateLocation", "InsertCallForwarding", "DeleteCallForwarding",
};

static const struct wl_knob tatp_knobs[] = {
	{ "subscribers", "40000", "subscribers (LOTUS: 3M; FORD and Motor: 1M; ~1.3 KB of pool "
				   "per subscriber)" },
	{ "mix", "35,10,35,2,14,2,2",
	  "percent of GetSubscriberData,GetNewDestination,GetAccessData,UpdateSubscriberData,"
	  "UpdateLocation,InsertCallForwarding,DeleteCallForwarding (or Name=pct,...)" },
	{ NULL, NULL, NULL },
};

#define BLOCK 1024 /* subscribers per load-index block */

struct tatp {
	uint64_t subscribers;
	unsigned mix[TATP__TYPES];
	uint64_t *block_at;     /* first load row of each block of BLOCK subscribers */
	uint64_t nblocks;
	uint64_t rows;
	uint64_t cf_loaded;     /* call_forwarding rows of the population */
	uint64_t cf_possible;   /* call_forwarding keys whose facility exists: 3 per facility */
};

/* What one subscriber's rows are, drawn from its own stream (so any loader can make them). */
struct tatp_pop {
	uint8_t n_ai, n_sf;
	uint8_t ai[4], sf[4];
	uint8_t n_cf[4];        /* per facility */
	uint8_t cf_start[4][3];
};

static void pop_rng(const struct wl *wl, struct wl_rng *r, uint64_t s_id, unsigned what)
{
	wl_rng_seed(r, wl->seed ^ ((uint64_t)(what + 1) * UINT64_C(0x9e3779b97f4a7c15)), s_id);
}

/* k distinct values out of `from` (n of them), in random order. */
static void pick(struct wl_rng *r, const uint8_t *from, unsigned n, unsigned k, uint8_t *out)
{
	uint8_t v[4];

	memcpy(v, from, n);
	for (unsigned i = 0; i < k; i++) {
		unsigned j = i + (unsigned)wl_rng_below(r, n - i);
		uint8_t t = v[i];

		v[i] = v[j];
		v[j] = t;
		out[i] = v[i];
	}
}

static void population(const struct wl *wl, uint64_t s_id, struct tatp_pop *p)
{
	static const uint8_t types[4] = { 1, 2, 3, 4 }, starts[3] = { 0, 8, 16 };
	struct wl_rng r;

	pop_rng(wl, &r, s_id, 0);
	memset(p, 0, sizeof(*p));
	p->n_ai = (uint8_t)(1 + wl_rng_below(&r, 4));
	pick(&r, types, 4, p->n_ai, p->ai);
	p->n_sf = (uint8_t)(1 + wl_rng_below(&r, 4));
	pick(&r, types, 4, p->n_sf, p->sf);
	for (unsigned i = 0; i < p->n_sf; i++) {
		p->n_cf[i] = (uint8_t)wl_rng_below(&r, 4);
		pick(&r, starts, 3, p->n_cf[i], p->cf_start[i]);
	}
}

static unsigned pop_cf(const struct tatp_pop *p)
{
	unsigned n = 0;

	for (unsigned i = 0; i < p->n_sf; i++)
		n += p->n_cf[i];
	return n;
}

/* Rows of one subscriber in load order: subscriber, sub_nbr, access_info, facilities, cf. */
static unsigned pop_rows(const struct tatp_pop *p)
{
	return 2u + p->n_ai + p->n_sf + pop_cf(p);
}

static int tatp_init(struct wl *wl)
{
	struct tatp *t = calloc(1, sizeof(*t));
	uint64_t at = 0;
	int rc;

	if (!t)
		return wl_fail(wl, "out of memory");
	wl->priv = t;
	rc = wl_knob_u64(wl, "subscribers", 1, UINT32_MAX - 1, &t->subscribers);
	if (!rc)
		rc = wl_mix_parse(wl, "mix", tatp_type_names, TATP__TYPES, t->mix);
	if (rc)
		return rc;
	t->nblocks = (t->subscribers + BLOCK - 1) / BLOCK;
	t->block_at = calloc(t->nblocks + 1, sizeof(*t->block_at));
	if (!t->block_at)
		return wl_fail(wl, "out of memory");
	for (uint64_t s = 1; s <= t->subscribers; s++) {
		struct tatp_pop p;

		if ((s - 1) % BLOCK == 0)
			t->block_at[(s - 1) / BLOCK] = at;
		population(wl, s, &p);
		at += pop_rows(&p);
		t->cf_loaded += pop_cf(&p);
		t->cf_possible += 3u * p.n_sf;
	}
	t->block_at[t->nblocks] = at;
	t->rows = at;
	return 0;
}

static void tatp_fini(struct wl *wl)
{
	struct tatp *t = wl->priv;

	if (t)
		free(t->block_at);
	free(t);
}

static unsigned tatp_tables(const struct wl *wl, struct remora_table_def *defs)
{
	static const char *const names[TATP__TABLES] = {
		"subscriber", "access_info", "special_facility", "call_forwarding", "sub_nbr",
	};
	static const uint32_t sizes[TATP__TABLES] = {
		sizeof(struct tatp_subscriber), sizeof(struct tatp_access_info),
		sizeof(struct tatp_special_facility), sizeof(struct tatp_call_forwarding),
		sizeof(struct tatp_sub_nbr),
	};
	const struct tatp *t = wl->priv;
	/* access_info and special_facility average 2.5 rows per subscriber, at most 4 */
	uint64_t recs[TATP__TABLES] = {
		t->subscribers, t->subscribers * 5 / 2 + 64, t->subscribers * 5 / 2 + 64,
		t->cf_possible, t->subscribers,
	};

	memset(defs, 0, TATP__TABLES * sizeof(*defs));
	for (unsigned i = 0; i < TATP__TABLES; i++) {
		snprintf(defs[i].name, sizeof(defs[i].name), "%s", names[i]);
		defs[i].id = i;
		defs[i].value_size = sizes[i];
		defs[i].max_records = recs[i] ? recs[i] : 1;
	}
	return TATP__TABLES;
}

static uint64_t tatp_load_count(const struct wl *wl)
{
	return ((const struct tatp *)wl->priv)->rows;
}

static void upper(struct wl_rng *r, char *out, unsigned len)
{
	for (unsigned i = 0; i < len; i++)
		out[i] = (char)('A' + wl_rng_below(r, 26));
	out[len] = '\0';
}

static void digits(struct wl_rng *r, char *out, unsigned len)
{
	for (unsigned i = 0; i < len; i++)
		out[i] = (char)('0' + wl_rng_below(r, 10));
	out[len] = '\0';
}

static void sub_nbr(uint64_t s_id, char out[16])
{
	snprintf(out, 16, "%015" PRIu64, s_id);
}

/* Writes row j (0-based) of subscriber s_id's rows. */
static int subscriber_row(const struct wl *wl, struct remora_worker *w, uint64_t s_id,
			  const struct tatp_pop *p, unsigned j)
{
	union {
		struct tatp_subscriber sub;
		struct tatp_sub_nbr nbr;
		struct tatp_access_info ai;
		struct tatp_special_facility sf;
		struct tatp_call_forwarding cf;
	} v;
	struct wl_rng r;

	memset(&v, 0, sizeof(v));
	pop_rng(wl, &r, s_id, 1 + j);
	if (j == 0) {
		v.sub.s_id = (uint32_t)s_id;
		sub_nbr(s_id, v.sub.sub_nbr);
		v.sub.bits = (uint16_t)wl_rng_below(&r, 1024);
		for (unsigned i = 0; i < 10; i++) {
			v.sub.hex[i] = (uint8_t)wl_rng_below(&r, 16);
			v.sub.byte2[i] = (uint8_t)wl_rng_below(&r, 256);
		}
		v.sub.msc_location = (uint32_t)(1 + wl_rng_below(&r, UINT32_MAX));
		v.sub.vlr_location = (uint32_t)(1 + wl_rng_below(&r, UINT32_MAX));
		return remora_db_load(w, TATP_SUBSCRIBER, tatp_key(s_id, 0), &v.sub);
	}
	if (j == 1) {
		sub_nbr(s_id, v.nbr.sub_nbr);
		v.nbr.s_id = (uint32_t)s_id;
		return remora_db_load(w, TATP_SUB_NBR, tatp_key(s_id, 0), &v.nbr);
	}
	j -= 2;
	if (j < p->n_ai) {
		v.ai.s_id = (uint32_t)s_id;
		v.ai.ai_type = p->ai[j];
		v.ai.data1 = (uint8_t)wl_rng_below(&r, 256);
		v.ai.data2 = (uint8_t)wl_rng_below(&r, 256);
		upper(&r, v.ai.data3, 3);
		upper(&r, v.ai.data4, 5);
		return remora_db_load(w, TATP_ACCESS_INFO, tatp_key(s_id, p->ai[j]), &v.ai);
	}
	j -= p->n_ai;
	if (j < p->n_sf) {
		v.sf.s_id = (uint32_t)s_id;
		v.sf.sf_type = p->sf[j];
		v.sf.is_active = wl_rng_pct(&r, 85);
		v.sf.error_cntrl = (uint8_t)wl_rng_below(&r, 256);
		v.sf.data_a = (uint8_t)wl_rng_below(&r, 256);
		upper(&r, v.sf.data_b, 5);
		return remora_db_load(w, TATP_SPECIAL_FACILITY, tatp_key(s_id, p->sf[j]), &v.sf);
	}
	j -= p->n_sf;
	for (unsigned f = 0; f < p->n_sf; f++) {
		if (j >= p->n_cf[f]) {
			j -= p->n_cf[f];
			continue;
		}
		v.cf.s_id = (uint32_t)s_id;
		v.cf.sf_type = p->sf[f];
		v.cf.start_time = p->cf_start[f][j];
		v.cf.end_time = (uint8_t)(v.cf.start_time + 1 + wl_rng_below(&r, 8));
		digits(&r, v.cf.numberx, 15);
		return remora_db_load(w, TATP_CALL_FORWARDING,
				      tatp_cf_key(s_id, v.cf.sf_type, v.cf.start_time), &v.cf);
	}
	return -EINVAL; /* a row index past the subscriber's rows: the block table is wrong */
}

static int tatp_load(const struct wl *wl, struct remora_worker *w, uint64_t begin, uint64_t end)
{
	const struct tatp *t = wl->priv;
	uint64_t lo = 0, hi = t->nblocks - 1, s, at;

	if (begin >= end)
		return 0;
	while (lo < hi) {
		uint64_t mid = (lo + hi + 1) / 2;

		if (t->block_at[mid] <= begin)
			lo = mid;
		else
			hi = mid - 1;
	}
	s = lo * BLOCK + 1;
	at = t->block_at[lo];
	for (; s <= t->subscribers && at < end; s++) {
		struct tatp_pop p;
		unsigned n;

		population(wl, s, &p);
		n = pop_rows(&p);
		for (unsigned j = 0; j < n; j++, at++) {
			int rc;

			if (at < begin || at >= end)
				continue;
			rc = subscriber_row(wl, w, s, &p, j);
			if (rc)
				return rc;
		}
	}
	return 0;
}

static void tatp_gen(const struct wl *wl, struct wl_coord *c, struct wl_input *in)
{
	const struct tatp *t = wl->priv;
	struct wl_rng *r = &c->rng;
	struct tatp_in x = { 0 };

	memset(in, 0, sizeof(*in));
	in->type = wl_mix_draw(t->mix, TATP__TYPES, r);
	x.s_id = (uint32_t)tatp_subscriber_id(r, t->subscribers);
	sub_nbr(x.s_id, x.sub_nbr);
	x.sf_type = (uint8_t)(1 + wl_rng_below(r, 4));
	x.ai_type = (uint8_t)(1 + wl_rng_below(r, 4));
	x.start_time = (uint8_t)(8 * wl_rng_below(r, 3));
	x.end_time = (uint8_t)(1 + wl_rng_below(r, 24));
	x.bit_1 = (uint8_t)wl_rng_below(r, 2);
	x.data_a = (uint8_t)wl_rng_below(r, 256);
	x.vlr_location = (uint32_t)(1 + wl_rng_below(r, UINT32_MAX));
	digits(r, x.numberx, 15);
	memcpy(in->key, &x, sizeof(x));
}

/* Every transaction is one subscriber's. */
static bool tatp_home_key(const struct wl *wl, const struct wl_input *in, uint64_t *key)
{
	struct tatp_in x;

	(void)wl;
	memcpy(&x, in->key, sizeof(x));
	*key = tatp_key(x.s_id, 0);
	return true;
}

static unsigned tatp_tx_flags(const struct wl *wl, const struct wl_input *in)
{
	(void)wl;
	return in->type <= TATP_GET_ACCESS_DATA ? REMORA_TX_READ_ONLY : 0;
}

/* Per coordinator: where staged reads land. */
struct tatp_coord {
	struct tatp_subscriber sub;
	struct tatp_sub_nbr nbr;
	struct tatp_access_info ai;
	struct tatp_special_facility sf[4];
	struct tatp_call_forwarding cf[3];
	bool f_sf[4], f_cf[3];
};

static int tatp_coord_init(const struct wl *wl, struct wl_coord *c)
{
	(void)wl;
	c->priv = calloc(1, sizeof(struct tatp_coord));
	return c->priv ? 0 : -ENOMEM;
}

static void tatp_coord_fini(const struct wl *wl, struct wl_coord *c)
{
	(void)wl;
	free(c->priv);
}

/* Fetches one row; *found says whether it exists. */
static int get1(struct remora_tx *tx, uint32_t table, uint64_t key, enum remora_access mode,
		void *buf, bool *found)
{
	int rc = remora_tx_stage(tx, table, key, mode, buf, found);

	return rc ? rc : remora_tx_fetch(tx);
}

/* SUB_NBR -> S_ID through the sub_nbr table. */
static int lookup_sub_nbr(struct tatp_coord *x, struct remora_tx *tx, const struct tatp_in *in,
			  uint32_t *s_id, struct wl_result *res)
{
	uint64_t nbr = strtoull(in->sub_nbr, NULL, 10);
	bool found;
	int rc = get1(tx, TATP_SUB_NBR, tatp_key(nbr, 0), REMORA_RD, &x->nbr, &found);

	if (rc)
		return rc;
	if (!found)
		return -REMORA_ENOTFOUND; /* every subscriber's number is loaded: a store bug */
	if (strncmp(x->nbr.sub_nbr, in->sub_nbr, sizeof(x->nbr.sub_nbr)) != 0)
		res->integrity_errors++;
	*s_id = x->nbr.s_id;
	return 0;
}

static int get_subscriber_data(struct tatp_coord *x, struct remora_tx *tx,
			       const struct tatp_in *in, struct wl_result *res)
{
	bool found;
	int rc = get1(tx, TATP_SUBSCRIBER, tatp_key(in->s_id, 0), REMORA_RD, &x->sub, &found);

	if (rc)
		return rc;
	if (!found)
		return -REMORA_ENOTFOUND;
	if (x->sub.s_id != in->s_id || strncmp(x->sub.sub_nbr, in->sub_nbr, 16) != 0)
		res->integrity_errors++;
	return 0;
}

/* The facility and the forwardings that start no later than start_time, in one round trip. */
static int get_new_destination(struct tatp_coord *x, struct remora_tx *tx,
			       const struct tatp_in *in, struct wl_result *res)
{
	unsigned ncf = in->start_time / 8 + 1;
	bool hit = false;
	int rc;

	rc = remora_tx_stage(tx, TATP_SPECIAL_FACILITY, tatp_key(in->s_id, in->sf_type), REMORA_RD,
			     &x->sf[0], &x->f_sf[0]);
	for (unsigned i = 0; !rc && i < ncf; i++)
		rc = remora_tx_stage(tx, TATP_CALL_FORWARDING, tatp_cf_key(in->s_id, in->sf_type,
					8 * i), REMORA_RD, &x->cf[i], &x->f_cf[i]);
	if (!rc)
		rc = remora_tx_fetch(tx);
	if (rc)
		return rc;
	if (x->f_sf[0] && x->sf[0].is_active) {
		for (unsigned i = 0; i < ncf; i++)
			if (x->f_cf[i] && x->cf[i].start_time <= in->start_time &&
			    in->end_time < x->cf[i].end_time)
				hit = true;
	}
	if (!hit)
		res->not_found++;
	return 0;
}

static int get_access_data(struct tatp_coord *x, struct remora_tx *tx, const struct tatp_in *in,
			   struct wl_result *res)
{
	bool found;
	int rc = get1(tx, TATP_ACCESS_INFO, tatp_key(in->s_id, in->ai_type), REMORA_RD, &x->ai,
		      &found);

	if (rc)
		return rc;
	if (!found)
		res->not_found++;
	else if (x->ai.s_id != in->s_id || x->ai.ai_type != in->ai_type)
		res->integrity_errors++;
	return 0;
}

static int update_subscriber_data(struct tatp_coord *x, struct remora_tx *tx,
				  const struct tatp_in *in, struct wl_result *res)
{
	bool fs, ff;
	int rc;

	rc = remora_tx_stage(tx, TATP_SUBSCRIBER, tatp_key(in->s_id, 0), REMORA_RW, &x->sub, &fs);
	if (!rc)
		rc = remora_tx_stage(tx, TATP_SPECIAL_FACILITY, tatp_key(in->s_id, in->sf_type),
				     REMORA_RW, &x->sf[0], &ff);
	if (!rc)
		rc = remora_tx_fetch(tx);
	if (rc)
		return rc;
	if (!fs)
		return -REMORA_ENOTFOUND;
	if (!ff)
		return WL_USER_ABORT; /* no such facility: the transaction fails (rolled back) */
	if (x->sub.s_id != in->s_id || x->sf[0].s_id != in->s_id)
		res->integrity_errors++;
	x->sub.bits = (uint16_t)((x->sub.bits & ~1u) | in->bit_1);
	x->sf[0].data_a = in->data_a;
	rc = remora_tx_write(tx, TATP_SUBSCRIBER, tatp_key(in->s_id, 0), &x->sub);
	if (!rc)
		rc = remora_tx_write(tx, TATP_SPECIAL_FACILITY, tatp_key(in->s_id, in->sf_type),
				     &x->sf[0]);
	return rc;
}

static int update_location(struct tatp_coord *x, struct remora_tx *tx, const struct tatp_in *in,
			   struct wl_result *res)
{
	uint32_t s_id;
	bool found;
	int rc = lookup_sub_nbr(x, tx, in, &s_id, res);

	if (!rc)
		rc = get1(tx, TATP_SUBSCRIBER, tatp_key(s_id, 0), REMORA_RW, &x->sub, &found);
	if (rc)
		return rc;
	if (!found)
		return -REMORA_ENOTFOUND;
	x->sub.vlr_location = in->vlr_location;
	return remora_tx_write(tx, TATP_SUBSCRIBER, tatp_key(s_id, 0), &x->sub);
}

static int insert_call_forwarding(struct tatp_coord *x, struct remora_tx *tx,
				  const struct tatp_in *in, struct wl_result *res)
{
	struct tatp_call_forwarding cf = { 0 };
	uint32_t s_id;
	int rc = lookup_sub_nbr(x, tx, in, &s_id, res);

	/* SELECT sf_type FROM special_facility WHERE s_id = ?: the four possible rows */
	for (unsigned t = 0; !rc && t < 4; t++)
		rc = remora_tx_stage(tx, TATP_SPECIAL_FACILITY, tatp_key(s_id, t + 1), REMORA_RD,
				     &x->sf[t], &x->f_sf[t]);
	if (!rc)
		rc = remora_tx_fetch(tx);
	if (rc)
		return rc;
	if (!x->f_sf[in->sf_type - 1])
		return WL_USER_ABORT; /* foreign key: no such facility */
	cf.s_id = s_id;
	cf.sf_type = in->sf_type;
	cf.start_time = in->start_time;
	cf.end_time = in->end_time;
	memcpy(cf.numberx, in->numberx, sizeof(cf.numberx));
	rc = remora_tx_insert(tx, TATP_CALL_FORWARDING,
			      tatp_cf_key(s_id, in->sf_type, in->start_time), &cf);
	if (rc == -REMORA_EEXIST)
		return WL_USER_ABORT; /* unique key: the forwarding exists */
	if (!rc)
		res->delta = 1;
	return rc;
}

static int delete_call_forwarding(struct tatp_coord *x, struct remora_tx *tx,
				  const struct tatp_in *in, struct wl_result *res)
{
	uint32_t s_id;
	int rc = lookup_sub_nbr(x, tx, in, &s_id, res);

	if (!rc)
		rc = remora_tx_delete(tx, TATP_CALL_FORWARDING,
				      tatp_cf_key(s_id, in->sf_type, in->start_time));
	if (rc == -REMORA_ENOTFOUND)
		return WL_USER_ABORT; /* nothing to delete: the transaction fails */
	if (!rc)
		res->delta = -1;
	return rc;
}

static int tatp_exec(const struct wl *wl, struct wl_coord *c, struct remora_tx *tx,
		     const struct wl_input *in, struct wl_result *res)
{
	struct tatp_coord *x = c->priv;
	struct tatp_in a;

	(void)wl;
	memcpy(&a, in->key, sizeof(a));
	switch (in->type) {
	case TATP_GET_SUBSCRIBER_DATA:
		return get_subscriber_data(x, tx, &a, res);
	case TATP_GET_NEW_DESTINATION:
		return get_new_destination(x, tx, &a, res);
	case TATP_GET_ACCESS_DATA:
		return get_access_data(x, tx, &a, res);
	case TATP_UPDATE_SUBSCRIBER_DATA:
		return update_subscriber_data(x, tx, &a, res);
	case TATP_UPDATE_LOCATION:
		return update_location(x, tx, &a, res);
	case TATP_INSERT_CALL_FORWARDING:
		return insert_call_forwarding(x, tx, &a, res);
	default:
		return delete_call_forwarding(x, tx, &a, res);
	}
}

/* acc[0]: committed call_forwarding inserts minus deletes. */
static void tatp_commit(const struct wl *wl, struct wl_coord *c, const struct wl_input *in,
			const struct wl_result *res, uint64_t txid)
{
	(void)wl;
	(void)in;
	(void)txid;
	c->acc[0] += res->delta;
}

/* ---- verify: call_forwarding rows and their foreign key --------------------------------- */

#define VBATCH 64 /* subscribers per read-only transaction: 16 keys each */

static int verify_batch(struct remora_worker *w, uint64_t s0, unsigned n, int64_t *rows,
			uint64_t *orphan)
{
	static __thread struct tatp_special_facility sf[VBATCH * 4];
	static __thread struct tatp_call_forwarding cf[VBATCH * 12];
	static __thread bool fsf[VBATCH * 4], fcf[VBATCH * 12];
	static __thread uint64_t ksf[VBATCH * 4], kcf[VBATCH * 12];
	int rc;

	for (unsigned i = 0; i < n; i++)
		for (unsigned t = 0; t < 4; t++) {
			ksf[i * 4 + t] = tatp_key(s0 + i, t + 1);
			for (unsigned st = 0; st < 3; st++)
				kcf[(i * 4 + t) * 3 + st] = tatp_cf_key(s0 + i, t + 1, 8 * st);
		}
	rc = wl_probe_locks(w, TATP_SPECIAL_FACILITY, ksf, n * 4, sf, sizeof(sf[0]), fsf,
			    WL_VERIFY_TIMEOUT_MS);
	if (!rc)
		rc = wl_probe_locks(w, TATP_CALL_FORWARDING, kcf, n * 12, cf, sizeof(cf[0]), fcf,
				    WL_VERIFY_TIMEOUT_MS);
	if (rc)
		return rc;
	for (unsigned i = 0; i < n * 12; i++) {
		if (!fcf[i])
			continue;
		(*rows)++;
		if (!fsf[i / 3] && !*orphan)
			*orphan = kcf[i];
	}
	return 0;
}

static int tatp_verify(const struct wl *wl, struct remora_worker *w, const int64_t *acc,
		       char *msg, size_t msglen)
{
	const struct tatp *t = wl->priv;
	int64_t rows = 0, expect = (int64_t)t->cf_loaded + acc[0];
	uint64_t orphan = 0;
	int rc = 0;

	for (uint64_t s = 1; s <= t->subscribers && !rc; s += VBATCH) {
		uint64_t left = t->subscribers - s + 1;

		rc = verify_batch(w, s, left < VBATCH ? (unsigned)left : VBATCH, &rows, &orphan);
	}
	if (rc == -ETIMEDOUT) {
		snprintf(msg, msglen, "a call_forwarding row stays locked after the run (a leaked "
			 "lock)");
		return 1;
	}
	if (rc) {
		snprintf(msg, msglen, "reading call_forwarding back failed: %s",
			 remora_strerror(rc));
		return rc;
	}
	if (orphan) {
		snprintf(msg, msglen, "call_forwarding row of subscriber %" PRIu64 " sf_type %u "
			 "start_time %u has no special_facility row", tatp_key_s_id(orphan),
			 (unsigned)(tatp_key_local(orphan) >> 8) & 0xff,
			 (unsigned)tatp_key_local(orphan) & 0xff);
		return 1;
	}
	if (wl->acc_partial) {
		snprintf(msg, msglen,
			 "every call_forwarding row has its facility, none locked; the "
			 "row count not checked: a compute node died, and its inserts and deletes "
			 "with it (%" PRId64 " rows)",
			 rows);
		return 0;
	}
	if (rows != expect) {
		snprintf(msg, msglen, "call_forwarding holds %" PRId64 " rows, expected %" PRId64
			 " (loaded %" PRIu64 " + committed inserts - deletes %" PRId64 ")", rows,
			 expect, t->cf_loaded, acc[0]);
		return 1;
	}
	snprintf(msg, msglen, "call_forwarding rows conserved: %" PRId64 " (loaded %" PRIu64
		 " + committed inserts - deletes %" PRId64 "), every row has its facility", rows,
		 t->cf_loaded, acc[0]);
	return 0;
}

const struct wl_desc wl_tatp = {
	.name = "tatp",
	.summary = "TATP: 4 tables, 7 transactions 35/10/35/2/14/2/2, 80% read-only",
	.source = "TATP benchmark description 1.0; FORD (FAST'22) and Motor (OSDI'24) TATP",
	.knobs = tatp_knobs,
	.ntypes = TATP__TYPES,
	.type_names = { "GetSubscriberData", "GetNewDestination", "GetAccessData",
			"UpdateSubscriberData", "UpdateLocation", "InsertCallForwarding",
			"DeleteCallForwarding" },
	.acc_names = { "cf_inserted_minus_deleted" },
	.init = tatp_init,
	.fini = tatp_fini,
	.tables = tatp_tables,
	.load_count = tatp_load_count,
	.load = tatp_load,
	.coord_init = tatp_coord_init,
	.coord_fini = tatp_coord_fini,
	.gen = tatp_gen,
	.tx_flags = tatp_tx_flags,
	.home_key = tatp_home_key,
	.exec = tatp_exec,
	.commit = tatp_commit,
	.verify = tatp_verify,
};
