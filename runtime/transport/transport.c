/* SPDX-License-Identifier: MIT */
/*
 * The transport core: backend selection and the ops table merge, configuration, memory-node
 * pools, attaching memory nodes, channels and their counters. The data path is in verbs.c.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core.h"
#include "direct.h"
#include "mutate.h"
#include "config/env.h"
#include "mutate/mutate.h"

extern const struct remora_backend_ops *const rt_backend_registry[];

/* ---- stubs: every op a backend leaves out answers -EOPNOTSUPP -------------------------- */

static int stub_caps(const struct remora_backend_cfg *c, struct remora_caps *caps)
{
	(void)c, (void)caps;
	return -EOPNOTSUPP;
}
static int stub_open(struct remora_transport *tp, const struct remora_backend_cfg *c, void **p)
{
	(void)tp, (void)c, (void)p;
	return -EOPNOTSUPP;
}
static void stub_close(void *p)
{
	(void)p;
}
static int stub_pool_open(void *t, const struct remora_pool_spec *s, void **p, void **b,
			  uint64_t *n)
{
	(void)t, (void)s, (void)p, (void)b, (void)n;
	return -EOPNOTSUPP;
}
static void stub_pool_close(void *p, bool u)
{
	(void)p, (void)u;
}
static int stub_pool_reg(void *p, uint64_t o, uint64_t l, uint32_t *k)
{
	(void)p, (void)o, (void)l, (void)k;
	return -EOPNOTSUPP;
}
static int stub_pool_dereg(void *p, uint32_t k)
{
	(void)p, (void)k;
	return -EOPNOTSUPP;
}
static int stub_pool_fence(void *p, uint16_t cn)
{
	(void)p, (void)cn;
	return -EOPNOTSUPP;
}
static int stub_pool_describe(void *p, struct remora_node_desc *d)
{
	(void)p, (void)d;
	return -EOPNOTSUPP;
}
static int stub_pool_persist(void *p, uint64_t o, uint64_t l)
{
	(void)p, (void)o, (void)l;
	return 0; /* not persistent: persisting is a no-op, as the contract says */
}
static int stub_pool_commit(void *p)
{
	(void)p;
	return 0; /* pool_open took nothing over that would need a commit */
}
static int stub_attach(void *t, const struct remora_node_desc *d)
{
	(void)t, (void)d;
	return -EOPNOTSUPP;
}
static int stub_detach(void *t, uint16_t n)
{
	(void)t, (void)n;
	return -EOPNOTSUPP;
}
static int stub_chan_open(void *t, struct remora_chan *ch, void **p)
{
	(void)t, (void)ch, (void)p;
	return -EOPNOTSUPP;
}
static int stub_post(void *p, const struct remora_wr *w, unsigned n, int32_t *s, unsigned f)
{
	(void)p, (void)w, (void)n, (void)s, (void)f;
	return -EOPNOTSUPP;
}
static int stub_poll(void *p, struct remora_cqe *c, unsigned m)
{
	(void)p, (void)c, (void)m;
	return 0;
}
static int stub_msg_send(void *p, uint16_t d, const void *b, uint32_t l)
{
	(void)p, (void)d, (void)b, (void)l;
	return -EOPNOTSUPP;
}
static int stub_msg_recv(void *p, uint16_t *s, void *b, uint32_t c)
{
	(void)p, (void)s, (void)b, (void)c;
	return -EOPNOTSUPP;
}
static int stub_msg_send_at(void *p, uint16_t d, const void *b, uint32_t l, uint64_t t)
{
	(void)p, (void)d, (void)b, (void)l, (void)t;
	return -EOPNOTSUPP;
}
static int stub_msg_recv_at(void *p, uint16_t *s, void *b, uint32_t c, uint64_t t)
{
	(void)p, (void)s, (void)b, (void)c, (void)t;
	return -EOPNOTSUPP;
}
static int stub_persist(void *p, uint16_t n, uint64_t o, uint64_t l)
{
	(void)p, (void)n, (void)o, (void)l;
	return 0;
}
static int stub_cleanup(const struct remora_backend_cfg *c)
{
	(void)c;
	return 0;
}
static int stub_msg_locator(void *t, char *buf, size_t len)
{
	(void)t, (void)len;
	buf[0] = '\0'; /* no endpoint to hand out: mailboxes are found without help */
	return 0;
}
static int stub_msg_set_peer(void *t, uint16_t cn, const char *locator)
{
	(void)t, (void)cn, (void)locator;
	return 0;
}

static int stub_chan_break(void *p, struct remora_cqe *oldest, char *why, size_t len)
{
	(void)p, (void)oldest;
	snprintf(why, len, "no verb in flight in the backend");
	return 0;
}

static const struct remora_backend_ops stub_ops = {
	.size = sizeof(struct remora_backend_ops),
	.name = "?",
	.description = "",
	.caps = stub_caps,
	.open = stub_open,
	.close = stub_close,
	.pool_open = stub_pool_open,
	.pool_close = stub_pool_close,
	.pool_reg = stub_pool_reg,
	.pool_dereg = stub_pool_dereg,
	.pool_fence = stub_pool_fence,
	.pool_describe = stub_pool_describe,
	.pool_persist = stub_pool_persist,
	.attach = stub_attach,
	.detach = stub_detach,
	.chan_open = stub_chan_open,
	.chan_close = stub_close,
	.post = stub_post,
	.poll = stub_poll,
	.msg_send = stub_msg_send,
	.msg_recv = stub_msg_recv,
	.persist = stub_persist,
	.cleanup = stub_cleanup,
	.msg_send_at = stub_msg_send_at,
	.msg_recv_at = stub_msg_recv_at,
	.pool_commit = stub_pool_commit,
	.msg_locator = stub_msg_locator,
	.msg_set_peer = stub_msg_set_peer,
	.chan_break = stub_chan_break,
};

