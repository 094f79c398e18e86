/* SPDX-License-Identifier: MIT */
/*
 * Compute-node side of the control plane: connect to every memory node, fetch and attach its
 * descriptor, join (with this process's message locator), keep the lease alive from a heartbeat
 * thread, and hand the peers' message locators to the transport as the views announce them.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cluster/ctl.h"
#include "cluster/join.h"
#include "cluster/zk.h"
#include "mutate/mutate.h"
#include "transport/direct.h"

struct mn_link {
	struct rctl_client cl;
	pthread_mutex_t lock; /* one call at a time on cl; view, msg_gen */
	struct remora_node_desc desc;
	struct remora_cluster_view view;
	uint32_t msg_gen[REMORA_MAX_CN]; /* of the latest view (struct rctl_view_rep) */
	uint64_t renewed_ns; /* send time of the last acknowledged JOIN/HEARTBEAT */
	int broken;          /* the last heartbeat's failure (a failed call breaks the link) */
	bool attached;
	bool joined;
};

struct remora_cluster {
	const struct remora_params *p;
	int cn;
	unsigned n_mn, n_cn;
	uint64_t heartbeat_ns, lease_ns;
	struct remora_transport *tp;
	struct mn_link mn[REMORA_MAX_MN];
	pthread_t hb;
	bool hb_running;
	pthread_mutex_t stop_lock;
	pthread_cond_t stop_cv;
	bool stop;
	_Atomic uint64_t lease_end_ns; /* 0: no lease */
	atomic_bool fenced;
	char errmsg[256];
	struct clzk *zk;  /* membership = zookeeper (cn >= 0), else NULL */
	uint64_t zk_seen; /* ids seen holding their znode: one that vanishes unmarked is dead */
	uint8_t key[RAUTH_KEY_BYTES]; /* the cluster secret, proved to every memory node */
	char key_path[RAUTH_PATH_MAX];
	/*
	 * Message peers: false under the mutation no_msg_peers (the transport's own discovery
	 * instead). peer[c]: the locator generation handed to the transport, and from which memory
	 * node; touched by the joining thread, then by the heartbeat thread only.
	 */
	bool msg_peers;
	char msg_locator[REMORA_MSG_LOCATOR_MAX];
	struct {
		uint32_t gen;
		unsigned link;
	} peer[REMORA_MAX_CN];
};

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

void remora_cluster_transport_cfg(const struct remora_params *p, int self_cn,
				  struct remora_transport_cfg *cfg)
{
	const char *dir = remora_params_str(p, REMORA_P_DIR);

	memset(cfg, 0, sizeof(*cfg));
	cfg->size = sizeof(*cfg);
	cfg->backend = remora_params_str(p, REMORA_P_BACKEND);
	cfg->cluster = remora_params_str(p, REMORA_P_CLUSTER);
	cfg->dir = *dir ? dir : NULL;
	cfg->profile = remora_params_str(p, REMORA_P_PROFILE);
	cfg->mn_scale = (uint32_t)remora_params_int(p, REMORA_P_MN_SCALE);
	cfg->atomics = remora_params_str(p, REMORA_P_ATOMICS);
	cfg->verb_timeout_ms = (int32_t)remora_params_int(p, REMORA_P_VERB_TIMEOUT_MS);
	if (cfg->verb_timeout_ms == 0)
		cfg->verb_timeout_ms = -1; /* 0: no deadline (transport cfg 0: the parameter) */
	cfg->self_cn = self_cn;
	cfg->max_cn = remora_params_cn_count(p);
	cfg->numa_node = (int)remora_params_int(p, REMORA_P_NUMA_NODE);
	cfg->hugepages = remora_params_bool(p, REMORA_P_HUGEPAGES);
	/* Compute nodes meet through the control plane, not through files they may not share. */
	cfg->flags = REMORA_TRANSPORT_MSG_PEERS;
	cfg->backend_params = remora_params_backend(p, &cfg->n_backend_params);
}

