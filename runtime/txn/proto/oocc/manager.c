/* SPDX-License-Identifier: MIT */
/*
 * OOCC's lease manager over several compute nodes (paper section VII-A: one manager sets the
 * lease word of every compute machine). Every node keeps its own word, read by its
 * transactions with no verb; compute node 0 runs the policy and changes the words by
 * messages. A tick gathers every node's read-only statistics and word; a round is Prepare on
 * every node (rv = min, ww = max over every node's word and the new pair), a wait of the
 * largest old ww, then Commit of the new pair on every node. Property 2 (a reader's rv never
 * exceeds a concurrent writer's ww) holds across nodes at every step: while Prepares spread,
 * each word is its old pair or one stricter than every old pair; while Commits spread, each is
 * the prepared pair or the new one, and the prepared pair is stricter than the new one.
 *
 * A db opens unsynced: its readers trust rv 0 and its writers wait for a round to reach it
 * (oocc.c, sync_wait), since its own configuration says nothing of the lease the others use
 * (a node opened again after the lease moved, or opened with another lease=). A tick runs a
 * round whenever the lease changes, some node is unsynced, or some word differs from the
 * committed pair (a round that failed half way).
 *
 * Node 0's rounds run on whichever of its workers passes the tick time, and messages from
 * different workers have no order between them: a Commit that timed out may be handled after
 * a later round's messages. Every Prepare and Commit carries its round's number, and a node
 * drops one older than the last it took. docs/oocc.md, "The lease manager across compute
 * nodes".
 */
#include <errno.h>
#include <string.h>
#include <time.h>

#include "oocc.h"

/*
 * A node that does not answer within it skips the tick. At 50 ms, one CI run on a loaded host
 * completed no round in 2 s (not reproduced; a peer descheduled longer than the timeout at
 * every tick is the suspect), so the bound is generous: a failed call parks one coordinator
 * of node 0, not the node.
 */
#define MSG_TIMEOUT_MS 500

/*
 * A Prepare or Commit. seq grows with every round (the realtime clock at its start, and past
 * the last one): a node drops a message older than one it already took, since the rounds of
 * node 0 may run on different workers, whose messages to a node's worker 0 have no order
 * between them (a Commit that timed out may be handled after a later round's).
 */