#define MERGE(dst, f) \
	do { \
		if (!(dst)->f) \
			(dst)->f = stub_ops.f; \
	} while (0)

/* Copies the part of b's table it knows (b->size) over the stubs; NULL slots stay stubs. */
static void merge_ops(struct remora_backend_ops *dst, const struct remora_backend_ops *b)
{
	size_t n = b->size < sizeof(*dst) ? b->size : sizeof(*dst);

	*dst = stub_ops;
	memcpy(dst, b, n);
	dst->size = sizeof(*dst);
	if (!dst->name)
		dst->name = "?";
	if (!dst->description)
		dst->description = "";
	MERGE(dst, caps);
	MERGE(dst, open);
	MERGE(dst, close);
	MERGE(dst, pool_open);
	MERGE(dst, pool_close);
	MERGE(dst, pool_reg);
	MERGE(dst, pool_dereg);
	MERGE(dst, pool_fence);
	MERGE(dst, pool_describe);
	MERGE(dst, pool_persist);
	MERGE(dst, attach);
	MERGE(dst, detach);
	MERGE(dst, chan_open);
	MERGE(dst, chan_close);
	MERGE(dst, post);
	MERGE(dst, poll);
	MERGE(dst, msg_send);
	MERGE(dst, msg_recv);
	MERGE(dst, persist);
	MERGE(dst, cleanup);
	MERGE(dst, msg_send_at);
	MERGE(dst, msg_recv_at);
	MERGE(dst, pool_commit);
	MERGE(dst, msg_locator);
	MERGE(dst, msg_set_peer);
	MERGE(dst, chan_break);
}

/* Whether the backend's own table (not a stub) has the timed message ops. */
static bool has_timed_msg(const struct remora_backend_ops *b)
{
	size_t need = offsetof(struct remora_backend_ops, msg_recv_at) + sizeof(b->msg_recv_at);

	return b->size >= need && b->msg_send_at && b->msg_recv_at;
}

/* ---- registry ------------------------------------------------------------------------- */

static const struct remora_backend_ops *find_backend(const char *name)
{
	for (unsigned i = 0; rt_backend_registry[i]; i++)
		if (strcmp(rt_backend_registry[i]->name, name) == 0)
			return rt_backend_registry[i];
	return NULL;
}

static const char *backend_names[16];
static pthread_once_t backend_names_once = PTHREAD_ONCE_INIT;

/* Fills the NULL-terminated name list once (the registry is constant). */
static void fill_backend_names(void)
{
	unsigned n = 0;

	for (unsigned i = 0; rt_backend_registry[i] && n + 1 < 16; i++)
		backend_names[n++] = rt_backend_registry[i]->name;
	backend_names[n] = NULL;
}

REMORA_API const char *const *remora_backend_names(void)
{
	pthread_once(&backend_names_once, fill_backend_names);
	return backend_names;
}

static void list_backends(char *buf, size_t size)
{
	size_t used = 0;

	buf[0] = '\0';
	for (unsigned i = 0; rt_backend_registry[i] && used < size; i++)
		used += (size_t)snprintf(buf + used, size - used, "%s%s", i ? ", " : "",
					 rt_backend_registry[i]->name);
}

static const char *const no_params[] = { NULL };

static const char *const *params_of(const struct remora_backend_ops *b)
{
	size_t end = offsetof(struct remora_backend_ops, params) + sizeof(b->params);

	return b->size >= end && b->params ? b->params : no_params;
}

REMORA_API const char *const *remora_backend_params(const char *backend)
{
	const struct remora_backend_ops *b = find_backend(backend);

	return b ? params_of(b) : NULL;
}

/* The backend's own copy of the parameter name key (static), or NULL when it has none. */
static const char *declared(const struct remora_backend_ops *b, const char *key)
{
	for (const char *const *n = params_of(b); *n; n++)
		if (strcmp(*n, key) == 0)
			return *n;
	return NULL;
}

static bool any_declares(const char *key)
{
	for (unsigned i = 0; rt_backend_registry[i]; i++)
		if (declared(rt_backend_registry[i], key))
			return true;
	return false;
}

static void free_backend_params(struct remora_transport *tp)
{
	for (uint32_t i = 0; i < tp->bcfg.n_params; i++)
		free((char *)tp->bparams[i].value);
	tp->bcfg.n_params = 0;
}

/*
 * Copies the parameters the backend declares into tp (names from the backend's own table, so
 * they outlive the caller's list). A name no backend declares is a typo: refused.
 */