/* One call on link l, under its lock (the heartbeat thread shares the connection). */
static int link_call(struct mn_link *l, unsigned type, void *req, size_t req_len, void *rep,
		     size_t rep_len, char *err, size_t errlen)
{
	int rc;

	pthread_mutex_lock(&l->lock);
	rc = rctl_call(&l->cl, type, req, req_len, rep, rep_len, err, errlen);
	pthread_mutex_unlock(&l->lock);
	return rc;
}

static int cn_call(struct remora_cluster *cl, unsigned mn, unsigned type, uint16_t cn,
		   struct rctl_view_rep *rep, char *err, size_t errlen)
{
	struct rctl_cn_req q = { .cn = cn, .pid = (uint32_t)getpid() };

	return link_call(&cl->mn[mn], type, &q, sizeof(q), rep, sizeof(*rep), err, errlen);
}

/* ---- message peers ---------------------------------------------------------------------- */

/*
 * The control plane's mutation switches (runtime/mutate, layer MUT_CLUSTER) are negative controls
 * for tests and the rdma guest check. "no_msg_peers": the control plane carries no message locators; compute nodes
 * find each other through the backend's own discovery, as before it did (rdma: address files in
 * dir, which compute nodes on other hosts cannot see).
 */
static int parse_mutations(bool *msg_peers, char *err, size_t errlen)
{
	uint64_t mask;
	int rc = mut_from_env(MUT_CLUSTER, &mask, err, errlen);

	*msg_peers = !mut_on(mask, MUT_NO_MSG_PEERS);
	return rc;
}

/* The first memory node (in id order) whose latest view has a locator for c; n_mn if none. */
static unsigned peer_source(struct remora_cluster *cl, unsigned c, uint32_t *gen)
{
	for (unsigned i = 0; i < cl->n_mn; i++) {
		struct mn_link *l = &cl->mn[i];

		pthread_mutex_lock(&l->lock);
		*gen = l->joined ? l->msg_gen[c] : 0;
		pthread_mutex_unlock(&l->lock);
		if (*gen)
			return i;
	}
	*gen = 0;
	return cl->n_mn;
}

/* Fetches c's locator from memory node i and hands it to the transport. */
static void fetch_peer(struct remora_cluster *cl, unsigned c, unsigned i)
{
	struct rctl_cn_req q = { .cn = (uint16_t)c, .pid = (uint32_t)getpid() };
	struct rctl_peer_rep rep;
	char err[256];
	int rc;

	rc = link_call(&cl->mn[i], RCTL_GET_PEER, &q, sizeof(q), &rep, sizeof(rep), err,
		       sizeof(err));
	if (rc)
		return; /* the lease logic deals with a failing node; retried next round */
	if (rep.cn != c || !rctl_locator_ok(rep.locator, sizeof(rep.locator)))
		rc = -REMORA_EPROTO;
	else
		rc = remora_msg_set_peer(cl->tp, (uint16_t)c, rep.gen ? rep.locator : "");
	if (rc)
		/* Not retried (it would fail the same way): sends to c then wait for nothing. */
		fprintf(stderr, "remora cn %d: memory node %u gave a bad message locator for cn %u: "
				"%s\n", cl->cn, i, c, remora_strerror(rc));
	cl->peer[c].gen = rep.gen;
	cl->peer[c].link = i;
}

/*
 * Brings the transport's message peers up to date with the latest views: a locator whose
 * generation changed is fetched (GET_PEER) and set, one that is gone everywhere (the member
 * left or died) is withdrawn. In the steady state this costs nothing but the comparison.
 */
static void sync_peers(struct remora_cluster *cl)
{
	if (!cl->msg_peers)
		return;
	for (unsigned c = 0; c < cl->n_cn; c++) {
		uint32_t gen;
		unsigned i;

		if ((int)c == cl->cn)
			continue;
		i = peer_source(cl, c, &gen);
		if (gen == cl->peer[c].gen && (!gen || i == cl->peer[c].link))
			continue;
		if (gen) {
			fetch_peer(cl, c, i);
			continue;
		}
		remora_msg_set_peer(cl->tp, (uint16_t)c, "");
		cl->peer[c].gen = 0;
	}
}

