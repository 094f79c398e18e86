/* SPDX-License-Identifier: MIT */
/* Counting workers of the atomics tests; see counting.h. */
#include <stdio.h>
#include <string.h>

#include "counting.h"

#define CW_CHECK(w, cond, ...)                                                                     \
	do {                                                                                       \
		if (!(cond)) {                                                                     \
			(w)->file = __FILE__;                                                      \
			(w)->line = __LINE__;                                                      \
			snprintf((w)->why, sizeof((w)->why), __VA_ARGS__);                         \
			goto out;                                                                  \
		}                                                                                  \
	} while (0)

static remora_gaddr ga(uint64_t off)
{
	return remora_gaddr_make(0, off);
}

/* CAS-increment: CAS cur -> cur + 1 until it sticks, learning the word from each failed CAS. */
static int cas_increment(struct remora_chan *ch, uint64_t off, uint32_t key, uint64_t *cur)
{
	for (;;) {
		uint64_t old = 0;
		int rc = remora_cas(ch, ga(off), key, *cur, *cur + 1, &old);

		if (rc)
			return rc;
		if (old == *cur) {
			*cur = old + 1;
			return 0;
		}
		*cur = old;
	}
}

void *cw_worker_main(void *arg)
{
	struct cw_worker *w = arg;
	struct remora_chan *ch = NULL;
	uint64_t cur = 0, mix = 0, shift = 8ull * w->field, fmask = 0xffull << (8 * w->field);
	int rc;

	rc = remora_chan_open(w->tp, &ch);
	CW_CHECK(w, rc == 0, "chan_open = %d", rc);
	for (unsigned i = 0; i < w->k; i++) {
		rc = remora_faa(ch, ga(CW_FAA_OFF), w->key, 1, NULL);
		CW_CHECK(w, rc == 0, "FAA = %d (%s)", rc, remora_strerror(rc));
		rc = cas_increment(ch, CW_CAS_OFF, w->key, &cur);
		CW_CHECK(w, rc == 0, "CAS = %d (%s)", rc, remora_strerror(rc));
		if (i % 2)
			rc = remora_faa(ch, ga(CW_MIX_OFF), w->key, 1, NULL);
		else
			rc = cas_increment(ch, CW_MIX_OFF, w->key, &mix);
		CW_CHECK(w, rc == 0, "mixed = %d (%s)", rc, remora_strerror(rc));
	}
	for (uint64_t v = 0; w->mcas && v < CW_KF; v++) {
		uint64_t old = 0;

		/* Only this worker writes its field, so the masked compare must always match. */
		rc = remora_mcas(ch, ga(CW_FLD_OFF), w->key, v << shift, fmask, (v + 1) << shift,
				 fmask, &old);
		CW_CHECK(w, rc == 0, "MCAS = %d (%s)", rc, remora_strerror(rc));
		CW_CHECK(w, ((old & fmask) >> shift) == v,
			 "field %u: MCAS saw %llu, expected %llu (an update was lost)", w->field,
			 (unsigned long long)((old & fmask) >> shift), (unsigned long long)v);
	}
out:
	remora_chan_close(ch);
	return NULL;
}

static uint64_t word(const uint8_t *base, uint64_t off)
{
	uint64_t v;

	memcpy(&v, base + off, 8);
	return v;
}

int cw_check(const uint8_t *base, unsigned workers, unsigned k, bool mcas, char *why,
	     size_t size)
{
	static const struct {
		uint64_t off;
		const char *what;
	} totals[] = {
		{ CW_FAA_OFF, "FAA total" },
		{ CW_CAS_OFF, "CAS-loop total" },
		{ CW_MIX_OFF, "FAA+CAS on one word: total" },
	};
	uint64_t want = (uint64_t)workers * k;

	for (unsigned i = 0; i < sizeof(totals) / sizeof(totals[0]); i++)
		if (word(base, totals[i].off) != want) {
			snprintf(why, size, "%s %llu, want %llu", totals[i].what,
				 (unsigned long long)word(base, totals[i].off),
				 (unsigned long long)want);
			return 1;
		}
	for (unsigned f = 0; mcas && f < CW_FIELDS; f++) {
		uint64_t v = (word(base, CW_FLD_OFF) >> (8 * f)) & 0xff;
		unsigned fwant = f < workers ? CW_KF : 0;

		if (v != fwant) {
			snprintf(why, size, "bit field %u holds %llu, want %u", f,
				 (unsigned long long)v, fwant);
			return 1;
		}
	}
	return 0;
}
