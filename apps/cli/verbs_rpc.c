/* SPDX-License-Identifier: MIT */
/*
 * `remora verbs --op rpc`: the compute-node RPC round trip (runtime/rpc) beside a one-sided
 * READ round trip, on a private cluster of two compute nodes in this process: compute node 0
 * calls (and READs its own pool), compute node 1 answers from a thread of its own with a
 * transport of its own. Both use the same backend and cost profile. docs/rpc.md has numbers.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <remora/rpc.h>

#include "benchutil.h"
#include "transport/cost.h"
#include "verbs_rpc.h"

#define RPC_BATCH 16u

struct rpc_server {
	struct remora_transport *tp;
	struct remora_chan *ch;
	struct remora_rpc *rpc;
	struct remora_rpc_ep *ep;
	int stop;
	int raw; /* echo bare messages instead of serving RPC (the transport's floor) */
	int raw_seen; /* the mode the server runs in, acknowledged */
};

static int h_echo(void *arg, const struct remora_rpc_req *req, void *rep, uint32_t cap,
		  uint32_t *rep_len)
{
	(void)arg;
	if (req->len > cap)
		return -ENOSPC;
	memcpy(rep, req->data, req->len);
	*rep_len = req->len;
	return 0;
}

static void *server_main(void *p)
{
	struct rpc_server *s = p;

	uint8_t buf[64];

	while (!__atomic_load_n(&s->stop, __ATOMIC_ACQUIRE)) {
		uint16_t src;
		int n;

		int raw = __atomic_load_n(&s->raw, __ATOMIC_ACQUIRE);

		__atomic_store_n(&s->raw_seen, raw, __ATOMIC_RELEASE);
		if (!raw) {
			remora_rpc_poll(s->ep);
			continue;
		}
		n = remora_msg_recv(s->ch, &src, buf, sizeof(buf));
		if (n >= 0)
			while (remora_msg_send(s->ch, src, buf, (uint32_t)n) == -EAGAIN)
				;
	}
	return NULL;
}

/* One compute node of the private cluster: transport, channel, RPC layer, endpoint 0. */
static int node_open(const struct verbs_rpc_opts *o, const char *cluster, int cn,
		     struct rpc_server *n)
{
	struct remora_transport_cfg cfg = { .size = sizeof(cfg), .backend = o->backend,
					    .profile = o->profile, .cluster = cluster,
					    .self_cn = cn, .numa_node = -1 };
	struct remora_rpc_cfg rcfg = { .size = sizeof(rcfg), .workers = 1 };
	int rc = remora_transport_open(&cfg, &n->tp);

	if (rc) {
		n->tp = NULL;
		fprintf(stderr, "remora verbs: %s\n", remora_last_error());
		return rc;
	}
	rc = remora_chan_open(n->tp, &n->ch);
	if (!rc)
		rc = remora_rpc_create(n->tp, &rcfg, &n->rpc);
	if (!rc)
		rc = remora_rpc_register(n->rpc, 0, h_echo, NULL);
	if (!rc)
		rc = remora_rpc_ep_open(n->rpc, 0, n->ch, NULL, &n->ep);
	if (rc)
		fprintf(stderr, "remora verbs: rpc on compute node %d: %s %s\n", cn,
			remora_strerror(rc), remora_rpc_errmsg(NULL));
	return rc;
}

static void node_close(struct rpc_server *n)
{
	remora_rpc_ep_close(n->ep);
	remora_rpc_destroy(n->rpc);
	if (n->ch)
		remora_chan_close(n->ch);
	if (n->tp)
		remora_transport_close(n->tp);
}

struct lat {
	struct bu_hist *h;
	uint64_t n, ns;
};

static void lat_print(const char *what, const struct lat *l, uint64_t per)
{
	double s = (double)l->ns / 1e9;

	printf("%-22s %10.0f %10.0f %12.0f %12" PRIu64 "\n", what,
	       (double)bu_hist_quantile(l->h, 0.50), (double)bu_hist_quantile(l->h, 0.99),
	       s > 0 ? (double)(l->n * per) / s : 0.0, l->n);
}