static int copy_backend_params(struct remora_transport *tp, const struct remora_backend_ops *b,
			       const struct remora_kv *kv, uint32_t n)
{
	tp->bcfg.params = tp->bparams;
	tp->bcfg.n_params = 0;
	for (uint32_t i = 0; i < n; i++) {
		const char *name;

		if (!kv[i].key || !kv[i].value)
			return rt_last_error(-EINVAL, "backend parameter %u has no %s", i,
					     kv[i].key ? "value" : "name");
		if (!any_declares(kv[i].key))
			return rt_last_error(-REMORA_ECONFIG,
					     "no backend has a parameter named '%s'", kv[i].key);
		name = declared(b, kv[i].key);
		if (!name)
			continue;
		if (tp->bcfg.n_params == RT_BACKEND_PARAMS_MAX)
			return rt_last_error(-REMORA_ECONFIG, "more than %d backend parameters",
					     RT_BACKEND_PARAMS_MAX);
		tp->bparams[tp->bcfg.n_params].key = name;
		tp->bparams[tp->bcfg.n_params].value = strdup(kv[i].value);
		if (!tp->bparams[tp->bcfg.n_params].value)
			return rt_last_error(-ENOMEM, "out of memory");
		tp->bcfg.n_params++;
	}
	return 0;
}

REMORA_API int remora_backend_caps(const char *name, struct remora_caps *caps)
{
	const struct remora_backend_ops *b = find_backend(name);
	struct remora_backend_ops ops;

	if (!b)
		return -REMORA_ENOBACKEND;
	merge_ops(&ops, b);
	return ops.caps(NULL, caps);
}

REMORA_API int remora_backend_cluster_name(const char *cluster, const char *what, char *buf,
					   size_t size)
{
	if ((size_t)snprintf(buf, size, "remora-%s-%s", cluster, what) >= size)
		return -ENAMETOOLONG;
	return 0;
}

REMORA_API int remora_backend_cluster_path(const char *dir, const char *cluster, const char *what,
					   char *buf, size_t size)
{
	if ((size_t)snprintf(buf, size, "%s/remora-%s-%s", dir, cluster, what) >= size)
		return -ENAMETOOLONG;
	return 0;
}

/* ---- configuration -------------------------------------------------------------------- */

/* The caller's value, else the parameter from the environment or its default (config/env.h). */
static const char *pick(const char *cfg_value, enum remora_param_id id)
{
	return cfg_value ? cfg_value : cfg_param_env(id);
}

int rt_seg_key(const char *cluster, const char *dir, char *buf, size_t size)
{
	uint32_t h = 2166136261u; /* FNV-1a */
	size_t n = dir ? strlen(dir) : 0;
	int len;

	while (n > 1 && dir[n - 1] == '/')
		n--; /* "d/" and "d" name one directory */
	for (size_t i = 0; i < n; i++)
		h = (h ^ (unsigned char)dir[i]) * 16777619u;
	len = n ? snprintf(buf, size, "%s-d%08x", cluster, h) : snprintf(buf, size, "%s", cluster);
	return len < 0 || (size_t)len >= size ? -ENAMETOOLONG : 0;
}

/* Cluster names become file names: keep them to a safe alphabet. */
static bool cluster_name_ok(const char *s)
{
	size_t n = strlen(s);

	if (n == 0 || n >= 48)
		return false;
	for (size_t i = 0; i < n; i++) {
		char c = s[i];

		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      c == '_' || c == '.' || c == '-'))
			return false;
	}
	return s[0] != '.';
}

#define VERB_TIMEOUT_MAX_MS 86400000 /* the parameter's range, params.h */

/*
 * The verb deadline in ns (0: none): cfg (> 0 ms, < 0 none), else the verb_timeout_ms
 * parameter ($REMORA_VERB_TIMEOUT_MS or its default; 0 none). -1: a bad value.
 */
static int pick_verb_timeout(int32_t cfg_value, uint64_t *ns)
{
	const char *e = cfg_param_env(REMORA_P_VERB_TIMEOUT_MS);
	char *end;
	unsigned long v;

	if (cfg_value) {
		*ns = cfg_value < 0 ? 0 : (uint64_t)cfg_value * 1000000u;
		return cfg_value <= VERB_TIMEOUT_MAX_MS ? 0 : -1;
	}
	errno = 0;
	v = strtoul(e, &end, 10);
	if (errno || *end || e[0] == '-' || !e[0] || v > VERB_TIMEOUT_MAX_MS)
		return -1;
	*ns = (uint64_t)v * 1000000u;
	return 0;
}

/* The memory-node scale K: cfg, else the mn_scale parameter ($REMORA_MN_SCALE or 1). -1: bad. */
static int pick_mn_scale(uint32_t cfg_value, unsigned *k)
{
	const char *e = cfg_param_env(REMORA_P_MN_SCALE);
	char *end;
	unsigned long v;

	if (cfg_value) {
		*k = cfg_value;
		return cfg_value <= REMORA_MN_SCALE_MAX ? 0 : -1;
	}
	errno = 0;
	v = strtoul(e, &end, 10);
	if (errno || *end || e[0] == '-' || v < 1 || v > REMORA_MN_SCALE_MAX)
		return -1;
	*k = (unsigned)v;
	return 0;
}

static int parse_atomics(const char *s, int *mode)
{
	if (strcmp(s, "native") == 0)
		*mode = REMORA_ATOMICS_NATIVE;
	else if (strcmp(s, "refuse") == 0)
		*mode = REMORA_ATOMICS_REFUSE;
	else if (strcmp(s, "arbiter") == 0)
		*mode = REMORA_ATOMICS_ARBITER;
	else
		return -1;
	return 0;
}

