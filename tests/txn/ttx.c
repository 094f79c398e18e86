/* SPDX-License-Identifier: MIT */
#include "ttx.h"

#include <string.h>

static struct ttx *ttx_current;

static const struct remora_table_def ttx_default_table[] = {
	{ .name = "t", .id = 0, .value_size = 8, .max_records = 1024 },
};

void ttx_open(struct ttx *t, const struct ttx_opts *o)
{
	unsigned nmn = o->nmn ? o->nmn : 1;
	unsigned workers = o->workers ? o->workers : 1;
	unsigned coords = o->coords ? o->coords : 1;
	struct remora_db_format_cfg f = {
		.size = sizeof(f), .n_mn = (uint16_t)nmn, .replicas = o->replicas,
		.protocol = o->protocol, .tables = o->tables ? o->tables : ttx_default_table,
		.ntables = o->tables ? o->ntables : 1,
		.max_cn = (uint16_t)(o->max_cn ? o->max_cn : 2),
		.coords_per_cn = (uint16_t)(workers * coords), .log_slot_bytes = 8192,
		.cells = o->cells, .ncells = o->ncells,
	};
	struct remora_db_cfg cfg = {
		.size = sizeof(cfg), .protocol = o->protocol, .cn_id = 0, .n_mn = (uint16_t)nmn,
		.replicas = o->replicas, .coords_per_worker = (uint16_t)coords, .workers = workers,
		.isolation = o->isolation,
		.failed_locks = o->failed_locks,
	};
	int rc;

	memset(t, 0, sizeof(*t));
	cr_assert_leq(workers, TTX_MAX_WORKERS);
	ttx_current = t;
	t->nmn = nmn;
	tu_open(&t->tu, 0, nmn, o->pool_bytes ? o->pool_bytes : TTX_POOL_BYTES);
	rc = remora_db_format_ex(t->tu.tp, &f);
	cr_assert_eq(rc, 0, "format: %s (%s)", remora_strerror(rc), remora_db_errmsg(NULL));
	cfg.tp = t->tu.tp;
	rc = remora_db_open(&cfg, &t->db);
	cr_assert_eq(rc, 0, "open: %s (%s)", remora_strerror(rc), remora_db_errmsg(NULL));
	for (unsigned i = 0; i < workers; i++) {
		rc = remora_worker_create(t->db, i, &t->w[i]);
		cr_assert_eq(rc, 0, "worker %u: %s", i, remora_strerror(rc));
		t->nw = i + 1;
	}
}

struct remora_worker *ttx_open_cn(struct ttx *t, const char *protocol, uint16_t cn_id,
				  struct remora_db **db)
{
	struct remora_db_cfg cfg = { .size = sizeof(cfg), .protocol = protocol, .cn_id = cn_id,
				     .n_mn = (uint16_t)t->nmn, .coords_per_worker = 1,
				     .workers = 1, .tp = t->tu.tp };
	struct remora_worker *w;
	int rc = remora_db_open(&cfg, db);

	cr_assert_eq(rc, 0, "open cn %u: %s (%s)", (unsigned)cn_id, remora_strerror(rc),
		     remora_db_errmsg(NULL));
	rc = remora_worker_create(*db, 0, &w);
	cr_assert_eq(rc, 0, "cn %u worker: %s", (unsigned)cn_id, remora_strerror(rc));
	return w;
}

void ttx_close_workers(struct ttx *t)
{
	for (unsigned i = 0; i < t->nw; i++)
		remora_worker_destroy(t->w[i]);
	t->nw = 0;
}

void ttx_close(struct ttx *t)
{
	ttx_close_workers(t);
	remora_db_close(t->db);
	t->db = NULL;
	tu_close(&t->tu);
	if (ttx_current == t)
		ttx_current = NULL;
}

void ttx_fini(void)
{
	if (ttx_current)
		ttx_close(ttx_current);
	tu_fini();
}

void ttx_put(struct ttx *t, unsigned w, uint32_t table, uint64_t key, uint64_t value)
{
	struct remora_tx *tx;
	uint64_t old;
	int rc;

	rc = remora_tx_begin(t->w[w], 0, &tx);
	cr_assert_eq(rc, 0, "put begin: %s (%s)", remora_strerror(rc), remora_worker_errmsg(t->w[w]));
	rc = remora_tx_read_for_update(tx, table, key, &old);
	if (rc == -REMORA_ENOTFOUND)
		rc = remora_tx_insert(tx, table, key, &value);
	else if (rc == 0)
		rc = remora_tx_write(tx, table, key, &value);
	cr_assert_eq(rc, 0, "put %llu: %s", (unsigned long long)key, remora_strerror(rc));
	rc = remora_tx_commit(tx);
	cr_assert_eq(rc, 0, "put %llu commit: %s", (unsigned long long)key, remora_strerror(rc));
}

int ttx_get(struct ttx *t, unsigned w, uint32_t table, uint64_t key, uint64_t *value)
{
	struct remora_tx *tx;
	uint64_t v = 0;
	int rc, rc2;

	rc = remora_tx_begin(t->w[w], REMORA_TX_READ_ONLY, &tx);
	cr_assert_eq(rc, 0, "get begin: %s (%s)", remora_strerror(rc), remora_worker_errmsg(t->w[w]));
	rc = remora_tx_read(tx, table, key, &v);
	cr_assert(rc == 0 || rc == -REMORA_ENOTFOUND, "get: %s (%s)", remora_strerror(rc),
		  remora_worker_errmsg(t->w[w]));
	rc2 = remora_tx_commit(tx);
	cr_assert_eq(rc2, 0, "get commit: %s", remora_strerror(rc2));
	if (rc == 0)
		*value = v;
	return rc;
}

struct remora_counters ttx_counters(struct ttx *t, unsigned w)
{
	struct remora_counters c;

	remora_chan_counters(remora_worker_chan(t->w[w]), &c);
	return c;
}

uint64_t ttx_verbs(const struct remora_counters *a, const struct remora_counters *b,
		   enum remora_op op)
{
	struct remora_counters d;

	remora_counters_diff(b, a, &d);
	return remora_counters_total(&d, op);
}

struct ttx_vc ttx_vc(const struct remora_counters *a, const struct remora_counters *b)
{
	struct remora_counters d;
	struct ttx_vc v;

	remora_counters_diff(b, a, &d);
	v.read = remora_counters_total(&d, REMORA_OP_READ);
	v.write = remora_counters_total(&d, REMORA_OP_WRITE);
	v.cas = remora_counters_total(&d, REMORA_OP_CAS);
	v.faa = remora_counters_total(&d, REMORA_OP_FAA);
	v.doorbells = d.doorbells;
	v.read_bytes = 0;
	for (unsigned m = 0; m < REMORA_MAX_MN; m++)
		v.read_bytes += d.bytes[m][REMORA_OP_READ];
	return v;
}
