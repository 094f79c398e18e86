/* SPDX-License-Identifier: MIT */
/*
 * Memory-node failover, the watchdog side (docs/recovery.md, "Memory-node failover"): agreement on
 * the dead memory node and its detach. A compute node whose lease watchdog finds a memory node
 * gone takes it out of its transport (every verb to it refused from then on) and ORs it into the
 * mnf_dead word of every live node's control area; every other compute node learns it from its own
 * watchdog or from that word. The transactions then stop at the failover barrier
 * (runtime/txn/failover.c) and resume on the live copies. A node declared dead stays dead for the
 * database's life.
 */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <remora/cluster.h>
#include <remora/params.h>

#include "cluster/join.h"
#include "recovery.h"
#include "store/store.h"
#include "transport/direct.h"

static double mnf_wall_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Why node cannot fail over here, or NULL. */
static const char *mnf_refusal(struct remora_cluster *cl, int node, char *buf, size_t len)
{
	const struct remora_params *p = remora_cluster_params(cl);
	const char *proto = remora_params_str(p, REMORA_P_PROTOCOL);
	int64_t replicas = remora_params_int(p, REMORA_P_REPLICAS);
	uint32_t down = rt_transport_down_mask(remora_cluster_transport(cl));

	if (cluster_fenced(cl))
		snprintf(buf, len, "this compute node was fenced: it declares no memory node dead");
	else if (strcmp(proto, "ford") != 0 && strcmp(proto, "pandora") != 0)
		snprintf(buf, len, "%s has no memory-node failover", proto);
	else if (node < 0)
		snprintf(buf, len, "no memory node named");
	else if (__builtin_popcount(down | 1u << node) >= replicas)
		snprintf(buf, len, "no memory-node failover: replicas = %lld, so some data had "
			 "its last copy there", (long long)replicas);
	else
		return NULL;
	return buf;
}

/* ORs bits into mnf_dead on every live node (CAS loops: others may OR at the same time). */
static int mnf_publish(struct remora_transport *tp, unsigned n_mn, uint32_t bits)
{
	uint64_t off = REMORA_STORE_CONTROL_OFF + offsetof(struct store_control, mnf_dead);
	uint32_t down = rt_transport_down_mask(tp);
	struct remora_chan *ch = NULL;
	int rc = remora_chan_open(tp, &ch);

	for (uint16_t m = 0; !rc && m < n_mn; m++) {
		uint64_t seen = 0, old, bytes;
		uint32_t key;

		if (down >> m & 1u)
			continue;
		rc = store_node_key(tp, m, &key, &bytes);
		do {
			struct remora_wr wr = { .raddr = remora_gaddr_make(m, off), .rkey = key,
						.op = REMORA_OP_CAS, .compare = seen,
						.swap = seen | bits, .local = &old };

			if (rc)
				break;
			rc = store_exec(ch, &wr, 1);
			if (!rc && old == seen)
				break;
			seen = old;
		} while (!rc && (seen & bits) != bits);
	}
	if (ch)
		remora_chan_close(ch);
	return rc;
}

bool recovery_mnf_lost(struct remora_cluster *cl, int node, char *why, size_t len,
			      FILE *log)
{
	struct remora_transport *tp = remora_cluster_transport(cl);
	char refusal[160];
	size_t used = strlen(why);

	if (mnf_refusal(cl, node, refusal, sizeof(refusal))) {
		if (used + 4 < len)
			snprintf(why + used, len - used, " (%s)", refusal);
		return false;
	}
	rt_transport_mn_down(tp, (uint16_t)node);
	recovery_note_event(&(struct recovery_event){ .cn = (uint16_t)node, .mn = true,
						      .here = true, .seen_s = mnf_wall_s() });
	if (mnf_publish(tp, remora_cluster_n_mn(cl), 1u << node) && log)
		fprintf(log, "remora cn %d: memory node %d: publishing its death failed; the "
			"others learn it from their own heartbeat\n", remora_cluster_cn_id(cl), node);
	if (log) {
		fprintf(log, "remora cn %d: %s: failing over to the live copies\n",
			remora_cluster_cn_id(cl), why);
		fflush(log);
	}
	return true;
}

int recovery_mnf_watch(struct remora_cluster *cl, char *why, size_t len, FILE *log)
{
	struct remora_transport *tp = remora_cluster_transport(cl);
	uint64_t off = REMORA_STORE_CONTROL_OFF + offsetof(struct store_control, mnf_dead);
	uint32_t down = rt_transport_down_mask(tp), key;
	uint64_t dead = 0, word[REMORA_MAX_MN] = { 0 }, bytes;
	struct remora_wr wrs[REMORA_MAX_MN];
	struct remora_chan *ch = NULL;
	unsigned n = 0;
	int rc = remora_chan_open(tp, &ch);

	/* ORed over every node not taken out here: one that died unseen (node 0 too) holds an
	 * older word, and the live ones got every later death */
	for (uint16_t m = 0; !rc && m < remora_cluster_n_mn(cl); m++) {
		if ((down >> m & 1u) || store_node_key(tp, m, &key, &bytes))
			continue;
		wrs[n] = (struct remora_wr){ .raddr = remora_gaddr_make(m, off), .rkey = key,
					     .op = REMORA_OP_READ, .len = 8, .local = &word[n] };
		n++;
	}
	if (rc)
		return -1;
	/* one at a time: a node that died unseen fails its READ, which drops only its word */
	for (unsigned i = 0; i < n; i++)
		if (store_exec(ch, &wrs[i], 1) == 0)
			dead |= word[i];
	remora_chan_close(ch);
	dead &= ~(uint64_t)down;
	if (rc || !dead)
		return -1;
	for (int node = 0; node < (int)remora_cluster_n_mn(cl); node++) {
		if (!(dead >> node & 1u))
			continue;
		snprintf(why, len, "memory node %d was declared dead by another compute node",
			 node);
		if (!recovery_mnf_lost(cl, node, why, len, log))
			return node;
	}
	return -1;
}