static void list_profiles(char *buf, size_t size)
{
	unsigned n;
	const struct rt_cost_profile *p = rt_cost_profiles(&n);
	size_t used = 0;

	buf[0] = '\0';
	for (unsigned i = 0; i < n && used < size; i++)
		used += (size_t)snprintf(buf + used, size - used, "%s%s", i ? ", " : "", p[i].name);
}

#define ATOMIC_OPS ((1u << REMORA_OP_CAS) | (1u << REMORA_OP_FAA) | (1u << REMORA_OP_MCAS))

/* Resolves cfg (may be NULL) into tp: backend, profile, atomics, names. Sets remora_last_error. */
static int resolve_cfg(const struct remora_transport_cfg *ucfg, struct remora_transport *tp,
		       const struct remora_backend_ops **backend)
{
	struct remora_transport_cfg cfg = { .self_cn = -1, .numa_node = -1 };
	const char *name, *profile, *atomics, *cluster;
	char list[256];

	if (ucfg) {
		size_t n = ucfg->size && ucfg->size < sizeof(cfg) ? ucfg->size : sizeof(cfg);

		memcpy(&cfg, ucfg, n);
	}
	name = pick(cfg.backend, REMORA_P_BACKEND);
	*backend = find_backend(name);
	if (!*backend) {
		list_backends(list, sizeof(list));
		return rt_last_error(-REMORA_ENOBACKEND, "unknown backend '%s' (built in: %s)", name,
				     list);
	}
	profile = pick(cfg.profile, REMORA_P_PROFILE);
	tp->cost_base = rt_cost_profile_find(profile);
	if (!tp->cost_base) {
		list_profiles(list, sizeof(list));
		return rt_last_error(-REMORA_ECONFIG, "unknown cost profile '%s' (profiles: %s)",
				     profile, list);
	}
	if (pick_mn_scale(cfg.mn_scale, &tp->mn_scale))
		return rt_last_error(-REMORA_ECONFIG, "mn_scale: want a whole number in 1..%d",
				     REMORA_MN_SCALE_MAX);
	rt_cost_profile_scale(tp->cost_base, tp->mn_scale, &tp->prof);
	tp->cost = &tp->prof;
	if (pick_verb_timeout(cfg.verb_timeout_ms, &tp->verb_timeout_ns))
		return rt_last_error(-REMORA_ECONFIG, "verb_timeout_ms: want a whole number of "
				     "ms in 0..%d (0: no deadline)", VERB_TIMEOUT_MAX_MS);
	atomics = pick(cfg.atomics, REMORA_P_ATOMICS);
	if (parse_atomics(atomics, &tp->bcfg.atomics))
		return rt_last_error(-REMORA_ECONFIG,
				     "unknown atomics mode '%s' (native, refuse, arbiter)", atomics);
	cluster = pick(cfg.cluster, REMORA_P_CLUSTER);
	if (!cluster_name_ok(cluster))
		return rt_last_error(-REMORA_ECONFIG,
				     "cluster name '%s': use 1-47 of [A-Za-z0-9_.-], not starting "
				     "with '.'", cluster);
	if (cfg.max_cn == 0)
		cfg.max_cn = REMORA_MAX_CN;
	if (cfg.max_cn > REMORA_MAX_CN)
		return rt_last_error(-REMORA_ECONFIG, "max_cn %u exceeds %d", cfg.max_cn,
				     REMORA_MAX_CN);
	if (cfg.self_cn < -1 || cfg.self_cn >= (int)cfg.max_cn)
		return rt_last_error(-REMORA_ECONFIG, "self_cn %d outside -1..%u", cfg.self_cn,
				     cfg.max_cn - 1);
	if (cfg.dir && strlen(cfg.dir) >= sizeof(tp->dir) - 64)
		return rt_last_error(-REMORA_ECONFIG, "dir too long");

	snprintf(tp->cluster, sizeof(tp->cluster), "%s", cluster);
	if (cfg.dir)
		snprintf(tp->dir, sizeof(tp->dir), "%s", cfg.dir);
	tp->bcfg.cluster = tp->cluster;
	tp->bcfg.dir = cfg.dir ? tp->dir : NULL;
	tp->bcfg.profile = tp->cost->name;
	tp->bcfg.self_cn = cfg.self_cn;
	tp->bcfg.max_cn = cfg.max_cn;
	tp->bcfg.numa_node = cfg.numa_node;
	tp->bcfg.hugepages = cfg.hugepages;
	tp->bcfg.flags = cfg.flags;
	if (strcmp(tp->cost->name, "none") == 0)
		tp->cost = NULL;
	return copy_backend_params(tp, *backend, cfg.backend_params, cfg.n_backend_params);
}

