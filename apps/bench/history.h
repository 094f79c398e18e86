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
 *
 * Crashes: a transaction that writes is recorded as pending before its commit verbs and marked
 * committed after them, through a shared file mapping that survives a SIGKILL. A compute node
 * killed in between leaves a pending record whose outcome is unknown (the commit may have
 * landed, or the online recovery rolled it forward or back). The checker keeps a pending
 * transaction as committed exactly when the rest of the history or the final store shows one
 * of its versions, and drops it otherwise; both outcomes are accepted, nothing else is.
 */
#ifndef REMORA_APPS_HISTORY_H
#define REMORA_APPS_HISTORY_H

#include <stdbool.h>
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
	uint32_t flags; /* HIST_PENDING: recorded before its commit, outcome unknown */
	struct hist_op op[HIST_MAX_OPS];
};

#define HIST_PENDING 1u

/*
 * History files (host byte order): slots of rec_size bytes; slot 0 holds the header, slot
 * i + 1 record i. A record's state is its commit word, stored after the rest: 0 ends the file
 * (or is a record a SIGKILL cut short), and a record whose sum does not match is torn.
 */
#define HIST_MAGIC "RMHIST2"
#define HIST_VERSION 2
struct hist_file_hdr {
	char magic[8];
	uint32_t version;
	uint32_t rec_size;
	uint32_t buffered; /* 1: not crash_safe (records lost with a killed process) */
	uint32_t closed;   /* buffered: set by a clean close, so a killed log is refused */
};

enum hist_rec_state { HIST_REC_EMPTY, HIST_REC_PENDING, HIST_REC_COMMITTED };

struct hist_rec {
	struct hist_txn t;
	uint64_t sum;   /* hist_rec_sum(&t) */
	uint32_t state; /* enum hist_rec_state, written last */
	uint32_t _pad;
};

_Static_assert(sizeof(struct hist_op) == 24, "hist_op is a file layout");
_Static_assert(sizeof(struct hist_txn) == 16 + 24 * HIST_MAX_OPS, "hist_txn is a file layout");
_Static_assert(sizeof(struct hist_file_hdr) == 24, "hist_file_hdr is a file layout");
_Static_assert(sizeof(struct hist_rec) == sizeof(struct hist_txn) + 16, "hist_rec is a file layout");

uint64_t hist_rec_sum(const struct hist_txn *t);

/*
 * One coordinator's log. crash_safe: a window of HIST_WIN_RECS slots of its file, mapped
 * shared, so every record is in the page cache as soon as it is stored and survives a SIGKILL
 * of the process, pending records included. Otherwise committed records only, streamed through
 * a 1 MiB buffer (cheaper: a killed process loses the buffer). Memory stays bounded however
 * long the run either way.
 */
struct hist_log {
	char path[512];
	bool crash_safe;
	int fd;
	struct hist_rec *win; /* crash_safe: the mapped window, or NULL */
	uint64_t win_first;   /* slot of win[0] */
	FILE *f;              /* not crash_safe: the stream and its buffer */
	char *buf;
	uint64_t n;           /* records ended (committed) */
	bool undecided;       /* the pending record's commit has no verdict: kept, and last */
	int err;              /* first error */
};

/* Creates DIR/hist-cn<cn>-t<thread>-c<coro>.bin with its header. Returns 0 or -errno. */
int hist_log_open(struct hist_log *log, const char *dir, unsigned cn, unsigned thread,
		  unsigned coro, bool crash_safe);
/*
 * Records t as pending, before its commit verbs: the next append of the same txid marks it
 * committed; another pending record or append replaces it (that attempt did not commit).
 * 0, or the first error (the log is then incomplete). Nothing unless crash_safe.
 */
int hist_log_pending(struct hist_log *log, const struct hist_txn *t);
/* Records t as committed (or marks its pending record so); 0, or the first error. */
int hist_log_append(struct hist_log *log, const struct hist_txn *t);
/*
 * The commit of the pending record failed without a verdict (the recovery of this node decides
 * whether it committed): the record stays pending, also at a clean close, and nothing may
 * follow it (a later record fails with -EPROTO).
 */
void hist_log_undecided(struct hist_log *log);
/*
 * Closes the file, cut to its committed records: a pending record left at a clean close is an
 * attempt that did not commit, unless it is undecided. Returns 0, or -errno when any write
 * failed.
 */
int hist_log_close(struct hist_log *log);

/* A history in memory (every file of a directory, or records added by a test). */
struct hist_set {
	struct hist_txn *rec;
	size_t n, cap;
};

/* A workload's count of history records it failed to store: 0 when none, else 1 with the
 * check's message in msg (such a history cannot be checked). */
int hist_lost_msg(int64_t lost, char *msg, size_t msglen);

/* Removes the hist-*.bin files of dir (a previous run's would join this run's history):
 * 0 or -errno. */
int hist_dir_clear(const char *dir);

int hist_set_add(struct hist_set *s, const struct hist_txn *t);
/*
 * Adds every hist-*.bin of dir: its committed records, and pending ones with HIST_PENDING set.
 * A torn last record (a SIGKILL inside its store) is dropped. Returns 0, or -errno / -EPROTO
 * (malformed file, or a bad record before the last).
 */
int hist_set_load_dir(struct hist_set *s, const char *dir, char *err, size_t errlen);
void hist_set_free(struct hist_set *s);

struct hist_report {
	uint64_t txns;
	uint64_t reads, writes;
	uint64_t edges_wr, edges_ww, edges_rw;
	uint64_t violations;
	uint64_t pending;      /* pending records (a killed node's unfinished commits) */
	uint64_t pending_kept; /* of which the history or the store shows a version: committed */
	char msg[1024]; /* the first violation, or "serializable" */
};

/*
 * Checks the history. Pending transactions are kept as committed when a kept transaction read
 * or overwrote one of their versions, or final holds one; the others are dropped. final (may
 * be NULL) holds the writer id found in the store for keys
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
