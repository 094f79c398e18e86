/* SPDX-License-Identifier: MIT */
/* Posting verb batches of any size and waiting for them, inside or outside a coroutine. */
#include <errno.h>

#include <remora/sched.h>

#include "store.h"

/* Batches up to this size go straight to remora_co_exec (every backend takes at least this). */
#define EXEC_SMALL 16u

/*
 * Large batches (format, loading, big write-sets) exceed one doorbell: post them in chunks
 * under one waiter so they all fly at once, then poll until the last completes. Polling here
 * (instead of parking) works whether or not ch is the scheduler's channel; yielding in between
 * keeps the other coroutines of the thread running.
 */
static int exec_chunked(struct remora_chan *ch, struct remora_wr *wrs, unsigned n,
			unsigned max_batch)
{
	struct remora_waiter w = { .pending = 0, .status = 0, .wake = NULL, .owner = NULL };
	bool in_coro = remora_coro_self() != NULL;
	unsigned done = 0;
	int rc = 0;

	for (unsigned i = 0; i < n; i++)
		wrs[i].wr_id = (uint64_t)(uintptr_t)&w;
	while (done < n) {
		unsigned k = n - done < max_batch ? n - done : max_batch;

		rc = remora_post(ch, wrs + done, k);
		if (rc == -EAGAIN) {
			remora_chan_progress(ch);
			if (in_coro)
				remora_yield();
			rc = 0;
			continue;
		}
		if (rc)
			break;
		w.pending += k;
		done += k;
	}
	while (w.pending) {
		remora_chan_progress(ch);
		if (w.pending && in_coro)
			remora_yield();
	}
	return rc ? rc : w.status;
}

int remora_store_exec(struct remora_chan *ch, struct remora_wr *wrs, unsigned n)
{
	struct remora_caps caps = { .size = sizeof(caps) };
	int rc;

	if (n == 0)
		return 0;
	if (n <= EXEC_SMALL)
		return remora_co_exec(ch, wrs, n);
	rc = remora_transport_caps(remora_chan_transport(ch), &caps);
	if (rc)
		return rc;
	if (n <= caps.max_batch)
		return remora_co_exec(ch, wrs, n);
	return exec_chunked(ch, wrs, n, caps.max_batch ? caps.max_batch : EXEC_SMALL);
}