/* Caps as the core enforces them: the backend's, minus what the atomics mode takes away. */
static int query_caps(struct remora_transport *tp)
{
	struct remora_caps *c = &tp->caps;
	int rc;

	memset(c, 0, sizeof(*c));
	c->size = sizeof(*c);
	rc = tp->ops.caps(&tp->bcfg, c);
	if (rc)
		return rt_last_error(rc, "backend %s: caps query failed: %s", tp->ops.name,
				     remora_strerror(rc));
	c->size = sizeof(*c);
	if (tp->bcfg.atomics == REMORA_ATOMICS_REFUSE) {
		c->ops &= ~ATOMIC_OPS;
		c->emulated_ops &= ~ATOMIC_OPS;
		c->flags &= ~(uint32_t)(REMORA_CAP_COHERENT_ATOMICS | REMORA_CAP_NATIVE_MCAS);
	}
	if (c->max_batch == 0 || c->max_outstanding == 0 || c->max_batch > c->max_outstanding)
		return rt_last_error(-EINVAL, "backend %s reports max_batch %u, max_outstanding %u",
				     tp->ops.name, c->max_batch, c->max_outstanding);
	if (tp->cost && !(tp->ops.flags & REMORA_BACKEND_INLINE))
		return rt_last_error(-REMORA_ECONFIG,
				     "cost profile '%s' applies to inline backends (shm, pmem), not %s",
				     tp->cost->name, tp->ops.name);
	tp->ops_mask = c->ops & ((1u << REMORA_OP__COUNT) - 1); /* the verb path trusts it */
	return 0;
}

REMORA_API int remora_transport_open(const struct remora_transport_cfg *cfg,
				     struct remora_transport **out)
{
	const struct remora_backend_ops *backend;
	struct remora_transport *tp;
	int rc;

	rc = rt_fault_init();
	if (rc)
		return rc;
	tp = calloc(1, sizeof(*tp));
	if (!tp)
		return rt_last_error(-ENOMEM, "out of memory");
	pthread_mutex_init(&tp->lock, NULL);
	pthread_mutex_init(&tp->peer_lock, NULL);
	rc = resolve_cfg(cfg, tp, &backend);
	if (rc)
		goto err_free;
	merge_ops(&tp->ops, backend);
	tp->timed_msg = has_timed_msg(backend);
	rt_peers_init(tp, backend);
	rc = query_caps(tp);
	if (rc)
		goto err_free;
	if (tp->cost) {
		rc = rt_cost_attach(tp);
		if (rc)
			goto err_free;
	}
	rc = tp->ops.open(tp, &tp->bcfg, &tp->priv);
	if (rc) {
		rt_last_error(rc, "backend %s: %s", tp->ops.name,
			      tp->errmsg[0] ? tp->errmsg : remora_strerror(rc));
		goto err_cost;
	}
	*out = tp;
	return 0;

err_cost:
	rt_cost_detach(tp);
err_free:
	free_backend_params(tp);
	pthread_mutex_destroy(&tp->peer_lock);
	pthread_mutex_destroy(&tp->lock);
	free(tp);
	return rc;
}

REMORA_API void remora_transport_close(struct remora_transport *tp)
{
	if (!tp)
		return;
	while (tp->chans)
		remora_chan_close(tp->chans);
	for (unsigned n = 0; n < REMORA_MAX_MN; n++)
		if (tp->nodes[n].attached)
			remora_transport_detach(tp, (uint16_t)n);
	tp->ops.close(tp->priv);
	rt_cost_detach(tp);
	free_backend_params(tp);
	pthread_mutex_destroy(&tp->peer_lock);
	pthread_mutex_destroy(&tp->lock);
	free(tp);
}

REMORA_API const char *remora_transport_backend(const struct remora_transport *tp)
{
	return tp->ops.name;
}

REMORA_API const char *remora_transport_profile(const struct remora_transport *tp)
{
	return tp->bcfg.profile;
}

static void copy_caps(const struct remora_caps *src, struct remora_caps *dst)
{
	uint32_t n = dst->size && dst->size < sizeof(*src) ? dst->size : sizeof(*src);

	memcpy(dst, src, n);
	dst->size = n;
}

REMORA_API int remora_transport_caps(const struct remora_transport *tp, struct remora_caps *caps)
{
	copy_caps(&tp->caps, caps);
	return 0;
}

REMORA_API int remora_transport_cleanup(const struct remora_transport_cfg *cfg)
{
	struct remora_transport tmp;
	const struct remora_backend_ops *backend;
	struct remora_backend_ops ops;
	int rc, rc2;

	memset(&tmp, 0, sizeof(tmp));
	rc = resolve_cfg(cfg, &tmp, &backend);
	if (rc) {
		free_backend_params(&tmp);
		return rc;
	}
	merge_ops(&ops, backend);
	rc = ops.cleanup(&tmp.bcfg);
	free_backend_params(&tmp);
	if (rc == -EBUSY)
		return rc; /* a live cluster: nothing removed */
	rc2 = rt_cost_unlink(tmp.cluster, tmp.bcfg.dir);
	return rc ? rc : rc2;
}

int rt_transport_mutate(struct remora_transport *tp, const char *name)
{
	if (mut_set(&tp->mutations, MUT_TRANSPORT, name))
		return rt_error(tp, -EINVAL, "unknown transport mutation '%s'", name);
	tp->pflags = mut_on(tp->mutations, MUT_SKIP_FENCE_CHECK) ? REMORA_POST_SKIP_FENCE_CHECK : 0;
	if (tp->cost) {
		rt_cost_profile_scale(tp->cost_base, tp->mn_scale, &tp->prof);
		if (mut_on(tp->mutations, MUT_SKIP_ATOMIC_COST))
			tp->prof.svc_ns[REMORA_COST_ATOMIC] = 0;
	}
	return 0;
}

REMORA_API unsigned remora_transport_mn_scale(const struct remora_transport *tp)
{
	return tp->mn_scale;
}

REMORA_API int remora_transport_cost_stats(const struct remora_transport *tp,
					   struct remora_cost_stats *st)
{
	const struct rt_cost_seg *seg = tp->cost_seg;
	uint64_t now;

