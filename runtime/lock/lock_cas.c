/* SPDX-License-Identifier: MIT */
/*
 * CASLock, the baseline of reader-writer spinlocks on a memory node (Sherman, FORD, SMART):
 * one 8 B word, writer id in the top 24 bits, reader count in the low 40. A writer CASes
 * 0 -> its id and retries the CAS until it wins; a reader FAAs +1 and, while a writer holds,
 * READs the word until the writer is gone. Releases are one FAA each. Unfair by design: a
 * stream of readers starves writers.
 */
#include <errno.h>

#include "lock/lock.h"

#define W_SHIFT 40

static size_t cas_stride(unsigned cap_log2)
{
	(void)cap_log2;
	return 8;
}

static void cas_image(const struct lock_svc *s, void *buf)
{
	(void)s;
	*(uint64_t *)buf = 0;
}

static uint64_t writer_id(const struct lock_cli *c)
{
	return ((uint64_t)c->svc->cfg.cn << 10 | c->coord) + 1;
}

#define BACKOFF_CAP 64 /* yields */

static int cas_acquire(struct lock_cli *c, uint32_t lock, enum lock_mode m, struct lock_hold *h)
{
	remora_gaddr a = lock_addr(c->svc, lock);
	uint64_t ops0 = c->st.acq_ops, old = 0, wid = writer_id(c) << W_SHIFT;
	unsigned b = 1;
	int rc;

	if (m == LOCK_X) {
		while (!(rc = lock_cas(c, a, 0, wid, &old, &c->st.acq_ops)) && old != 0)
			if ((rc = lock_backoff(c, &b, BACKOFF_CAP)))
				break;
	} else {
		rc = lock_faa(c, a, 1, &old, &c->st.acq_ops);
		while (!rc && old >> W_SHIFT)
			rc = lock_backoff_read(c, &b, BACKOFF_CAP, a, &old, &c->st.acq_ops);
	}
	if (rc)
		return rc;
	c->st.waited += c->st.acq_ops - ops0 > 1;
	if (c->st.acq_ops - ops0 > c->st.acq_ops_max)
		c->st.acq_ops_max = c->st.acq_ops - ops0;
	c->st.acquires++;
	*h = (struct lock_hold){ .lock = lock, .mode = (uint8_t)m, .ticket = LOCK_TICKET_UNORDERED };
	lock_emit(c, lock, h->ticket, m, LOCK_EV_GRANT);
	return 0;
}

static int cas_release(struct lock_cli *c, const struct lock_hold *h)
{
	uint64_t old, add = h->mode == LOCK_X ? (uint64_t)0 - (writer_id(c) << W_SHIFT)
					      : (uint64_t)0 - 1;

	return lock_faa(c, lock_addr(c->svc, h->lock), add, &old, &c->st.rel_ops);
}

const struct lock_ops lock_type_caslock = {
	.size = sizeof(struct lock_ops),
	.name = "caslock",
	.stride = cas_stride,
	.image = cas_image,
	.acquire = cas_acquire,
	.release = cas_release,
};
