// SPDX-License-Identifier: MIT
/*
 * The object store of DecLock's evaluation (Fig. 17 left), as transactions: a get reads one
 * object under its lock (S), a set overwrites one object under its lock (X). Two traces after
 * the paper's Twitter cache traces:
 *
 *   a  objects of 414 B on average (416 here), 65% gets: bound by memory-node IOPS
 *   b  objects of 9213 B on average (9216 here), 89% gets: bound by bandwidth
 *
 * Popularity is Zipf (theta 0.99 by default, the artifact's). Every object has one size, the
 * trace's average (a table has one value size). A set is a read for update and a write (the
 * transaction API fetches a record before it writes it), where the paper's set is a blind
 * WRITE under the lock. Every value carries its key and its writer at the start and the
 * writer again at the end: a get that sees another key, or two writers, counts an integrity
 * error, and --check fails on any.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "workload.h"

#define OS_TABLE 0

enum os_type { OS_GET, OS_SET, OS__TYPES };

struct objstore {
	uint64_t objects;
	uint32_t value_size;
	unsigned get_pct;
	struct wl_keydist dist;
};

struct os_coord {
	uint8_t *buf;
	bool found;
};

struct os_hdr {
	uint64_t key;
	uint64_t writer;
};

static const struct wl_knob os_knobs[] = {
	{ "trace", "a", "a: 416 B objects, 65% gets | b: 9216 B objects, 89% gets" },
	{ "objects", "100000", "objects loaded before the run" },
	{ "get-pct", "", "percentage of gets; empty: the trace's" },
	{ "dist", "zipf", "object popularity: uniform | zipf" },
	{ "theta", "0.99", "Zipf skew" },
	{ NULL, NULL, NULL },
};

static int os_init(struct wl *wl)
{
	static const char *const traces[] = { "a", "b", NULL };
	static const uint32_t sizes[] = { 416, 9216 };
	static const unsigned gets[] = { 65, 89 };
	struct objstore *o = calloc(1, sizeof(*o));
	const char *g;
	unsigned t = 0;
	uint64_t v;
	int rc;

	if (!o)
		return wl_fail(wl, "out of memory");
	wl->priv = o;
	rc = wl_knob_choice(wl, "trace", traces, &t);
	if (!rc)
		rc = wl_knob_u64(wl, "objects", 1, UINT64_C(1) << 40, &o->objects);
	if (rc)
		return rc;
	o->value_size = sizes[t];
	o->get_pct = gets[t];
	g = wl_knob_str(wl, "get-pct");
	if (g && *g) {
		rc = wl_knob_u64(wl, "get-pct", 0, 100, &v);
		if (rc)
			return rc;
		o->get_pct = (unsigned)v;
	}
	return wl_keydist_setup(wl, &o->dist, o->objects, "dist", "theta", true);
}

static void os_fini(struct wl *wl)
{
	free(wl->priv);
}

static unsigned os_tables(const struct wl *wl, struct remora_table_def *defs)
{
	const struct objstore *o = wl->priv;

	memset(defs, 0, sizeof(*defs));
	snprintf(defs[0].name, sizeof(defs[0].name), "objects");
	defs[0].id = OS_TABLE;
	defs[0].value_size = o->value_size;
	defs[0].max_records = o->objects;
	return 1;
}

static uint64_t os_load_count(const struct wl *wl)
{
	return ((const struct objstore *)wl->priv)->objects;
}

/* key and writer at the start, the writer again in the last 8 bytes. */
static void fill_value(uint8_t *buf, uint32_t size, uint64_t key, uint64_t writer)
{
	struct os_hdr h = { .key = key, .writer = writer };

	memcpy(buf, &h, sizeof(h));
	memset(buf + sizeof(h), (int)('a' + (key + writer) % 26), size - sizeof(h) - 8);
	memcpy(buf + size - 8, &writer, 8);
}

static bool value_ok(const uint8_t *buf, uint32_t size, uint64_t key)
{
	struct os_hdr h;
	uint64_t tail;

	memcpy(&h, buf, sizeof(h));
	memcpy(&tail, buf + size - 8, 8);
	return h.key == key && h.writer == tail;
}