	memset(st, 0, sizeof(*st));
	st->mn_scale = tp->mn_scale;
	if (!tp->cost || !seg)
		return -ENODATA;
	now = rt_cost_now();
	st->now_ns = now;
	for (unsigned c = 0; c < REMORA_COST_CLASSES; c++)
		st->svc_ns[c] = tp->cost->svc_ns[c];
	st->msg_svc_ns = tp->cost->msg_svc_ns;
	for (unsigned n = 0; n < REMORA_MAX_MN; n++)
		for (unsigned c = 0; c < REMORA_COST_CLASSES; c++)
			st->mn_busy_ns[n][c] = rt_cost_served(
				__atomic_load_n(&seg->busy[n][c].charged, __ATOMIC_RELAXED),
				__atomic_load_n(&seg->busy[n][c].busy_until, __ATOMIC_RELAXED),
				now);
	for (unsigned n = 0; n < REMORA_MAX_CN; n++)
		st->cn_msg_busy_ns[n] = rt_cost_served(
			__atomic_load_n(&seg->msg[n].charged, __ATOMIC_RELAXED),
			__atomic_load_n(&seg->msg[n].busy_until, __ATOMIC_RELAXED), now);
	return 0;
}

/* ---- memory-node side ----------------------------------------------------------------- */

REMORA_API int remora_pool_open(struct remora_transport *tp, const struct remora_pool_spec *spec,
				struct remora_pool **out)
{
	struct remora_pool *pool;
	int rc;

	if (spec->node >= REMORA_MAX_MN)
		return rt_error(tp, -REMORA_ENODE, "pool node %u: must be below %d", spec->node,
				REMORA_MAX_MN);
	if (spec->bytes > REMORA_GADDR_OFF_MASK)
		return rt_error(tp, -EINVAL, "pool of %llu bytes exceeds the 48-bit offset range",
				(unsigned long long)spec->bytes);
	pool = calloc(1, sizeof(*pool));
	if (!pool)
		return rt_error(tp, -ENOMEM, "out of memory");
	pool->tp = tp;
	pool->node = spec->node;
	pool->committed = !(spec->flags & REMORA_POOL_DEFER_COMMIT);
	rc = tp->ops.pool_open(tp->priv, spec, &pool->priv, &pool->base, &pool->bytes);
	if (rc) {
		free(pool);
		return rc;
	}
	*out = pool;
	return 0;
}

REMORA_API void remora_pool_close(struct remora_pool *pool, bool unlink)
{
	if (!pool)
		return;
	pool->tp->ops.pool_close(pool->priv, unlink);
	free(pool);
}

REMORA_API void *remora_pool_base(struct remora_pool *pool)
{
	return pool->base;
}

REMORA_API int remora_pool_commit(struct remora_pool *pool)
{
	int rc;

	if (pool->committed)
		return 0;
	rc = pool->tp->ops.pool_commit(pool->priv);
	if (!rc)
		pool->committed = true;
	return rc;
}

REMORA_API uint64_t remora_pool_bytes(const struct remora_pool *pool)
{
	return pool->bytes;
}

REMORA_API int remora_pool_reg(struct remora_pool *pool, uint64_t off, uint64_t len, uint32_t *key)
{
	if (!pool->committed)
		return rt_error(pool->tp, -EINVAL,
				"pool %u: opened with REMORA_POOL_DEFER_COMMIT and not committed",
				pool->node);
	if (len == 0 || off > pool->bytes || len > pool->bytes - off)
		return rt_error(pool->tp, -REMORA_EBOUNDS,
				"region [%llu, +%llu) outside the pool's %llu bytes",
				(unsigned long long)off, (unsigned long long)len,
				(unsigned long long)pool->bytes);
	return pool->tp->ops.pool_reg(pool->priv, off, len, key);
}

REMORA_API int remora_pool_dereg(struct remora_pool *pool, uint32_t key)
{
	return pool->tp->ops.pool_dereg(pool->priv, key);
}

REMORA_API int remora_pool_fence(struct remora_pool *pool, uint16_t cn)
{
	if (cn >= REMORA_MAX_CN)
		return rt_error(pool->tp, -EINVAL, "fence: compute node %u out of range", cn);
	return pool->tp->ops.pool_fence(pool->priv, cn);
}

REMORA_API int remora_pool_describe(const struct remora_pool *pool, struct remora_node_desc *desc)
{
	memset(desc, 0, sizeof(*desc));
	return pool->tp->ops.pool_describe(pool->priv, desc);
}

REMORA_API int remora_pool_persist(struct remora_pool *pool, uint64_t off, uint64_t len)
{
	if (off > pool->bytes || len > pool->bytes - off)
		return rt_error(pool->tp, -REMORA_EBOUNDS, "persist outside the pool");
	return pool->tp->ops.pool_persist(pool->priv, off, len);
}

/* ---- compute-node side ---------------------------------------------------------------- */

