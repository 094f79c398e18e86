/* SPDX-License-Identifier: MIT */
/*
 * The public face of the lock service (<remora/lock.h>): thin conversions onto the internal
 * API of lock.h, which the transaction protocols and `remora lockbench` use with more knobs
 * (queue capacity, version bits, observers, several workers per node). The public handles are
 * the internal ones under opaque names.
 */
#include <remora/lock.h>

#include <errno.h>
#include <string.h>

#include "lock.h"

#define LOCK_API_DEFAULT_CAP_LOG2 3u /* lock.c's default C = 8 */

static struct lock_svc *svc_of(struct remora_lock_svc *s)
{
	return (struct lock_svc *)s;
}

static struct lock_cli *cli_of(struct remora_lock_cli *c)
{
	return (struct lock_cli *)c;
}

REMORA_API const char *const *remora_lock_types(void)
{
	return lock_type_names();
}

REMORA_API size_t remora_lock_stride(const char *type)
{
	return type ? lock_type_stride(type, LOCK_API_DEFAULT_CAP_LOG2) : 0;
}

REMORA_API int remora_lock_svc_create(const struct remora_lock_cfg *cfg,
				      struct remora_lock_svc **out)
{
	struct lock_svc_cfg in = { 0 };
	struct lock_svc *s = NULL;
	int rc;

	/* A caller built against a larger struct (a newer header) may set fields we ignore. */
	if (!cfg || !out || cfg->size < sizeof(*cfg))
		return -EINVAL;
	in.type = cfg->type;
	in.rpc = cfg->rpc;
	in.rpc_op = cfg->rpc_op;
	in.cn = cfg->cn;
	in.n_cn = cfg->n_cn;
	in.base = cfg->base;
	in.rkey = cfg->rkey;
	in.n_locks = cfg->n_locks;
	in.timeout_ms = cfg->timeout_ms;
	rc = lock_svc_create(&in, &s);
	*out = (struct remora_lock_svc *)s;
	return rc;
}

REMORA_API void remora_lock_svc_destroy(struct remora_lock_svc *s)
{
	lock_svc_destroy(svc_of(s));
}

REMORA_API const char *remora_lock_errmsg(void)
{
	return lock_errmsg();
}

REMORA_API void remora_lock_node_down(struct remora_lock_svc *s, unsigned cn, bool down)
{
	lock_svc_node_down(svc_of(s), cn, down);
}

REMORA_API int remora_lock_cli_open(struct remora_lock_svc *s, struct remora_chan *ch,
				    struct remora_rpc_ep *ep, unsigned coord,
				    struct remora_lock_cli **out)
{
	struct lock_cli *c = NULL;
	int rc = lock_cli_open(svc_of(s), ch, ep, coord, &c);

	*out = (struct remora_lock_cli *)c;
	return rc;
}

REMORA_API void remora_lock_cli_close(struct remora_lock_cli *c)
{
	lock_cli_close(cli_of(c));
}

REMORA_API int remora_lock_format(struct remora_lock_cli *c)
{
	return lock_format(cli_of(c));
}

REMORA_API int remora_lock_acquire(struct remora_lock_cli *c, uint32_t lock,
				   enum remora_lock_mode m, struct remora_lock_hold *h)
{
	struct lock_hold in;
	int rc;

	if (m != REMORA_LOCK_S && m != REMORA_LOCK_X)
		return -EINVAL;
	rc = lock_acquire(cli_of(c), lock, m == REMORA_LOCK_X ? LOCK_X : LOCK_S, &in);
	if (!rc)
		*h = (struct remora_lock_hold){ .lock = in.lock, .mode = in.mode,
						.epoch = in.epoch, .ticket = in.ticket };
	return rc;
}

REMORA_API int remora_lock_release(struct remora_lock_cli *c, const struct remora_lock_hold *h)
{
	struct lock_hold in = { .lock = h->lock, .mode = h->mode, .epoch = h->epoch,
				.ticket = h->ticket };

	return lock_release(cli_of(c), &in);
}

REMORA_API void remora_lock_counts(const struct remora_lock_cli *c,
				   struct remora_lock_counts *out)
{
	struct lock_stats st;

	lock_cli_stats((const struct lock_cli *)c, &st);
	*out = (struct remora_lock_counts){ .acquires = st.acquires, .releases = st.releases,
					    .acquire_verbs = st.acq_ops,
					    .release_verbs = st.rel_ops, .waited = st.waited,
					    .resets = st.resets };
}