/* ---- heartbeat -------------------------------------------------------------------------- */

/*
 * One round: the heartbeat goes out to every memory node still in the transport first, then
 * the replies are read, all within one deadline of three quarters of a lease from the start
 * (at least 100 ms). Each node's lease counts from its own send time, so a slow node delays no
 * other node's renewal, and the next round reaches every node with a quarter lease to spare.
 * A reply not in by the deadline breaks its connection for good (the stream may hold half of
 * it): that node's lease lapses. Before, each reply had half a lease, one after the other.
 */
static void heartbeat_round(struct remora_cluster *cl)
{
	uint64_t oldest = UINT64_MAX, sent[REMORA_MAX_MN];
	uint64_t budget = cl->lease_ns / 4 * 3 > 100000000u ? cl->lease_ns / 4 * 3 : 100000000u;
	uint64_t deadline = now_ns() + budget;
	uint32_t down = cl->tp ? rt_transport_down_mask(cl->tp) : 0;
	const unsigned n_mn = cl->n_mn < REMORA_MAX_MN ? cl->n_mn : REMORA_MAX_MN;
	int rc[REMORA_MAX_MN];
	char err[256];

	for (unsigned i = 0; i < n_mn; i++) {
		struct mn_link *l = &cl->mn[i];
		struct rctl_cn_req q = { .cn = (uint16_t)cl->cn, .pid = (uint32_t)getpid() };

		pthread_mutex_lock(&l->lock); /* held until its reply is read */
		sent[i] = now_ns();
		/* a node that failed over is no member's concern any more */
		rc[i] = down >> i & 1u ? -REMORA_ENODE
				       : rctl_send(&l->cl, RCTL_HEARTBEAT, &q, sizeof(q), err,
						   sizeof(err));
	}
	for (unsigned i = 0; i < n_mn; i++) {
		struct mn_link *l = &cl->mn[i];
		struct rctl_view_rep rep;
		uint64_t now = now_ns();
		int wait_ms = deadline > now ? (int)((deadline - now) / 1000000u) : 0;

		memset(&rep, 0, sizeof(rep));
		if (rc[i] == 0)
			rc[i] = rctl_recv(&l->cl, RCTL_HEARTBEAT, &rep, sizeof(rep),
					  wait_ms > 0 ? wait_ms : 1, err, sizeof(err));
		if (rc[i] == 0 || rc[i] == -REMORA_EFENCED) {
			l->view = rep.view;
			memcpy(l->msg_gen, rep.msg_gen, sizeof(l->msg_gen));
		}
		if (rc[i] == 0)
			__atomic_store_n(&l->renewed_ns, sent[i], __ATOMIC_RELAXED);
		if (rc[i] != -REMORA_ENODE || !(down >> i & 1u))
			__atomic_store_n(&l->broken, rc[i], __ATOMIC_RELAXED);
		if (rc[i] == -REMORA_EFENCED)
			atomic_store(&cl->fenced, true);
		if (!(down >> i & 1u) && l->renewed_ns < oldest)
			oldest = l->renewed_ns;
		pthread_mutex_unlock(&l->lock);
	}
	if (oldest != UINT64_MAX)
		atomic_store(&cl->lease_end_ns, oldest + cl->lease_ns);
	sync_peers(cl);
}

static void *heartbeat_main(void *arg)
{
	struct remora_cluster *cl = arg;

	pthread_mutex_lock(&cl->stop_lock);
	while (!cl->stop) {
		struct timespec until;
		uint64_t t, started = now_ns(), took;

		pthread_mutex_unlock(&cl->stop_lock);
		heartbeat_round(cl);
		/*
		 * The next round is due heartbeat_ns after this one began: a round that waited
		 * up to its deadline for a stalled node must not add a whole period more before
		 * the other nodes are renewed again.
		 */
		took = now_ns() - started;
		clock_gettime(CLOCK_REALTIME, &until);
		t = (uint64_t)until.tv_nsec + (took < cl->heartbeat_ns ? cl->heartbeat_ns - took : 0);
		until.tv_sec += (time_t)(t / 1000000000u);
		until.tv_nsec = (long)(t % 1000000000u);
		pthread_mutex_lock(&cl->stop_lock);
		if (!cl->stop)
			pthread_cond_timedwait(&cl->stop_cv, &cl->stop_lock, &until);
	}
	pthread_mutex_unlock(&cl->stop_lock);
	return NULL;
}