static int check_desc(struct remora_transport *tp, const struct remora_node_desc *d)
{
	if (d->node >= REMORA_MAX_MN)
		return rt_error(tp, -REMORA_ENODE, "node %u: must be below %d", d->node,
				REMORA_MAX_MN);
	if (d->nregions > REMORA_MAX_REGIONS)
		return rt_error(tp, -EINVAL, "node %u: %u regions, at most %d", d->node,
				d->nregions, REMORA_MAX_REGIONS);
	if (!memchr(d->locator, '\0', sizeof(d->locator)))
		return rt_error(tp, -EINVAL, "node %u: locator not terminated", d->node);
	for (unsigned i = 0; i < d->nregions; i++) {
		const struct remora_region_desc *r = &d->regions[i];

		if (r->key == 0 || r->len == 0 || r->off > d->bytes || r->len > d->bytes - r->off)
			return rt_error(tp, -EINVAL, "node %u: region %u [%llu, +%llu) key %#x invalid",
					d->node, i, (unsigned long long)r->off,
					(unsigned long long)r->len, r->key);
	}
	return 0;
}

REMORA_API int remora_transport_attach(struct remora_transport *tp,
				       const struct remora_node_desc *desc)
{
	struct rt_node *n;
	int rc;

	rc = check_desc(tp, desc);
	if (rc)
		return rc;
	rc = tp->ops.attach(tp->priv, desc);
	if (rc)
		return rc;
	n = &tp->nodes[desc->node];
	n->bytes = desc->bytes;
	for (unsigned i = 0; i < desc->nregions; i++) {
		n->regions[i].off = desc->regions[i].off;
		n->regions[i].len = desc->regions[i].len;
		n->regions[i].key = desc->regions[i].key;
	}
	n->nregions = desc->nregions;
	if (desc->nregions)
		rt_node_fast_set(n, RT_NODE_FAST | n->regions[0].key, n->regions[0].off,
				 n->regions[0].off + n->regions[0].len);
	else
		rt_node_fast_set(n, 0, 0, 0);
	__atomic_store_n(&n->attached, 1, __ATOMIC_RELEASE);
	return 0;
}

REMORA_API int remora_transport_detach(struct remora_transport *tp, uint16_t node)
{
	if (node >= REMORA_MAX_MN || !tp->nodes[node].attached)
		return rt_error(tp, -REMORA_ENODE, "node %u is not attached", node);
	rt_node_fast_set(&tp->nodes[node], 0, 0, 0);
	__atomic_store_n(&tp->nodes[node].attached, 0, __ATOMIC_RELEASE);
	tp->nodes[node].nregions = 0;
	return tp->ops.detach(tp->priv, node);
}

