/* SPDX-License-Identifier: MIT */
/*
 * A small application on libremora: it defines its own table (a stock of items), runs
 * order transactions from several coroutine coordinators, and checks that no unit of stock
 * was created or lost. It needs no cluster: it creates its memory node's pool in-process on
 * the backend named by $REMORA_BACKEND (default shm) and removes it at exit.
 *
 * Build against an installed remora:
 *   cc -o inventory inventory.c $(pkg-config --cflags --libs remora)
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include <remora/remora.h>

#define ITEMS 64
#define COORDS 8
#define ORDERS_PER_COORD 2000
#define INITIAL_STOCK 1000000

struct item {
	uint64_t stock;   /* units on the shelf */
	uint64_t shipped; /* units sent out */
};

enum { T_ITEM = 0 };

struct app {
	struct remora_worker *w;
	unsigned committed, aborted;
	int failed;
};

/* Moves n units of item k from stock to shipped; retried by the caller on abort. */
static int order_once(struct remora_worker *w, uint64_t k, uint64_t n)
{
	struct remora_tx *tx;
	struct item it;
	int rc = remora_tx_begin(w, 0, &tx);

	if (rc)
		return rc;
	rc = remora_tx_read_for_update(tx, T_ITEM, k, &it);
	if (rc == 0 && it.stock >= n) {
		it.stock -= n;
		it.shipped += n;
		rc = remora_tx_write(tx, T_ITEM, k, &it);
	}
	if (rc) {
		remora_tx_abort(tx);
		return rc;
	}
	return remora_tx_commit(tx);
}

static void coordinator(void *arg)
{
	struct app *a = arg;
	unsigned seed = remora_coro_index(remora_coro_self()) + 1;

	for (unsigned i = 0; i < ORDERS_PER_COORD && !a->failed; i++) {
		uint64_t k = (uint64_t)rand_r(&seed) % ITEMS, n = 1 + (uint64_t)rand_r(&seed) % 5;
		int rc;

		while ((rc = order_once(a->w, k, n)) == -REMORA_EABORT)
			a->aborted++;
		if (rc) {
			fprintf(stderr, "inventory: order failed: %s\n", remora_strerror(rc));
			a->failed = 1;
		}
		a->committed++;
	}
}

/* Reads every item in one read-only transaction and checks stock + shipped. */
static int audit(struct remora_worker *w)
{
	uint64_t stock = 0, shipped = 0;
	struct remora_tx *tx;
	int rc = remora_tx_begin(w, REMORA_TX_READ_ONLY, &tx);

	for (uint64_t k = 0; rc == 0 && k < ITEMS; k++) {
		struct item it;

		rc = remora_tx_read(tx, T_ITEM, k, &it);
		stock += it.stock;
		shipped += it.shipped;
	}
	if (rc) {
		remora_tx_abort(tx);
		return rc;
	}
	rc = remora_tx_commit(tx);
	printf("inventory: stock %" PRIu64 " + shipped %" PRIu64 " = %" PRIu64 " (loaded %d)\n",
	       stock, shipped, stock + shipped, ITEMS * INITIAL_STOCK);
	if (rc == 0 && stock + shipped != (uint64_t)ITEMS * INITIAL_STOCK)
		return -REMORA_EPROTO;
	return rc;
}

static int run(struct remora_transport *tp)
{
	struct remora_table_def item = { .name = "item", .id = T_ITEM,
					 .value_size = sizeof(struct item), .max_records = ITEMS };
	struct remora_db_cfg cfg = { .size = sizeof(cfg), .tp = tp, .cn_id = 0, .n_mn = 1,
				     .coords_per_worker = COORDS, .workers = 1 };
	struct app a = { 0 };
	struct remora_db *db;
	int rc = remora_db_format(tp, 1, 1, NULL, &item, 1);

	if (rc == 0)
		rc = remora_db_open(&cfg, &db);
	if (rc) {
		fprintf(stderr, "inventory: %s\n", remora_db_errmsg(NULL));
		return rc;
	}
	rc = remora_worker_create(db, 0, &a.w);
	for (uint64_t k = 0; rc == 0 && k < ITEMS; k++)
		rc = remora_db_load(a.w, T_ITEM, k, &(struct item){ .stock = INITIAL_STOCK });
	if (rc == 0)
		rc = remora_db_load_flush(a.w);
	for (unsigned c = 0; rc == 0 && c < COORDS; c++)
		rc = remora_sched_spawn(remora_worker_sched(a.w), coordinator, &a);
	if (rc == 0)
		rc = remora_sched_run(remora_worker_sched(a.w));
	if (rc == 0 && a.failed)
		rc = -EIO;
	if (rc == 0) {
		printf("inventory: %s: %u orders committed, %u aborts retried\n",
		       remora_db_protocol(db), a.committed, a.aborted);
		rc = audit(a.w);
	}
	if (a.w)
		remora_worker_destroy(a.w);
	remora_db_close(db);
	return rc;
}

int main(void)
{
	char cluster[32];
	struct remora_transport_cfg tcfg = { .size = sizeof(tcfg), .cluster = cluster,
					     .self_cn = 0, .numa_node = -1 };
	struct remora_pool_spec spec = { .size = sizeof(spec), .node = 0, .bytes = 64 << 20,
					 .flags = REMORA_POOL_CREATE | REMORA_POOL_EXCL };
	struct remora_transport *tp;
	struct remora_node_desc desc;
	struct remora_pool *pool;
	uint32_t key;
	int rc;

	snprintf(cluster, sizeof(cluster), "inventory%d", (int)getpid());
	rc = remora_transport_open(&tcfg, &tp);
	if (rc) {
		fprintf(stderr, "inventory: %s\n", remora_last_error());
		return 1;
	}
	rc = remora_pool_open(tp, &spec, &pool);
	if (rc == 0) {
		rc = remora_pool_reg(pool, 0, remora_pool_bytes(pool), &key);
		if (rc == 0)
			rc = remora_pool_describe(pool, &desc);
		if (rc == 0)
			rc = remora_transport_attach(tp, &desc);
		if (rc == 0)
			rc = run(tp);
		remora_pool_close(pool, true);
	}
	if (rc)
		fprintf(stderr, "inventory: %s (%s)\n", remora_strerror(rc),
			remora_transport_errmsg(tp));
	remora_transport_cleanup(&tcfg);
	remora_transport_close(tp);
	return rc ? 1 : 0;
}