/* ---- join and leave --------------------------------------------------------------------- */

/* HELLO and AUTH: both sides prove they hold the cluster secret before anything else. */
static int hello(struct remora_cluster *cl, unsigned i, char *err, size_t errlen)
{
	struct rctl_hello q = { .cn = cl->cn, .max_cn = cl->n_cn };
	struct rctl_hello_rep rep;
	int rc;

	snprintf(q.cluster, sizeof(q.cluster), "%s", remora_params_str(cl->p, REMORA_P_CLUSTER));
	snprintf(q.backend, sizeof(q.backend), "%s", remora_transport_backend(cl->tp));
	pthread_mutex_lock(&cl->mn[i].lock);
	rc = rctl_handshake(&cl->mn[i].cl, cl->key, cl->key_path, &q, &rep, err, errlen);
	pthread_mutex_unlock(&cl->mn[i].lock);
	if (rc)
		return rc;
	if (rep.mn != i) {
		snprintf(err, errlen, "%s answers as memory node %u, expected %u",
			 cl->mn[i].cl.peer, rep.mn, i);
		return -REMORA_ECONFIG;
	}
	return 0;
}

static int attach(struct remora_cluster *cl, unsigned i, char *err, size_t errlen)
{
	struct rctl_req q;
	struct rctl_desc_rep rep;
	int rc;

	rc = link_call(&cl->mn[i], RCTL_GET_DESC, &q, sizeof(q), &rep, sizeof(rep), err, errlen);
	if (rc)
		return rc;
	if (rep.desc.node != i || rep.desc.nregions > REMORA_MAX_REGIONS) {
		snprintf(err, errlen, "%s: descriptor names node %u with %u regions",
			 cl->mn[i].cl.peer, rep.desc.node, rep.desc.nregions);
		return -REMORA_EPROTO;
	}
	rep.desc.locator[sizeof(rep.desc.locator) - 1] = '\0';
	cl->mn[i].desc = rep.desc;
	rc = remora_transport_attach(cl->tp, &rep.desc);
	if (rc) {
		snprintf(err, errlen, "attach memory node %u: %s", i,
			 remora_transport_errmsg(cl->tp));
		return rc;
	}
	cl->mn[i].attached = true;
	return 0;
}

static int join_one(struct remora_cluster *cl, unsigned i, char *err, size_t errlen)
{
	struct rctl_join q = { .q = { .cn = (uint16_t)cl->cn, .pid = (uint32_t)getpid() } };
	struct rctl_view_rep rep;
	uint64_t sent = now_ns();
	int rc;

	memcpy(q.msg_locator, cl->msg_locator, sizeof(q.msg_locator));
	rc = link_call(&cl->mn[i], RCTL_JOIN, &q, sizeof(q), &rep, sizeof(rep), err, errlen);
	if (rc)
		return rc;
	cl->mn[i].view = rep.view;
	memcpy(cl->mn[i].msg_gen, rep.msg_gen, sizeof(cl->mn[i].msg_gen));
	__atomic_store_n(&cl->mn[i].renewed_ns, sent, __ATOMIC_RELAXED);
	cl->mn[i].joined = true;
	return 0;
}

