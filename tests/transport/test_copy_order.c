/* SPDX-License-Identifier: MIT */
/*
 * Host backends (shm, pmem): a READ that sees the last word of a concurrent WRITE sees every
 * earlier word of it too (transport/cpuverbs.h: WRITE stores the last word last, READ loads it
 * first). OOCC keeps its lock word last, so this is what keeps a READ from returning old data
 * under a newly cleared lock (docs/oocc.md, "Torn reads"). Not a transport-wide promise: rdma
 * relies on the NIC's in-order placement and is skipped.
 *
 * The negative control tears on purpose: the writer posts the last word and the rest as two
 * WRITEs, last word first (a copy without the order); the same check must then see a READ
 * with the new last word over older words.
 */
#include <pthread.h>
#include <stdbool.h>
#include <string.h>
#include <time.h>

#include "tutil.h"

#define WORDS 8
#define RUN_NS 1000000000ull /* positive: 1 s of READs; negative: up to 10 s */

static struct tu_ctx c;
static volatile bool stop;

TestSuite(copy_order, .fini = tu_fini, .timeout = TU_TIMEOUT);

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static remora_gaddr ga(uint64_t off)
{
	return remora_gaddr_make(0, off);
}

struct wargs {
	struct remora_chan *ch;
	bool reversed;
};

static void *writer(void *arg)
{
	struct wargs *a = arg;
	uint64_t img[WORDS];
	uint32_t k = c.mn[0].key;

	for (uint64_t g = 1; !stop; g++) {
		struct remora_wr w[2];

		for (unsigned i = 0; i < WORDS; i++)
			img[i] = g;
		if (a->reversed) {
			w[0] = tu_wr_write(ga(4096 + 8 * (WORDS - 1)), k, &img[WORDS - 1], 8);
			w[1] = tu_wr_write(ga(4096), k, img, 8 * (WORDS - 1));
			remora_exec(a->ch, w, 1);
			for (volatile unsigned spin = 0; spin < 2000; spin++)
				; /* a slow NIC between the two halves */
			remora_exec(a->ch, w + 1, 1);
		} else {
			w[0] = tu_wr_write(ga(4096), k, img, sizeof(img));
			remora_exec(a->ch, w, 1);
		}
	}
	return NULL;
}

/* READs while a writer runs; returns how many READs saw the last word newer than another. */
static uint64_t torn_reads(bool reversed)
{
	struct wargs a = { .reversed = reversed };
	uint64_t img[WORDS], torn = 0;
	pthread_t t;

	if (strcmp(tu_backend(), "shm") && strcmp(tu_backend(), "pmem"))
		cr_skip_test("copy order is a host-backend property (%s)", tu_backend());
	tu_open(&c, 0, 1, TU_POOL_BYTES);
	memset(c.mn[0].base + 4096, 0, sizeof(img));
	cr_assert_eq(remora_chan_open(c.tp, &a.ch), 0);
	stop = false;
	cr_assert_eq(pthread_create(&t, NULL, writer, &a), 0);
	for (uint64_t end = now_ns() + (reversed ? 10 : 1) * RUN_NS;
	     now_ns() < end && !(reversed && torn);) {
		struct remora_wr w = tu_wr_read(ga(4096), c.mn[0].key, img, sizeof(img));

		cr_assert_eq(remora_exec(c.ch, &w, 1), 0);
		for (unsigned i = 0; i + 1 < WORDS; i++)
			if (img[i] < img[WORDS - 1]) {
				torn++;
				break;
			}
	}
	stop = true;
	pthread_join(t, NULL);
	remora_chan_close(a.ch);
	return torn;
}

Test(copy_order, last_word_seen_means_all_seen)
{
	uint64_t torn = torn_reads(false);

	cr_assert_eq(torn, 0, "%llu READs saw a WRITE's last word without its earlier words",
		     (unsigned long long)torn);
}

Test(copy_order, negative_control_last_word_first_is_caught, .timeout = 120)
{
	cr_assert_gt(torn_reads(true), 0, "the check never saw the tear it was given");
}
