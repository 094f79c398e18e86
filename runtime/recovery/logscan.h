/* SPDX-License-Identifier: MIT */
/*
 * runtime/recovery, the log scan: what the recoveries of the engine's log format (the OCC
 * core: FORD, Pandora; OOCC and its ablations; declock) share. It reads log slots in large
 * READs, keeps one copy of every valid logged transaction and the place of every
 * valid-looking header, reads a log's records on every replica, tells a record image's
 * state against the log, and zeroes the headers at the end. The protocol decides (undo or
 * redo); the scan only gathers. Verbs are batched: queued, then run by logscan_flush.
 */
#ifndef REMORA_RECOVERY_LOGSCAN_H
#define REMORA_RECOVERY_LOGSCAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "recovery.h"
#include "store/store.h"

#define LOGSCAN_CHUNK (1u << 20) /* bytes per READ of the log and record areas */
#define LOGSCAN_BATCH 256u	 /* verbs per store_exec */

/* One distinct logged transaction (its copies on several nodes are identical). */
struct logscan_log {
	uint64_t tx_id;
	uint32_t len;
	uint32_t n;
	unsigned char *rec; /* header and entries, as logged */
	int verdict;	    /* the protocol's decision (its own enum; 0 at first) */
};

/* Where a valid-looking log header lies, to invalidate it. */
struct logscan_slot {
	uint16_t node;
	uint64_t off;
};

struct logscan {
	const struct store_db *st;
	struct remora_chan *ch;
	struct recovery_report *rep; /* log_slots, log_copies, logs_invalidated */
	char *err;		     /* one line on failure */
	size_t errlen;
	struct logscan_log *logs;
	size_t nlogs, caplogs;
	struct logscan_slot *slots;
	size_t nslots, capslots;
	struct remora_wr wrs[LOGSCAN_BATCH];
	unsigned nwr;
	unsigned char *buf; /* LOGSCAN_CHUNK bytes, or one log slot if larger */
	size_t buflen;
	unsigned char *scratch; /* one log slot: a record with its checksum field zeroed */
};

/* 0 or -ENOMEM (with its line in err). logscan_fini frees what init and the scan took. */
int logscan_init(struct logscan *s, const struct store_db *st, struct remora_chan *ch,
		 struct recovery_report *rep, char *err, size_t errlen);
void logscan_fini(struct logscan *s);

/* Writes one line into s->err and returns code. */
int logscan_err(struct logscan *s, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Batched verbs; a full batch runs first. Writes are DURABLE: the next step may rely on them
 * after a power failure. 0 or the verb's error with its line. */
int logscan_flush(struct logscan *s);
int logscan_queue(struct logscan *s, const struct remora_wr *wr);
int logscan_read(struct logscan *s, uint16_t node, uint64_t off, void *dst, uint32_t len);
int logscan_write(struct logscan *s, uint16_t node, uint64_t off, const void *src, uint32_t len);
int logscan_cas(struct logscan *s, uint16_t node, uint64_t off, uint64_t cmp, uint64_t swap,
		uint64_t *old);

/* Reads log slots [first, first + nslots) of node m: notes every valid-looking header and
 * keeps every valid transaction once. logscan_read_node: all of node m's slots. */
int logscan_read_slots(struct logscan *s, uint16_t m, uint64_t first, uint64_t nslots);
int logscan_read_node(struct logscan *s, uint16_t m);

/* Entry i of l and its image. */
const struct store_log_ent *logscan_ent(const struct logscan_log *l, unsigned i,
					const unsigned char **img);
/* The table of a logged record, if the entry names a real record slot of a real table. */
const struct store_table *logscan_ent_table(const struct store_db *st,
					    const struct store_log_ent *e);

enum logscan_state {
	LOGSCAN_OLD,   /* the logged old version: untouched by this transaction */
	LOGSCAN_NEW,   /* the logged new version */
	LOGSCAN_OTHER, /* neither: a later transaction wrote it */
};

struct logscan_img {
	enum logscan_state s;
	bool ok; /* decodes (checksum) and holds the logged key */
};

struct logscan_img logscan_classify(const struct store_db *st, const struct store_table *t,
				    const struct store_log_ent *e, const unsigned char *img);

/* Reads every replica of every record of l (all entries sane) into *imgs, malloc'ed:
 * n x replicas x stride bytes, record by record. */
int logscan_read_replicas(struct logscan *s, const struct logscan_log *l, unsigned char **imgs);

/*
 * Writes l's logged images over every replica of its records whose image is not already the
 * logged one in state want (decoding, with the logged key), nor, with keep_other, a later
 * transaction's (LOGSCAN_OTHER). Whole images, or with lock_stays only [write_off, stride):
 * the lock word as it is. Counted in rep->images_restored, written unless check; flushed.
 */
int logscan_restore(struct logscan *s, const struct logscan_log *l, enum logscan_state want,
		    bool keep_other, bool lock_stays, bool check);

/*
 * The verdicts a recovery of this log format gives its logs (logscan_log.verdict). What they
 * write is the protocol's (undo or redo images); the counts in the report are shared.
 */
enum logscan_verdict {
	LOGSCAN_BAD,	  /* names records that do not exist: left alone (0: the first verdict) */
	LOGSCAN_FINISHED, /* the transaction had finished: nothing to do */
	LOGSCAN_FORWARD,  /* committed: its new images stand (or are written) */
	LOGSCAN_BACK,	  /* aborted: its old images stand (or are written) */
};

typedef int (*logscan_log_fn)(void *ctx, struct logscan_log *l);

/*
 * Decides every log not LOGSCAN_BAD (those count in rep->logs_bad) with decide, counts the
 * verdicts, then runs apply on every log whose verdict is apply_on; logs in scan order, up to
 * the first error, which is returned. The protocol marks the logs it can decide first.
 */
int logscan_decide_all(struct logscan *s, logscan_log_fn decide, enum logscan_verdict apply_on,
		       logscan_log_fn apply, void *ctx);

/*
 * A whole-cluster recovery of the engine's log format: reads every node's logs, lets decide
 * settle them (its verdicts, undo or redo images written), zeroes the logs, then releases
 * every lock word (sweep.h); counts and times go into s->rep. 0 or an error with its line.
 */
int logscan_recover_cluster(struct logscan *s, bool check, int (*decide)(void *ctx), void *ctx);

/* Zeroes every noted header (counted in rep->logs_invalidated; written unless check), then
 * one persist point per node. */
int logscan_invalidate(struct logscan *s, bool check);

#endif