static int connect_all(struct remora_cluster *cl, char *err, size_t errlen)
{
	int retry_ms = (int)remora_params_int(cl->p, REMORA_P_CONNECT_MS);
	/*
	 * A timeout closes the connection, and the memory node then declares this compute node
	 * dead, so a reply that is merely slow (a loaded host) must be waited for. But one
	 * heartbeat round calls the memory nodes in turn: waiting longer than half a lease on one
	 * would let the lease lapse at the next. Half a lease balances the two.
	 */
	int timeout_ms = (int)(cl->lease_ns / 2000000u);
	int rc;

	if (timeout_ms < 100)
		timeout_ms = 100;
	for (unsigned i = 0; i < cl->n_mn; i++) {
		struct remora_node_addr a;

		remora_params_mn_addr(cl->p, i, &a);
		if (a.port == 0) {
			snprintf(err, errlen,
				 "memory node %u has no control address: give --mn-addrs "
				 "host:port,... or port= in [mn.%u] of the config file",
				 i, i);
			return -REMORA_ECONFIG;
		}
		for (uint64_t until = now_ns() + (uint64_t)retry_ms * 1000000u;;) {
			rc = rctl_connect(&cl->mn[i].cl, &a, retry_ms, timeout_ms, err, errlen);
			if (!rc)
				rc = hello(cl, i, err, errlen);
			/*
			 * -EBUSY: the node's connection table was full, or a flood of
			 * unauthenticated connections from our address evicted ours before it
			 * authenticated (when our HELLO crossed the eviction, the reason may be
			 * lost in a reset).
			 */
			if ((rc != -EBUSY && rc != -ECONNRESET) || now_ns() >= until)
				break;
			nanosleep(&(struct timespec){ .tv_nsec = 20 * 1000 * 1000 }, NULL);
		}
		if (!rc)
			rc = attach(cl, i, err, errlen);
		if (!rc && cl->cn >= 0)
			rc = join_one(cl, i, err, errlen);
		if (rc)
			return rc;
	}
	return 0;
}

static void disconnect_all(struct remora_cluster *cl)
{
	char err[256];

	for (unsigned i = 0; i < cl->n_mn; i++) {
		struct mn_link *l = &cl->mn[i];

		if (l->joined) {
			struct rctl_view_rep rep;

			cn_call(cl, i, RCTL_LEAVE, (uint16_t)cl->cn, &rep, err, sizeof(err));
			l->joined = false;
		}
		if (l->attached)
			remora_transport_detach(cl->tp, (uint16_t)i);
		l->attached = false;
		rctl_close(&l->cl);
	}
}

static void cluster_free(struct remora_cluster *cl)
{
	memset(cl->key, 0, sizeof(cl->key));
	for (unsigned i = 0; i < REMORA_MAX_MN; i++)
		pthread_mutex_destroy(&cl->mn[i].lock);
	pthread_mutex_destroy(&cl->stop_lock);
	pthread_cond_destroy(&cl->stop_cv);
	free(cl);
}

/* membership = zookeeper: this compute node's ephemeral znode, its session lease_ms long. */
static int join_zk(struct remora_cluster *cl, char *err, size_t errlen)
{
	if (strcmp(remora_params_str(cl->p, REMORA_P_MEMBERSHIP), "zookeeper") != 0)
		return 0;
	return clzk_open(remora_params_str(cl->p, REMORA_P_ZK_HOSTS),
			 remora_params_str(cl->p, REMORA_P_CLUSTER), cl->cn,
			 (int)(cl->lease_ns / 1000000u),
			 (int)remora_params_int(cl->p, REMORA_P_CONNECT_MS), &cl->zk, err, errlen);
}