static int os_load(const struct wl *wl, struct remora_worker *w, uint64_t begin, uint64_t end)
{
	const struct objstore *o = wl->priv;
	uint8_t *buf = malloc(o->value_size);
	int rc = 0;

	if (!buf)
		return -ENOMEM;
	for (uint64_t key = begin; key < end && !rc; key++) {
		fill_value(buf, o->value_size, key, 0);
		rc = remora_db_load(w, OS_TABLE, key, buf);
	}
	free(buf);
	return rc;
}

static int os_coord_init(const struct wl *wl, struct wl_coord *c)
{
	const struct objstore *o = wl->priv;
	struct os_coord *oc = calloc(1, sizeof(*oc));

	if (!oc)
		return -ENOMEM;
	oc->buf = malloc(o->value_size);
	if (!oc->buf) {
		free(oc);
		return -ENOMEM;
	}
	c->priv = oc;
	return 0;
}

static void os_coord_fini(const struct wl *wl, struct wl_coord *c)
{
	struct os_coord *oc = c->priv;

	(void)wl;
	if (!oc)
		return;
	free(oc->buf);
	free(oc);
}

static void os_gen(const struct wl *wl, struct wl_coord *c, struct wl_input *in)
{
	const struct objstore *o = wl->priv;

	memset(in, 0, sizeof(*in));
	in->type = wl_rng_below(&c->rng, 100) < o->get_pct ? OS_GET : OS_SET;
	in->key[0] = wl_keydist_next(&o->dist, &c->rng);
	in->nkeys = 1;
}

static unsigned os_tx_flags(const struct wl *wl, const struct wl_input *in)
{
	(void)wl;
	return in->type == OS_GET ? REMORA_TX_READ_ONLY : 0;
}

static int os_exec(const struct wl *wl, struct wl_coord *c, struct remora_tx *tx,
		   const struct wl_input *in, struct wl_result *res)
{
	const struct objstore *o = wl->priv;
	struct os_coord *oc = c->priv;
	uint64_t key = in->key[0];
	int rc;

	rc = remora_tx_stage(tx, OS_TABLE, key, in->type == OS_SET ? REMORA_RW : REMORA_RD,
			     oc->buf, &oc->found);
	if (!rc)
		rc = remora_tx_fetch(tx);
	if (rc)
		return rc;
	if (!oc->found) {
		res->integrity_errors++; /* every object is loaded and never deleted */
		return 0;
	}
	if (!value_ok(oc->buf, o->value_size, key))
		res->integrity_errors++;
	if (in->type == OS_GET)
		return 0;
	fill_value(oc->buf, o->value_size, key, wl_txid(c));
	return remora_tx_write(tx, OS_TABLE, key, oc->buf);
}

static void os_commit(const struct wl *wl, struct wl_coord *c, const struct wl_input *in,
		      const struct wl_result *res, uint64_t txid)
{
	(void)wl, (void)in, (void)txid;
	c->acc[0] += res->integrity_errors;
}

static int os_verify(const struct wl *wl, struct remora_worker *w, const int64_t *acc,
		     char *msg, size_t msglen)
{
	(void)wl, (void)w;
	if (acc[0]) {
		snprintf(msg, msglen, "%" PRId64 " committed gets or sets saw a missing, misplaced "
			 "or mixed object", acc[0]);
		return 1;
	}
	snprintf(msg, msglen, "every committed get and set saw a whole object of its key");
	return 0;
}

const struct wl_desc wl_objstore = {
	.name = "objstore",
	.summary = "DecLock's object store: gets and sets of one object (Twitter-like traces a, b)",
	.source = "DecLock (2025) Fig. 17 left, after Twitter's cache traces",
	.knobs = os_knobs,
	.ntypes = OS__TYPES,
	.type_names = { "Get", "Set" },
	.acc_names = { "integrity_errors" },
	.init = os_init,
	.fini = os_fini,
	.tables = os_tables,
	.load_count = os_load_count,
	.load = os_load,
	.coord_init = os_coord_init,
	.coord_fini = os_coord_fini,
	.gen = os_gen,
	.tx_flags = os_tx_flags,
	.exec = os_exec,
	.commit = os_commit,
	.verify = os_verify,
};
