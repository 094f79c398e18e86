/* SPDX-License-Identifier: MIT */
/*
 * Transaction histories and a serializability checker for them.
 *
 * The kvs workload, in history mode, makes every write a read-modify-write that stores the
 * writer's unique transaction id and the id of the version it overwrote. Each committed
 * transaction is recorded as {txid, [(key, version read, written?)...]}; one file per
 * coordinator. The checker then knows, without any clock:
 *   - the version order of every key (a chain linked by "prev" ids, starting at 0 = loaded),
 *   - wr edges  W -> T   T read the version W wrote,
 *   - ww edges  W -> T   T overwrote W's version (T read it first),
 *   - rw edges  T -> W'  T read version W, and W' wrote the version after W,
 * and the history is conflict-serializable iff that graph is acyclic (Adya). Before the graph
 * it checks the chains themselves: two committed writers of the same version (a lost update),
 * a read of a version no committed transaction wrote (dirty or torn read), and, given the
 * store's final contents, that the last version of every key is the end of its chain.
 */
#ifndef REMORA_APPS_HISTORY_H
#define REMORA_APPS_HISTORY_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define HIST_MAX_OPS 8

struct hist_op {
	uint64_t key;
	uint64_t seen;  /* id of the writer of the version read (0: the loaded version) */
	uint32_t write; /* 1: this transaction wrote the key (its prev is seen) */
	uint32_t _pad;
};

struct hist_txn {
	uint64_t txid;
	uint32_t nops;
	uint32_t _pad;
	struct hist_op op[HIST_MAX_OPS];
};

/* History files: a header, then struct hist_txn records (host byte order). */
#define HIST_MAGIC "RMHIST1"
struct hist_file_hdr {
	char magic[8];
	uint32_t version;
	uint32_t rec_size;
};

_Static_assert(sizeof(struct hist_op) == 24, "hist_op is a file layout");
_Static_assert(sizeof(struct hist_txn) == 16 + 24 * HIST_MAX_OPS, "hist_txn is a file layout");
_Static_assert(sizeof(struct hist_file_hdr) == 16, "hist_file_hdr is a file layout");

/*
 * One coordinator's log, streamed to its file through a 1 MiB buffer: memory stays bounded
 * however long the run (a write system call per ~5000 records, only in history mode).
 */
struct hist_log {
	char path[512];
	FILE *f;
	char *buf;
	int err;      /* first write error */
};

/* Creates DIR/hist-cn<cn>-t<thread>-c<coro>.bin with its header. Returns 0 or -errno. */
int hist_log_open(struct hist_log *log, const char *dir, unsigned cn, unsigned thread,
		  unsigned coro);
/* Appends one record; 0, or the first write error (the log is then incomplete). */
int hist_log_append(struct hist_log *log, const struct hist_txn *t);
/* Flushes and closes the file. Returns 0, or -errno when any write failed. */
int hist_log_close(struct hist_log *log);

/* A history in memory (every file of a directory, or records added by a test). */
struct hist_set {
	struct hist_txn *rec;
	size_t n, cap;
};

int hist_set_add(struct hist_set *s, const struct hist_txn *t);
/* Adds every hist-*.bin of dir. Returns 0, or -errno / -EPROTO (malformed file). */
int hist_set_load_dir(struct hist_set *s, const char *dir, char *err, size_t errlen);
void hist_set_free(struct hist_set *s);

struct hist_report {
	uint64_t txns;
	uint64_t reads, writes;
	uint64_t edges_wr, edges_ww, edges_rw;
	uint64_t violations;
	char msg[1024]; /* the first violation, or "serializable" */
};

/*
 * Checks the history. final (may be NULL) holds the writer id found in the store for keys
 * 0 .. nkeys-1 after the run. Returns 0 when serializable and consistent with final, 1 on a
 * violation (rep->msg names it, with a cycle when there is one), or -ENOMEM.
 */
int hist_check(const struct hist_set *s, const uint64_t *final, uint64_t nkeys,
	       struct hist_report *rep);

/*
 * The same for snapshot isolation: lost updates, reads of versions never written, G1c (a
 * cycle of wr/ww edges) and G-single (a cycle with exactly one rw edge) are violations; write
 * skew (cycles with two consecutive rw edges) is allowed. Cycles whose rw edges are all
 * separated by other edges are not looked for. Returns as hist_check.
 */
int hist_check_si(const struct hist_set *s, const uint64_t *final, uint64_t nkeys,
		  struct hist_report *rep);

/* Formats a transaction id as cn.thread.coro#seq (for messages). */
void hist_fmt_txid(uint64_t txid, char *buf, size_t len);

#endif