int remora_cluster_join(const struct remora_params *p, int cn, struct remora_cluster **out,
			char *err, size_t errlen)
{
	struct remora_transport_cfg tcfg;
	struct remora_cluster *cl;
	int rc;

	if (cn < -1 || cn >= (int)remora_params_cn_count(p)) {
		snprintf(err, errlen, "cn id %d out of range (cn = %u)", cn,
			 remora_params_cn_count(p));
		return -REMORA_ECONFIG;
	}
	cl = calloc(1, sizeof(*cl));
	if (!cl)
		return -ENOMEM;
	for (unsigned i = 0; i < REMORA_MAX_MN; i++) {
		pthread_mutex_init(&cl->mn[i].lock, NULL);
		cl->mn[i].cl.fd = -1;
	}
	pthread_mutex_init(&cl->stop_lock, NULL);
	pthread_cond_init(&cl->stop_cv, NULL);
	cl->p = p;
	cl->cn = cn;
	cl->n_mn = remora_params_mn_count(p);
	cl->n_cn = remora_params_cn_count(p);
	cl->heartbeat_ns = (uint64_t)remora_params_int(p, REMORA_P_HEARTBEAT_MS) * 1000000u;
	cl->lease_ns = (uint64_t)remora_params_int(p, REMORA_P_LEASE_MS) * 1000000u;

	rc = parse_mutations(&cl->msg_peers, err, errlen);
	if (!rc)
		rc = rauth_key_load(p, false, cl->key, cl->key_path, sizeof(cl->key_path), err,
				    errlen);
	if (rc)
		goto free_cl;
	remora_cluster_transport_cfg(p, cn, &tcfg);
	if (!cl->msg_peers)
		tcfg.flags &= ~(uint32_t)REMORA_TRANSPORT_MSG_PEERS;
	rc = remora_transport_open(&tcfg, &cl->tp);
	if (rc) {
		snprintf(err, errlen, "%s", remora_last_error());
		goto free_cl;
	}
	if (cn >= 0 && cl->msg_peers) {
		rc = remora_msg_locator(cl->tp, cl->msg_locator, sizeof(cl->msg_locator));
		if (rc) {
			snprintf(err, errlen, "message locator: %s", remora_strerror(rc));
			goto close_tp;
		}
	}
	rc = connect_all(cl, err, errlen);
	if (rc)
		goto disconnect;
	if (cn >= 0) {
		uint64_t oldest = UINT64_MAX;

		for (unsigned i = 0; i < cl->n_mn; i++)
			if (cl->mn[i].renewed_ns < oldest)
				oldest = cl->mn[i].renewed_ns;
		atomic_store(&cl->lease_end_ns, oldest + cl->lease_ns);
		sync_peers(cl); /* the members that joined before us; later ones come with heartbeats */
		rc = join_zk(cl, err, errlen);
		if (rc)
			goto disconnect;
		rc = -pthread_create(&cl->hb, NULL, heartbeat_main, cl);
		if (rc) {
			snprintf(err, errlen, "heartbeat thread: %s", strerror(-rc));
			clzk_close(cl->zk);
			cl->zk = NULL;
			goto disconnect;
		}
		cl->hb_running = true;
	}
	*out = cl;
	return 0;

disconnect:
	disconnect_all(cl);
close_tp:
	remora_transport_close(cl->tp);
free_cl:
	cluster_free(cl);
	return rc;
}

static void stop_heartbeat(struct remora_cluster *cl)
{
	if (!cl->hb_running)
		return;
	pthread_mutex_lock(&cl->stop_lock);
	cl->stop = true;
	pthread_cond_signal(&cl->stop_cv);
	pthread_mutex_unlock(&cl->stop_lock);
	pthread_join(cl->hb, NULL);
	cl->hb_running = false;
}

void remora_cluster_leave(struct remora_cluster *cl)
{
	if (!cl)
		return;
	stop_heartbeat(cl);
	disconnect_all(cl);
	clzk_leave(cl->zk); /* after LEAVE: the others see it left, not dead */
	remora_transport_close(cl->tp);
	cluster_free(cl);
}

/* ---- queries and requests --------------------------------------------------------------- */

struct remora_transport *remora_cluster_transport(struct remora_cluster *cl)
{
	return cl->tp;
}

const struct remora_params *remora_cluster_params(const struct remora_cluster *cl)
{
	return cl->p;
}

int remora_cluster_cn_id(const struct remora_cluster *cl)
{
	return cl->cn;
}

unsigned remora_cluster_n_mn(const struct remora_cluster *cl)
{
	return cl->n_mn;
}

unsigned remora_cluster_n_cn(const struct remora_cluster *cl)
{
	return cl->n_cn;
}

const struct remora_node_desc *remora_cluster_desc(const struct remora_cluster *cl, unsigned mn)
{
	return mn < cl->n_mn ? &cl->mn[mn].desc : NULL;
}

