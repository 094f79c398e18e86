/* SPDX-License-Identifier: MIT */
/*
 * OOCC's lease manager over several compute nodes (paper section VII-A: one manager sets the
 * lease word of every compute machine). Every node keeps its own word, read by its
 * transactions with no verb; compute node 0 runs the policy and changes the words by
 * messages: it gathers every node's read-only statistics, and a change is Prepare on every
 * node (rv = min, ww = max of old and new), a wait of the largest old ww, then Commit on every
 * node. Property 2 (a reader's rv never exceeds a concurrent writer's ww) holds across nodes
 * at every step: while Prepares spread, each word is the old pair or one stricter than it;
 * while Commits spread, each is the prepared pair or the new one, and the prepared pair is
 * stricter than the new one. docs/oocc.md, "The lease manager across compute nodes".
 */
#include <errno.h>
#include <string.h>

#include "oocc.h"

#define MSG_TIMEOUT_MS 50 /* a node that does not answer within it skips the tick */

struct lease_msg {
	uint32_t rv, ww;
};

/* ---- handlers (every compute node) -------------------------------------------------------- */

/* The pair of a Prepare or Commit from the manager, checked: only compute node 0 sends them. */
static int lease_msg_of(const struct remora_rpc_req *req, struct lease_msg *m)
{
	if (req->from.cn != 0)
		return -EPERM;
	if (req->len != sizeof(*m))
		return -EINVAL;
	memcpy(m, req->data, sizeof(*m));
	return m->rv <= m->ww ? 0 : -EINVAL;
}

static int stats_handler(void *arg, const struct remora_rpc_req *req, void *rep, uint32_t cap,
			 uint32_t *rep_len)
{
	struct oocc_db *d = ((struct remora_db *)arg)->proto_priv;
	struct oocc_stats s;

	*rep_len = 0;
	if (req->len != 0 || cap < sizeof(s))
		return -EINVAL;
	oocc_stats_snapshot(&d->stats, &s);
	memcpy(rep, &s, sizeof(s));
	*rep_len = sizeof(s);
	return 0;
}

static int prepare_handler(void *arg, const struct remora_rpc_req *req, void *rep, uint32_t cap,
			   uint32_t *rep_len)
{
	struct oocc_db *d = ((struct remora_db *)arg)->proto_priv;
	struct lease_msg m;
	uint64_t old;
	int rc = lease_msg_of(req, &m);

	*rep_len = 0;
	if (rc)
		return rc;
	if (cap < sizeof(old))
		return -EINVAL;
	old = oocc_lease_prepare(d, m.rv, m.ww);
	memcpy(rep, &old, sizeof(old));
	*rep_len = sizeof(old);
	return 0;
}

static int commit_handler(void *arg, const struct remora_rpc_req *req, void *rep, uint32_t cap,
			  uint32_t *rep_len)
{
	struct oocc_db *d = ((struct remora_db *)arg)->proto_priv;
	struct lease_msg m;
	int rc = lease_msg_of(req, &m);

	(void)rep, (void)cap;
	*rep_len = 0;
	if (!rc)
		oocc_lease_commit(d, m.rv, m.ww);
	return rc;
}

int oocc_rpc_init(struct remora_db *db, struct remora_rpc *rpc)
{
	int rc = remora_rpc_register(rpc, OOCC_OP_STATS, stats_handler, db);

	if (!rc)
		rc = remora_rpc_register(rpc, OOCC_OP_PREPARE, prepare_handler, db);
	return rc ? rc : remora_rpc_register(rpc, OOCC_OP_COMMIT, commit_handler, db);
}

/* ---- the manager (compute node 0) --------------------------------------------------------- */

/* One request to worker 0 of node cn (every node has one) whose reply must be rep_len bytes. */
static int call_node(struct remora_rpc_ep *ep, uint16_t cn, uint16_t op, const void *req,
		     uint32_t req_len, void *rep, uint32_t rep_len)
{
	struct remora_rpc_call c = { .op = op, .req = req, .req_len = req_len, .rep = rep,
				     .rep_cap = rep_len };
	int rc = remora_rpc_call(ep, cn, 0, &c, 1, MSG_TIMEOUT_MS);

	if (!rc)
		rc = c.status;
	if (!rc && c.rep_len != rep_len)
		rc = -REMORA_EPROTO;
	return rc;
}

static void stats_add(struct oocc_stats *sum, const struct oocc_stats *s)
{
	sum->ro += s->ro;
	sum->ro_omit += s->ro_omit;
	for (unsigned b = 0; b < OOCC_HIST; b++)
		sum->hist[b] += s->hist[b];
}

/* The sum of every node's statistics; every node must answer (else the sum would shrink). */
static int gather(struct remora_db *db, struct remora_rpc_ep *ep, struct oocc_stats *sum)
{
	struct oocc_db *d = db->proto_priv;

	oocc_stats_snapshot(&d->stats, sum);
	for (uint16_t cn = 1; cn < d->ncn; cn++) {
		struct oocc_stats s;
		int rc = call_node(ep, cn, OOCC_OP_STATS, NULL, 0, &s, sizeof(s));

		if (rc)
			return rc;
		stats_add(sum, &s);
	}
	return 0;
}

/* The peers a change goes to: every other node (none under oocc_manager_local). */
static uint16_t peers_end(const struct remora_db *db)
{
	const struct oocc_db *d = db->proto_priv;

	return mut_on(db->mutations, MUT_OOCC_MANAGER_LOCAL) ? 1 : d->ncn;
}

static int change(struct remora_db *db, struct remora_rpc_ep *ep, uint64_t lease_ns)
{
	struct oocc_db *d = db->proto_priv;
	struct lease_msg m;
	uint32_t old_ww;
	int rc;

	oocc_lease_derive(lease_ns, d->delta_ppm, &m.rv, &m.ww);
	old_ww = (uint32_t)oocc_lease_prepare(d, m.rv, m.ww);
	for (uint16_t cn = 1; cn < peers_end(db); cn++) {
		uint64_t old;

		rc = call_node(ep, cn, OOCC_OP_PREPARE, &m, sizeof(m), &old, sizeof(old));
		if (rc)
			return rc; /* no Commit anywhere: the prepared words stay, stricter than both */
		if ((uint32_t)old > old_ww)
			old_ww = (uint32_t)old;
	}
	/* every node now holds a prepared word: leases taken under an old one run out */
	oocc_lease_wait_out(old_ww);
	oocc_lease_commit(d, m.rv, m.ww);
	d->lease_ns = lease_ns;
	for (uint16_t cn = 1; cn < peers_end(db); cn++) {
		rc = call_node(ep, cn, OOCC_OP_COMMIT, &m, sizeof(m), NULL, 0);
		if (rc)
			return rc; /* that node keeps its prepared word: stricter than the new pair */
	}
	return 0;
}

int oocc_cluster_tick(struct remora_db *db, struct remora_rpc_ep *ep)
{
	struct oocc_db *d = db->proto_priv;
	struct oocc_stats sum;
	uint64_t lease;
	int rc;

	if (!ep)
		return -EINVAL;
	rc = gather(db, ep, &sum);
	if (rc)
		return rc; /* d->seen unchanged: the next tick judges the whole interval */
	lease = oocc_lease_policy(d, &sum);
	return lease == d->lease_ns ? 0 : change(db, ep, lease);
}
