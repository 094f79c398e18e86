/* SPDX-License-Identifier: MIT */
/*
 * Message endpoints: remora_msg_locator() hands out where this process receives compute-node
 * messages, remora_msg_set_peer() is told where a peer does. A control plane carries the
 * strings between them (runtime/cluster); the core validates what it is given, remembers the
 * last locator per peer (so a control plane may repeat itself at no cost), and passes changes
 * to the backend. Backends whose mailboxes need no introduction leave both ops out.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "core.h"
#include "mutate.h"

static pthread_mutex_t test_lock = PTHREAD_MUTEX_INITIALIZER;
static char test_prefix[64];
static unsigned test_count;

void rt_transport_test_msg_locator(const char *prefix)
{
	pthread_mutex_lock(&test_lock);
	snprintf(test_prefix, sizeof(test_prefix), "%s", prefix ? prefix : "");
	pthread_mutex_unlock(&test_lock);
}

/* Whether the backend's own table (not a stub) has msg_locator. */
static bool has_locator_op(const struct remora_backend_ops *b)
{
	size_t need = offsetof(struct remora_backend_ops, msg_locator) + sizeof(b->msg_locator);

	return b->size >= need && b->msg_locator;
}

void rt_peers_init(struct remora_transport *tp, const struct remora_backend_ops *backend)
{
	tp->msg_locator_op = has_locator_op(backend);
	if (tp->msg_locator_op || tp->bcfg.self_cn < 0)
		return;
	pthread_mutex_lock(&test_lock);
	if (test_prefix[0])
		snprintf(tp->test_locator, sizeof(tp->test_locator), "%s%d.%u", test_prefix,
			 tp->bcfg.self_cn, ++test_count);
	pthread_mutex_unlock(&test_lock);
}

REMORA_API int remora_msg_locator(struct remora_transport *tp, char *buf, size_t len)
{
	int rc;

	if (!buf || !len)
		return rt_error(tp, -EINVAL, "msg_locator: no buffer");
	if (tp->bcfg.self_cn < 0) {
		buf[0] = '\0'; /* not a compute node: receives no messages */
		return 0;
	}
	if (tp->test_locator[0]) {
		if ((size_t)snprintf(buf, len, "%s", tp->test_locator) >= len)
			return -ENOSPC;
		return 0;
	}
	rc = tp->ops.msg_locator(tp->priv, buf, len);
	if (rc)
		buf[0] = '\0';
	return rc;
}

/* Printable ASCII without spaces, shorter than REMORA_MSG_LOCATOR_MAX. */
static bool locator_ok(const char *s)
{
	size_t n = 0;

	for (; s[n] && n < REMORA_MSG_LOCATOR_MAX; n++)
		if (s[n] <= ' ' || s[n] > '~')
			return false;
	return n < REMORA_MSG_LOCATOR_MAX;
}

REMORA_API int remora_msg_set_peer(struct remora_transport *tp, uint16_t cn, const char *locator)
{
	int rc = 0;

	if (tp->bcfg.self_cn < 0)
		return rt_error(tp, -REMORA_ENODE, "msg_set_peer: this process is not a compute node");
	if (cn >= tp->bcfg.max_cn)
		return rt_error(tp, -REMORA_ENODE, "msg_set_peer: compute node %u outside 0..%u", cn,
				tp->bcfg.max_cn - 1);
	if (!locator || !locator_ok(locator))
		return rt_error(tp, -EINVAL,
				"msg_set_peer: cn %u: locator is not a printable string of at most "
				"%d characters without spaces", cn, REMORA_MSG_LOCATOR_MAX - 1);
	pthread_mutex_lock(&tp->peer_lock);
	if (strcmp(tp->msg_peer[cn], locator) != 0) {
		rc = tp->ops.msg_set_peer(tp->priv, cn, locator);
		if (!rc)
			snprintf(tp->msg_peer[cn], sizeof(tp->msg_peer[cn]), "%s", locator);
	}
	pthread_mutex_unlock(&tp->peer_lock);
	return rc;
}

int rt_transport_msg_peer(struct remora_transport *tp, uint16_t cn, char *buf, size_t len)
{
	if (cn >= REMORA_MAX_CN || !buf || !len)
		return -EINVAL;
	pthread_mutex_lock(&tp->peer_lock);
	snprintf(buf, len, "%s", tp->msg_peer[cn]);
	pthread_mutex_unlock(&tp->peer_lock);
	return 0;
}
