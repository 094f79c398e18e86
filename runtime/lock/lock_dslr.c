/* SPDX-License-Identifier: MIT */
/*
 * DSLR+: DSLR's ticket lock (Yoon et al., SIGMOD'18) with truncated exponential backoff. One
 * 8 B word of four 16-bit counters, MSB..LSB: max_x | max_s | n_x | n_s. An acquirer FAAs its
 * mode's max counter and is served when the now-serving counters reach the values it saw
 * (a writer waits for every earlier reader and writer, a reader for every earlier writer),
 * READing the word with backoff. Release FAAs its mode's now-serving counter.
 *
 * Counters stop at T = 0x8000 (docs/declock.md): a ticket is valid when both max counters it
 * saw are below T. The one acquirer whose FAA brings a counter to T knows the final counts; on
 * release it waits until every valid ticket is served and CASes the word to 0. Acquirers that
 * saw a counter at T or above (strays) READ until the word is reset, then take a new ticket.
 */
#include <errno.h>

#include "lock/lock.h"

#define T 0x8000u
#define F(v, sh) ((unsigned)((v) >> (sh)) & 0xffffu)
#define SH_NS 0
#define SH_NX 16
#define SH_MS 32
#define SH_MX 48
#define CROSSER (UINT64_C(1) << 62)

static size_t dslr_stride(unsigned cap_log2)
{
	(void)cap_log2;
	return 8;
}

static void dslr_image(const struct lock_svc *s, void *buf)
{
	(void)s;
	*(uint64_t *)buf = 0;
}

#define BACKOFF_CAP 256 /* yields */

static bool served(uint64_t v, enum lock_mode m, unsigned px, unsigned ps)
{
	return F(v, SH_NX) == px && (m == LOCK_S || F(v, SH_NS) == ps);
}

/* One ticket: 0 held (*tk filled), 1 a stray (retry after the reset), or an error. */
static int dslr_try(struct lock_cli *c, remora_gaddr a, enum lock_mode m, uint64_t *tk)
{
	uint64_t v, add = UINT64_C(1) << (m == LOCK_X ? SH_MX : SH_MS);
	unsigned px, ps, b = 1;
	int rc = lock_faa(c, a, add, &v, &c->st.acq_ops);

	if (rc)
		return rc;
	px = F(v, SH_MX);
	ps = F(v, SH_MS);
	if (px >= T || ps >= T) { /* a stray: wait for the reset, then take a new ticket */
		while (!rc && (F(v, SH_MX) >= T || F(v, SH_MS) >= T))
			rc = lock_backoff_read(c, &b, BACKOFF_CAP, a, &v, &c->st.reset_ops);
		return rc ? rc : 1;
	}
	*tk = LOCK_TICKET_UNORDERED;
	if ((m == LOCK_X ? px : ps) + 1 == T) /* the crossing ticket: reset on release */
		*tk |= CROSSER | (uint64_t)(px + (m == LOCK_X)) << 16 | (ps + (m == LOCK_S));
	while (!rc && !served(v, m, px, ps))
		rc = lock_backoff_read(c, &b, BACKOFF_CAP, a, &v, &c->st.acq_ops);
	return rc;
}

static int dslr_acquire(struct lock_cli *c, uint32_t lock, enum lock_mode m, struct lock_hold *h)
{
	remora_gaddr a = lock_addr(c->svc, lock);
	uint64_t ops0 = c->st.acq_ops, tk = 0;
	int rc, strays = 0;

	while ((rc = dslr_try(c, a, m, &tk)) == 1)
		strays++;
	if (rc)
		return rc;
	c->st.reset_acq += strays > 0;
	c->st.waited += c->st.acq_ops - ops0 > 1;
	if (!strays && c->st.acq_ops - ops0 > c->st.acq_ops_max)
		c->st.acq_ops_max = c->st.acq_ops - ops0;
	c->st.acquires++;
	*h = (struct lock_hold){ .lock = lock, .mode = (uint8_t)m, .ticket = tk };
	lock_emit(c, lock, tk & ~CROSSER, m, LOCK_EV_GRANT);
	return 0;
}

/* The crossing holder, after its release: wait for every valid ticket, then zero the word. */
static int dslr_reset(struct lock_cli *c, remora_gaddr a, uint64_t tk)
{
	unsigned mx = (unsigned)(tk >> 16) & 0xffffu, ms = (unsigned)tk & 0xffffu, b = 1;
	uint64_t v = 0, old;
	int rc = lock_read(c, a, &v, 8, &c->st.reset_ops);

	while (!rc && (F(v, SH_NX) != mx || F(v, SH_NS) != ms))
		rc = lock_backoff_read(c, &b, BACKOFF_CAP, a, &v, &c->st.reset_ops);
	while (!rc) {
		rc = lock_cas(c, a, v, 0, &old, &c->st.reset_ops);
		if (old == v)
			break;
		v = old;
	}
	c->st.resets += !rc;
	return rc;
}

static int dslr_release(struct lock_cli *c, const struct lock_hold *h)
{
	remora_gaddr a = lock_addr(c->svc, h->lock);
	uint64_t old;
	int rc = lock_faa(c, a, UINT64_C(1) << (h->mode == LOCK_X ? SH_NX : SH_NS), &old,
			  &c->st.rel_ops);

	if (!rc && (h->ticket & CROSSER))
		rc = dslr_reset(c, a, h->ticket);
	return rc;
}

const struct lock_ops lock_type_dslr = {
	.size = sizeof(struct lock_ops),
	.name = "dslr",
	.stride = dslr_stride,
	.image = dslr_image,
	.acquire = dslr_acquire,
	.release = dslr_release,
};