struct lease_msg {
	uint64_t seq;
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

/* Takes a message of round seq unless a later round's came first (-ESTALE: dropped). */
static int take_seq(struct oocc_db *d, uint64_t seq)
{
	if (seq < d->msg_seq)
		return -ESTALE;
	d->msg_seq = seq; /* handlers run on worker 0 only: one thread */
	return 0;
}

static int stats_handler(void *arg, const struct remora_rpc_req *req, void *rep, uint32_t cap,
			 uint32_t *rep_len)
{
	struct oocc_db *d = ((struct remora_db *)arg)->proto_priv;
	struct oocc_report r;

	*rep_len = 0;
	if (req->len != 0 || cap < sizeof(r))
		return -EINVAL;
	oocc_stats_snapshot(&d->stats, &r.s);
	r.word = __atomic_load_n(&d->lease_word, __ATOMIC_ACQUIRE);
	r.synced = __atomic_load_n(&d->synced, __ATOMIC_ACQUIRE);
	memcpy(rep, &r, sizeof(r));
	*rep_len = sizeof(r);
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
	if (!rc && cap < sizeof(old))
		rc = -EINVAL;
	if (!rc)
		rc = take_seq(d, m.seq);
	if (rc)
		return rc;
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
		rc = take_seq(d, m.seq);
	if (rc)
		return rc;
	oocc_lease_commit(d, m.rv, m.ww);
	return 0;
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

/* What a tick learnt from every node: the statistics' sum and how the words stand. */
struct survey {
	struct oocc_stats sum;
	uint32_t min_rv, max_ww; /* over every node's word */
	bool round;              /* a node is unsynced, or words differ: a round is due */
};

static void survey_add(struct survey *v, const struct oocc_report *r, uint64_t word0)
{
	uint32_t rv = (uint32_t)(r->word >> 32), ww = (uint32_t)r->word;

	stats_add(&v->sum, &r->s);
	v->min_rv = rv < v->min_rv ? rv : v->min_rv;
	v->max_ww = ww > v->max_ww ? ww : v->max_ww;
	v->round |= !r->synced || r->word != word0;
}

/* Every node's statistics and word; every node must answer (else the sum would shrink). */
static int gather(struct remora_db *db, struct remora_rpc_ep *ep, struct survey *v)
{
	struct oocc_db *d = db->proto_priv;
	struct oocc_report own;

	oocc_stats_snapshot(&d->stats, &own.s);
	own.word = __atomic_load_n(&d->lease_word, __ATOMIC_ACQUIRE);
	own.synced = __atomic_load_n(&d->synced, __ATOMIC_ACQUIRE);
	memset(v, 0, sizeof(*v));
	v->min_rv = UINT32_MAX;
	survey_add(v, &own, own.word);
	for (uint16_t cn = 1; cn < d->ncn; cn++) {
		struct oocc_report r;
		int rc = call_node(ep, cn, OOCC_OP_STATS, NULL, 0, &r, sizeof(r));

		if (rc)
			return rc;
		survey_add(v, &r, own.word);
	}
	return 0;
}

/* The peers a round goes to: every other node (none under oocc_manager_local). */
static uint16_t peers_end(const struct remora_db *db)
{
	const struct oocc_db *d = db->proto_priv;

	return mut_on(db->mutations, MUT_OOCC_MANAGER_LOCAL) ? 1 : d->ncn;
}

/* Prepare p everywhere; *old_ww: the largest ww a node had. No Commit may follow a failure. */
static int prepare_all(struct remora_db *db, struct remora_rpc_ep *ep, const struct lease_msg *p,
		       uint32_t *old_ww)
{
	*old_ww = (uint32_t)oocc_lease_prepare(db->proto_priv, p->rv, p->ww);
	for (uint16_t cn = 1; cn < peers_end(db); cn++) {
		uint64_t old;
		int rc = call_node(ep, cn, OOCC_OP_PREPARE, p, sizeof(*p), &old, sizeof(old));

		if (rc)
			return rc; /* the prepared words stay: stricter than every old and the new */
		if ((uint32_t)old > *old_ww)
			*old_ww = (uint32_t)old;
	}
	return 0;
}

/* Commit n everywhere, past a node that fails (it keeps its prepared word); the first error. */
static int commit_all(struct remora_db *db, struct remora_rpc_ep *ep, const struct lease_msg *n)
{
	struct oocc_db *d = db->proto_priv;
	int first = 0;

	oocc_lease_commit(d, n->rv, n->ww);
	for (uint16_t cn = 1; cn < peers_end(db); cn++) {
		int rc = call_node(ep, cn, OOCC_OP_COMMIT, n, sizeof(*n), NULL, 0);

		first = first ? first : rc;
	}
	return first;
}

/* The next round's number: the realtime clock, past the last one (a restarted node 0 too). */
static uint64_t next_seq(struct oocc_db *d)
{
	struct timespec ts;
	uint64_t t;

	clock_gettime(CLOCK_REALTIME, &ts);
	t = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
	d->msg_seq = t > d->msg_seq ? t : d->msg_seq + 1;
	return d->msg_seq;
}

/* One round to base lease L: Prepare, the wait of the largest old ww, Commit. */
static int round_to(struct remora_db *db, struct remora_rpc_ep *ep, const struct survey *v,
		    uint64_t lease_ns)
{
	struct oocc_db *d = db->proto_priv;
	struct lease_msg n, p;
	uint32_t old_ww;
	int rc;

	oocc_lease_derive(lease_ns, d->delta_ppm, &n.rv, &n.ww);
	n.seq = p.seq = next_seq(d);
	p.rv = n.rv < v->min_rv ? n.rv : v->min_rv;
	p.ww = n.ww > v->max_ww ? n.ww : v->max_ww;
	rc = prepare_all(db, ep, &p, &old_ww);
	if (rc)
		return rc;
	/* every node now holds a prepared word: leases taken under an old one run out */
	oocc_lease_wait_out(old_ww);
	d->lease_ns = lease_ns;
	return commit_all(db, ep, &n);
}

int oocc_cluster_tick(struct remora_db *db, struct remora_rpc_ep *ep)
{
	struct oocc_db *d = db->proto_priv;
	struct survey v;
	uint64_t lease;
	int rc;

	if (!ep)
		return -EINVAL;
	rc = gather(db, ep, &v);
	if (rc)
		return rc; /* d->seen unchanged: the next tick judges the whole interval */
	lease = oocc_lease_policy(d, &v.sum);
	if (lease == d->lease_ns && !v.round)
		return 0;
	return round_to(db, ep, &v, lease);
}