bool remora_cluster_lease_valid(const struct remora_cluster *cl)
{
	struct remora_cluster *c = (struct remora_cluster *)cl;

	if (cl->cn < 0 || atomic_load(&c->fenced))
		return false;
	return now_ns() < atomic_load(&c->lease_end_ns);
}

int remora_cluster_lease_lost(struct remora_cluster *cl, char *why, size_t len)
{
	uint64_t now = now_ns(), oldest = UINT64_MAX;
	int lost = -1, rc = 0;

	if (cl->cn < 0)
		return -1;
	if (cl->zk && clzk_lost(cl->zk, why, len))
		return 0;
	/* Lock-free reads: the heartbeat holds a link's lock while it waits for a stopped node. */
	for (unsigned i = 0; i < cl->n_mn && !rc; i++) {
		struct mn_link *l = &cl->mn[i];
		uint64_t renewed = __atomic_load_n(&l->renewed_ns, __ATOMIC_RELAXED);

		if (rt_transport_down_mask(cl->tp) >> i & 1u)
			continue; /* failed over (docs/recovery.md, "Memory-node failover") */

		rc = __atomic_load_n(&l->broken, __ATOMIC_RELAXED);
		if (rc || renewed < oldest) {
			oldest = renewed;
			lost = (int)i;
		}
	}
	if (!rc && now < oldest + cl->lease_ns)
		lost = -1;
	if (lost < 0 && !atomic_load(&cl->fenced))
		return -1;
	if (lost < 0) {
		snprintf(why, len, "fenced by the memory nodes (declared dead)");
		return 0;
	}
	if (rc)
		snprintf(why, len, "memory node %d (%s) is gone: %s", lost, cl->mn[lost].cl.peer,
			 rc == -REMORA_EFENCED ? "it fenced this compute node" : remora_strerror(rc));
	else
		snprintf(why, len, "memory node %d (%s) renewed no lease for %.1f s (lease_ms %llu)",
			 lost, cl->mn[lost].cl.peer, (double)(now - oldest) / 1e9,
			 (unsigned long long)(cl->lease_ns / 1000000u));
	return lost;
}

bool cluster_fenced(struct remora_cluster *cl)
{
	if (atomic_load(&cl->fenced))
		return true;
	for (unsigned i = 0; i < cl->n_mn; i++)
		if (__atomic_load_n(&cl->mn[i].broken, __ATOMIC_RELAXED) == -REMORA_EFENCED)
			return true;
	return false;
}

static void view_merge(struct remora_cluster_view *acc, const struct remora_cluster_view *v)
{
	acc->epoch += v->epoch;
	acc->alive |= v->alive;
	acc->dead |= v->dead;
	acc->joined |= v->joined;
	for (unsigned i = 0; i < REMORA_MAX_CN; i++)
		if (!acc->pid[i])
			acc->pid[i] = v->pid[i];
}

/*
 * membership = zookeeper: a member of the memory nodes' view whose znode was seen and is gone,
 * without a left mark, is dead (its session ended). The caller fences it (recovery_watch).
 */
static int view_zk(struct remora_cluster *cl, struct remora_cluster_view *acc)
{
	uint64_t members = 0, left = 0, self = UINT64_C(1) << cl->cn, seen, mn_dead = acc->dead;
	int rc = clzk_members(cl->zk, &members, &left);

	if (rc) {
		snprintf(cl->errmsg, sizeof(cl->errmsg), "zookeeper: cannot list the members");
		return rc;
	}
	/* atomic: the watchdog and the job may both ask for the view */
	seen = __atomic_or_fetch(&cl->zk_seen, members, __ATOMIC_RELAXED);
	acc->dead |= acc->alive & seen & ~members & ~left & ~self;
	/*
	 * Once the memory nodes hold a node dead (it was fenced) the verdict is theirs: forget
	 * that its znode was seen, so that its next incarnation counts as dead only after its
	 * own znode was seen and lost. Not sooner: a failed fence is retried on this view.
	 */
	if (mn_dead & ~members)
		__atomic_and_fetch(&cl->zk_seen, ~(mn_dead & ~members), __ATOMIC_RELAXED);
	return 0;
}