void rt_node_fast_set(struct rt_node *n, uint64_t key, uint64_t lo, uint64_t hi)
{
	uint64_t seq = __atomic_load_n(&n->fast_seq, __ATOMIC_RELAXED);

	/* Take the odd state from an even one, so that two writers never overlap. */
	while ((seq & 1) || !__atomic_compare_exchange_n(&n->fast_seq, &seq, seq + 1, false,
							 __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
		seq = __atomic_load_n(&n->fast_seq, __ATOMIC_RELAXED);
	/*
	 * Release stores, no fences (ThreadSanitizer has none): a reader that loads one of these
	 * (acquire) then sees the odd sequence word at its second look, and retries.
	 */
	__atomic_store_n(&n->fast_key, key, __ATOMIC_RELEASE);
	__atomic_store_n(&n->fast_lo, lo, __ATOMIC_RELEASE);
	__atomic_store_n(&n->fast_hi, hi, __ATOMIC_RELEASE);
	__atomic_store_n(&n->fast_seq, seq + 2, __ATOMIC_RELEASE);
}

void rt_transport_mn_down(struct remora_transport *tp, uint16_t node)
{
	if (node >= REMORA_MAX_MN)
		return;
	__atomic_or_fetch(&tp->mn_down, 1u << node, __ATOMIC_SEQ_CST);
	/* validate() refuses from now on; the mapping stays: a verb already past it finishes */
	rt_node_fast_set(&tp->nodes[node], 0, 0, 0);
	__atomic_store_n(&tp->nodes[node].attached, 0, __ATOMIC_SEQ_CST);
}

uint32_t rt_transport_down_mask(const struct remora_transport *tp)
{
	return __atomic_load_n(&tp->mn_down, __ATOMIC_SEQ_CST);
}

/* ---- channels ------------------------------------------------------------------------- */

static uint32_t pow2_at_least(uint32_t v)
{
	uint32_t p = 1;

	while (p < v)
		p <<= 1;
	return p;
}

static struct rt_costq *costq_new(uint32_t cap)
{
	struct rt_costq *q = calloc(1, sizeof(*q) + cap * sizeof(q->slots[0]));

	if (!q)
		return NULL;
	for (uint32_t i = 0; i < cap; i++)
		q->slots[i].next = i + 1 < cap ? i + 1 : UINT32_MAX;
	q->free_head = 0;
	return q;
}

REMORA_API int remora_chan_open(struct remora_transport *tp, struct remora_chan **out)
{
	struct remora_chan *ch;
	int rc;

	ch = calloc(1, sizeof(*ch));
	if (!ch)
		return rt_error(tp, -ENOMEM, "out of memory");
	ch->tp = tp;
	ch->post = tp->ops.post;
	ch->inline_cq = tp->ops.flags & REMORA_BACKEND_INLINE;
	ch->max_batch = tp->caps.max_batch;
	ch->cq_cap = tp->caps.max_outstanding;
	ch->cq_mask = pow2_at_least(ch->cq_cap) - 1;
	rc = -ENOMEM;
	ch->status = calloc(ch->max_batch, sizeof(*ch->status));
	if (!ch->status)
		goto err_free;
	if (ch->inline_cq) {
		ch->cq = calloc((size_t)ch->cq_mask + 1, sizeof(*ch->cq));
		if (!ch->cq)
			goto err_free;
		if (tp->cost) {
			ch->costq = costq_new(ch->cq_cap);
			if (!ch->costq)
				goto err_free;
		}
	}
	ch->direct = ch->inline_cq && !ch->costq;
	rc = tp->ops.chan_open(tp->priv, ch, &ch->priv);
	if (rc)
		goto err_free;
	pthread_mutex_lock(&tp->lock);
	ch->next = tp->chans;
	if (tp->chans)
		tp->chans->pprev = &ch->next;
	ch->pprev = &tp->chans;
	tp->chans = ch;
	pthread_mutex_unlock(&tp->lock);
	*out = ch;
	return 0;

err_free:
	free(ch->costq);
	free(ch->cq);
	free(ch->status);
	free(ch);
	if (rc == -ENOMEM)
		return rt_error(tp, rc, "out of memory");
	return rc;
}

REMORA_API void remora_chan_close(struct remora_chan *ch)
{
	struct remora_transport *tp;

	if (!ch)
		return;
	tp = ch->tp;
	tp->ops.chan_close(ch->priv);
	pthread_mutex_lock(&tp->lock);
	rt_counters_add(&tp->closed, &ch->cnt);
	*ch->pprev = ch->next;
	if (ch->next)
		ch->next->pprev = ch->pprev;
	pthread_mutex_unlock(&tp->lock);
	free(ch->costq);
	free(ch->cq);
	free(ch->status);
	free(ch);
}

REMORA_API struct remora_transport *remora_chan_transport(struct remora_chan *ch)
{
	return ch->tp;
}

REMORA_API int remora_persist(struct remora_chan *ch, uint16_t node, uint64_t off, uint64_t len)
{
	const struct rt_node *n;

	if (node >= REMORA_MAX_MN)
		return rt_error(ch->tp, -REMORA_ENODE, "persist: node %u out of range", node);
	n = &ch->tp->nodes[node];
	if (!__atomic_load_n(&n->attached, __ATOMIC_ACQUIRE))
		return rt_error(ch->tp, -REMORA_ENODE, "persist: node %u is not attached", node);
	if (off > n->bytes || len > n->bytes - off)
		return rt_error(ch->tp, -REMORA_EBOUNDS, "persist: [%llu, +%llu) outside node %u",
				(unsigned long long)off, (unsigned long long)len, node);
	return ch->tp->ops.persist(ch->priv, node, off, len);
}

/* ---- counters ------------------------------------------------------------------------- */

_Static_assert(sizeof(struct remora_counters) % sizeof(uint64_t) == 0,
	       "counters are an array of uint64_t");
#define NCOUNTERS (sizeof(struct remora_counters) / sizeof(uint64_t))

void rt_counters_add(struct remora_counters *dst, const struct remora_counters *src)
{
	uint64_t *d = (uint64_t *)dst;
	const uint64_t *s = (const uint64_t *)src;

	for (size_t i = 0; i < NCOUNTERS; i++)
		d[i] += __atomic_load_n(&s[i], __ATOMIC_RELAXED);
}

REMORA_API void remora_chan_counters(const struct remora_chan *ch, struct remora_counters *out)
{
	memset(out, 0, sizeof(*out));
	rt_counters_add(out, &ch->cnt);
}

REMORA_API void remora_transport_counters(struct remora_transport *tp, struct remora_counters *out)
{
	pthread_mutex_lock(&tp->lock);
	*out = tp->closed;
	for (struct remora_chan *ch = tp->chans; ch; ch = ch->next)
		rt_counters_add(out, &ch->cnt);
	pthread_mutex_unlock(&tp->lock);
}

REMORA_API void remora_counters_diff(const struct remora_counters *a,
				     const struct remora_counters *b, struct remora_counters *out)
{
	const uint64_t *x = (const uint64_t *)a, *y = (const uint64_t *)b;
	uint64_t *o = (uint64_t *)out;

	for (size_t i = 0; i < NCOUNTERS; i++)
		o[i] = x[i] - y[i];
}

REMORA_API uint64_t remora_counters_total(const struct remora_counters *c, enum remora_op op)
{
	uint64_t sum = 0;

	if ((unsigned)op >= REMORA_OP__COUNT)
		return 0;
	for (unsigned n = 0; n < REMORA_MAX_MN; n++)
		sum += c->verbs[n][op];
	return sum;
}

REMORA_API const char *remora_op_name(enum remora_op op)
{
	static const char *const names[REMORA_OP__COUNT] = {
		[REMORA_OP_READ] = "read",   [REMORA_OP_WRITE] = "write", [REMORA_OP_CAS] = "cas",
		[REMORA_OP_FAA] = "faa",     [REMORA_OP_MCAS] = "mcas",
	};

	return (unsigned)op < REMORA_OP__COUNT ? names[op] : "?";
}

REMORA_API void remora_backend_count_emulated(struct remora_chan *ch, uint16_t node,
					      enum remora_op op, uint64_t n)
{
	RT_COUNT(ch->cnt.emulated[node][op], n);
}

REMORA_API void remora_backend_count_persist(struct remora_chan *ch, uint16_t node)
{
	RT_COUNT(ch->cnt.persists[node], 1);
}
