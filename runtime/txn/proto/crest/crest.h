/* SPDX-License-Identifier: MIT */
/*
 * CREST (cell-level concurrency control for disaggregated transactions): records are split into
 * cells, each with a lock bit and an epoch in the record's 64-byte header (store/codec_cell.c).
 * One masked-CAS locks every cell a transaction writes in a record, one READ of the header
 * validates every cell it read there. docs/crest.md has the protocol and its decisions.
 */
#ifndef REMORA_TXN_CREST_H
#define REMORA_TXN_CREST_H

#include <stdbool.h>
#include <stdint.h>

#include "txn/protocol.h"
#include "txn/txn.h"

/* The EN wraparound guard: past this many microseconds since the first READ, validation
 * compares whole version words (EN:16 | TS:48) instead of the 16-bit epochs. */
#define CREST_EN_WRAP_US 65536u

struct crest_db {
	bool cell_level;  /* false: crest_record, every access takes every cell */
	uint64_t clock;   /* Lamport clock of commit timestamps (atomic max) */
};

struct crest_obj {
	uint64_t locked;     /* cell lock bits this transaction holds */
	uint64_t want;       /* bits the lock masked-CAS of this round asks for */
	uint64_t mcas_old;   /* its result */
	uint64_t unlock_old; /* result of the unlock masked-CAS (tracked) */
	uint64_t have;       /* cells whose epoch and version were recorded */
	uint64_t used;       /* the header's used word as fetched */
	uint64_t slot_word;  /* insert: the index slot value */
	uint64_t ver[CODEC_CELL_MAX]; /* version words of the cells as fetched */
	unsigned char *val;  /* the value as fetched, assembled from the cells */
	unsigned char *chk;  /* validation READ target (header line, or the record) */
	uint32_t retries;    /* torn or inconsistent READs in a row */
};

struct crest_tx {
	uint64_t ts_seen;    /* largest TS of a cell read */
	uint64_t t_first_us; /* first READ of the transaction (0: none yet) */
};

struct crest_coord {
	unsigned char *logbuf;
	int stranded;
};

/* Bytes of a log entry's image for these written cells: the used word, then per cell its
 * version and value padded to 8 bytes. */
static inline uint32_t crest_log_len(const struct codec_geom *g, uint64_t cells)
{
	uint32_t len = 8;

	for (unsigned c = 0; c < g->nparts; c++) {
		uint32_t off, clen;

		if (!(cells >> c & 1))
			continue;
		codec_cell_span(g->cells, g->value_size, c, &off, &clen);
		len += 8 + ((clen + 7) & ~7u);
	}
	return len;
}

/* Test hooks: microseconds added to the clock the EN wraparound guard reads, and its
 * threshold (CREST_EN_WRAP_US; a test of the epoch check alone sets it out of reach, since a
 * loaded machine may take 65 ms between a READ and validation). */
extern uint64_t crest_clock_skew_us;
extern uint64_t crest_en_wrap_us;

int crest_recover_cluster(const struct store_db *st, struct remora_chan *ch, uint32_t flags,
			  struct recovery_report *rep, char *err, size_t errlen);

#endif