int remora_cluster_view(struct remora_cluster *cl, struct remora_cluster_view *out)
{
	struct remora_cluster_view acc;
	int rc = 0;

	memset(&acc, 0, sizeof(acc));
	for (unsigned i = 0; i < cl->n_mn; i++) {
		struct mn_link *l = &cl->mn[i];

		if (cl->cn < 0) {
			struct rctl_req q;
			struct rctl_view_rep rep;
			int r = link_call(l, RCTL_MEMBERS, &q, sizeof(q), &rep, sizeof(rep),
					  cl->errmsg, sizeof(cl->errmsg));

			if (r == 0)
				view_merge(&acc, &rep.view);
			else if (!rc)
				rc = r;
			continue;
		}
		pthread_mutex_lock(&l->lock);
		view_merge(&acc, &l->view);
		pthread_mutex_unlock(&l->lock);
	}
	if (cl->zk && !rc)
		rc = view_zk(cl, &acc);
	acc.alive &= ~acc.dead;
	*out = acc;
	return rc;
}

int remora_cluster_fence(struct remora_cluster *cl, uint16_t cn)
{
	uint32_t down = cl->tp ? rt_transport_down_mask(cl->tp) : 0;
	int rc = 0;

	for (unsigned i = 0; i < cl->n_mn; i++) {
		struct rctl_view_rep rep;
		int r;

		if (down >> i & 1u)
			continue; /* failed over: it serves no verb of anyone any more */
		r = cn_call(cl, i, RCTL_FENCE, cn, &rep, cl->errmsg, sizeof(cl->errmsg));

		if (r && !rc)
			rc = r;
	}
	return rc;
}

int remora_cluster_shutdown(struct remora_cluster *cl)
{
	int rc = 0;

	stop_heartbeat(cl);
	for (unsigned i = 0; i < cl->n_mn; i++) {
		struct rctl_req q;
		struct rctl_rep rep;
		int r = link_call(&cl->mn[i], RCTL_SHUTDOWN, &q, sizeof(q), &rep, sizeof(rep),
				  cl->errmsg, sizeof(cl->errmsg));

		if (r && !rc)
			rc = r;
		cl->mn[i].joined = false; /* the node is gone: no LEAVE at remora_cluster_leave */
	}
	return rc;
}

const char *remora_cluster_errmsg(const struct remora_cluster *cl)
{
	return cl->errmsg;
}

int remora_mn_shutdown(const struct remora_params *p, unsigned id, char *err, size_t errlen)
{
	/* A tool that asks no cn count and no backend: only the cluster and its key must match. */
	struct rctl_hello hq = { .cn = -1, .max_cn = 0 };
	struct rctl_hello_rep hr;
	uint8_t key[RAUTH_KEY_BYTES];
	char key_path[RAUTH_PATH_MAX];
	struct remora_node_addr a;
	struct rctl_client c;
	struct rctl_req q;
	struct rctl_rep rep;
	int rc;

	if (remora_params_mn_addr(p, id, &a)) {
		snprintf(err, errlen, "mn %u: out of range (mn = %u)", id,
			 remora_params_mn_count(p));
		return -REMORA_ENODE;
	}
	rc = rauth_key_load(p, false, key, key_path, sizeof(key_path), err, errlen);
	if (rc)
		return rc;
	snprintf(hq.cluster, sizeof(hq.cluster), "%s", remora_params_str(p, REMORA_P_CLUSTER));
	rc = rctl_connect(&c, &a, 0, 2000, err, errlen);
	if (!rc)
		rc = rctl_handshake(&c, key, key_path, &hq, &hr, err, errlen);
	memset(key, 0, sizeof(key));
	if (rc)
		return rc;
	rc = rctl_call(&c, RCTL_SHUTDOWN, &q, sizeof(q), &rep, sizeof(rep), err, errlen);
	rctl_close(&c);
	return rc;
}