int verbs_rpc(const struct verbs_rpc_opts *o)
{
	struct rpc_server cli = { 0 }, srv = { 0 };
	struct remora_pool *pool = NULL;
	struct remora_pool_spec spec = { .size = sizeof(spec), .node = 0, .bytes = 1u << 20,
					 .flags = REMORA_POOL_CREATE | REMORA_POOL_EXCL |
						  REMORA_POOL_UNLINK_ON_CLOSE };
	struct remora_node_desc desc;
	struct remora_transport_cfg ccfg;
	const struct rt_cost_profile *prof;
	struct lat rd = { bu_hist_new(), 0, 0 }, msg = { bu_hist_new(), 0, 0 },
		   one = { bu_hist_new(), 0, 0 }, bat = { bu_hist_new(), 0, 0 };
	char cluster[64];
	pthread_t tid;
	bool running = false;
	uint32_t key;
	int rc;

	if (!rd.h || !msg.h || !one.h || !bat.h) {
		rc = -ENOMEM;
		goto out;
	}
	snprintf(cluster, sizeof(cluster), "vrpc-%ld-%08llx", (long)getpid(),
		 (unsigned long long)(bu_now_ns() & 0xffffffffu));
	rc = node_open(o, cluster, 0, &cli);
	if (!rc)
		rc = node_open(o, cluster, 1, &srv);
	if (rc)
		goto out;
	rc = remora_pool_open(cli.tp, &spec, &pool);
	if (!rc)
		rc = remora_pool_reg(pool, 0, spec.bytes, &key);
	if (!rc)
		rc = remora_pool_describe(pool, &desc);
	if (!rc)
		rc = remora_transport_attach(cli.tp, &desc);
	if (rc) {
		fprintf(stderr, "remora verbs: pool: %s\n", remora_transport_errmsg(cli.tp));
		goto out;
	}
	if (pthread_create(&tid, NULL, server_main, &srv)) {
		rc = -EAGAIN;
		goto out;
	}
	running = true;
	prof = rt_cost_profile_find(remora_transport_profile(cli.tp));
	printf("remora verbs --op rpc: backend %s, profile %s (model round trip %" PRIu64 " ns), %g s per "
	       "row\n", remora_transport_backend(cli.tp), remora_transport_profile(cli.tp),
	       prof ? (uint64_t)prof->rtt_ns : 0, o->duration);
	printf("%-22s %10s %10s %12s %12s\n", "round trip", "p50 ns", "p99 ns", "per second", "count");
	for (unsigned row = 0; row < 4 && !rc; row++) {
		struct lat *l = row == 0 ? &rd : row == 1 ? &msg : row == 2 ? &one : &bat;
		uint64_t t0 = bu_now_ns(), end = t0 + (uint64_t)(o->duration * 1e9);
		uint64_t warm = t0 + (uint64_t)(o->warmup * 1e9), v = 0;
		uint64_t req[RPC_BATCH], rep[RPC_BATCH], start = 0;
		struct remora_rpc_call k[RPC_BATCH];
		unsigned n = row == 3 ? RPC_BATCH : 1;

		__atomic_store_n(&srv.raw, row == 1, __ATOMIC_RELEASE);
		while (__atomic_load_n(&srv.raw_seen, __ATOMIC_ACQUIRE) != (row == 1))
			;

		end += warm - t0;
		for (unsigned i = 0; i < RPC_BATCH; i++)
			k[i] = (struct remora_rpc_call){ .op = 0, .req = &req[i], .req_len = 8,
							 .rep = &rep[i], .rep_cap = 8 };
		for (uint64_t now = t0; now < end;) {
			uint64_t a = bu_now_ns(), b;

			if (row == 0) {
				rc = remora_read(cli.ch, (v++ * 64) % spec.bytes, key, &rep[0], 8);
			} else if (row == 1) {
				uint16_t src;

				req[0] = v++;
				while ((rc = remora_msg_send(cli.ch, 1, req, 8)) == -EAGAIN)
					;
				while (!rc && (rc = remora_msg_recv(cli.ch, &src, rep, 8)) == -EAGAIN)
					rc = 0;
				if (rc == 8)
					rc = rep[0] == req[0] ? 0 : -REMORA_EPROTO;
			} else {
				for (unsigned i = 0; i < n; i++)
					req[i] = v++;
				rc = remora_rpc_call(cli.ep, 1, 0, k, n, 1000);
				for (unsigned i = 0; !rc && i < n; i++)
					if (k[i].status || rep[i] != req[i])
						rc = -REMORA_EPROTO;
			}
			if (rc) {
				fprintf(stderr, "remora verbs: %s: %s %s\n",
					row == 0 ? "read" : row == 1 ? "message" : "rpc",
					remora_strerror(rc), row > 1 ? remora_rpc_errmsg(cli.ep) : "");
				break;
			}
			b = now = bu_now_ns();
			if (a >= warm) {
				if (!start)
					start = a;
				bu_hist_record(l->h, b - a);
				l->n++;
				l->ns = b - start;
			}
		}
	}
	if (!rc) {
		lat_print("READ 8 B", &rd, 1);
		lat_print("message ping-pong 8 B", &msg, 2);
		lat_print("RPC 8 B (msgs/s)", &one, 2);
		lat_print("RPC batch of 16 (req/s)", &bat, RPC_BATCH);
		if (bu_hist_quantile(rd.h, 0.5))
			printf("RPC/READ p50: %.2fx", (double)bu_hist_quantile(one.h, 0.5) /
							 (double)bu_hist_quantile(rd.h, 0.5));
		if (prof && prof->rtt_ns)
			printf("; RPC p50 / model's two one-way latencies (%" PRIu64 " ns): %.2fx",
			       (uint64_t)prof->rtt_ns, (double)bu_hist_quantile(one.h, 0.5) / (double)prof->rtt_ns);
		printf("\n");
	}
out:
	if (running) {
		__atomic_store_n(&srv.stop, 1, __ATOMIC_RELEASE);
		pthread_join(tid, NULL);
	}
	if (pool)
		remora_pool_close(pool, true);
	ccfg = (struct remora_transport_cfg){ .size = sizeof(ccfg), .backend = o->backend,
					      .cluster = cluster, .self_cn = -1 };
	node_close(&srv);
	node_close(&cli);
	if (cli.tp)
		remora_transport_cleanup(&ccfg);
	free(rd.h);
	free(msg.h);
	free(one.h);
	free(bat.h);
	return rc ? 1 : 0;
}
