/* SPDX-License-Identifier: MIT */
/*
 * The lock service: shared/exclusive locks that live in memory-node memory, taken and released
 * by coordinator coroutines of compute nodes. Lock types are plug-ins behind one ops table
 * (struct lock_ops; the registry is generated from runtime/lock/meson.build): DecLock's CQL
 * ("declock"), a CAS reader-writer spinlock ("caslock"), DSLR+ tickets with backoff ("dslr").
 * Ownership transfer between compute nodes (DecLock's grants, resets) goes over the RPC layer
 * of <remora/rpc.h>. Layouts, widths and decisions: docs/declock.md.
 *
 * One struct lock_svc per compute-node process, one struct lock_cli per coordinator. v1 limit:
 * one worker (one RPC endpoint) per compute node; any number of coroutines on it.
 */
#ifndef REMORA_RUNTIME_LOCK_H
#define REMORA_RUNTIME_LOCK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <remora/rpc.h>
#include <remora/transport.h>

enum lock_mode { LOCK_S = 0, LOCK_X = 1 };

/* What an observer hears (the linearizability checker of tests and `remora lockbench`). */
enum lock_event {
	LOCK_EV_ENQ,     /* the acquisition got its place: ticket = epoch << 32 | FAA index */
	LOCK_EV_GRANT,   /* the caller holds the lock from now on */
	LOCK_EV_ABORT,   /* the place of ticket was wiped by a reset; the acquisition retries */
	LOCK_EV_RELEASE, /* the caller stops holding the lock (emitted before any verb) */
};
/* A ticket with this bit carries no order (lock types that are not FIFO by FAA). */
#define LOCK_TICKET_UNORDERED (UINT64_C(1) << 63)

typedef void (*lock_observe_fn)(void *arg, unsigned coord, uint32_t lock, uint64_t ticket,
				enum lock_mode m, enum lock_event ev);

struct lock_svc_cfg {
	const char *type;          /* a registered lock type (lock_type_names()) */
	struct remora_rpc *rpc;    /* this process's RPC layer (handlers registered by create) */
	uint16_t rpc_op;           /* first of the 2 RPC op codes the service takes; 0: 60 */
	uint16_t cn, n_cn;         /* this compute node, and how many there are (ids 0..n_cn-1) */
	remora_gaddr base;         /* the lock table on one memory node */
	uint32_t rkey;
	uint32_t n_locks;
	unsigned cap_log2;         /* CQL: C = 2^cap_log2 entries (0..10; default 3 when 0 ...) */
	bool cap_set;              /* ... set this to use cap_log2 = 0 (C = 1) */
	unsigned ver_bits;         /* CQL: M, 2..16; 0: 16 */
	unsigned timeout_ms;       /* a waiter's bound before it resets the lock; 0: 200 */
	unsigned entry_delay_us;   /* tests: a random delay up to this before an entry WRITE */
	uint64_t mutate;           /* switches of layer lock (runtime/mutate/mutate.h) */
	remora_gaddr clock;        /* hierarchical types: the clock-sync counter (8 B, zeroed) */
	bool has_clock;            /* ... if given (else each node keeps its own clock base) */
	lock_observe_fn observe;   /* may be NULL */
	void *observe_arg;
	/*
	 * Nodes of the service per compute-node process (0: 1). With k, node n is worker n % k of
	 * compute node n / k: a process whose k workers each run a service of their own (one RPC
	 * endpoint each) as k nodes of one cluster-wide service. Node n then takes the op codes
	 * rpc_op + 2 (n % k) and the next one (rpc_op is the base of every worker).
	 */
	uint16_t node_workers;
};

/* Counters of one client (exact: every verb the service posts is counted). */
struct lock_stats {
	uint64_t acquires;     /* acquisitions granted */
	uint64_t waited;       /* of which waited for a grant or a turn */
	uint64_t acq_ops;      /* memory-node verbs posted by acquisitions (resets excluded) */
	uint64_t acq_ops_max;  /* the most one acquisition posted (resets excluded) */
	uint64_t releases;
	uint64_t rel_ops;      /* memory-node verbs posted by releases (refetches included) */
	uint64_t refetches;    /* queue READs a release added to its first one */
	uint64_t reset_ops;    /* verbs of resets and of waiting for them */
	uint64_t resets;       /* resets this client performed */
	uint64_t overflows;    /* acquisitions that found the queue full (and reset it) */
	uint64_t wraps;        /* acquisitions whose place's version wrapped (and reset) */
	uint64_t reset_acq;    /* acquisitions that met a reset (aborted once or more) */
	uint64_t timeouts;     /* waits that ran out of time */
	uint64_t grants_sent;  /* grant messages (local or remote) */
	uint64_t grants_dropped; /* grants received that matched no waiter of their epoch */
	uint64_t grants_lost;  /* grants this client could not deliver (node down or silent) */
	uint64_t local_grants; /* hierarchical: acquisitions served by this node, 0 verbs */
	uint64_t prefetch_ops; /* hierarchical: READs of a queue for its earliest waiter */
	uint64_t sync_ops;     /* hierarchical: clock-sync verbs */
	/*
	 * X releases that reset because a waiting reader's slot was reused: readers that joined at
	 * once behind it (wcnt 0) popped its place and the head went C places on before its entry
	 * was seen. Possible with any C (docs/declock.md, section 1.3).
	 */
	uint64_t reader_passed;
};

struct lock_svc;
struct lock_cli;

/* A held lock, filled by lock_acquire and given back to lock_release. */
struct lock_hold {
	uint32_t lock;
	uint8_t mode;
	uint8_t epoch;
	uint64_t ticket;
};

/*
 * Creates the service of this compute node: registers its RPC handlers (call it before any
 * endpoint of cfg->rpc opens). Returns 0, -EINVAL (bad cfg; a line in lock_errmsg()),
 * -ENOENT (unknown type), -ENOMEM.
 */
int lock_svc_create(const struct lock_svc_cfg *cfg, struct lock_svc **out);
void lock_svc_destroy(struct lock_svc *s);
/*
 * This node stops taking part (it is being shut down, or a test plays its death): acquires
 * fail at once with -ECANCELED, waits end, releases post nothing. Any thread.
 */
void lock_svc_shutdown(struct lock_svc *s);
/*
 * The control plane's verdict on compute node cn (dead or fenced, or back), as given to
 * remora_rpc_set_down: a reset stops waiting for a node that is down, and takes over a reset
 * whose resetter is down. Until then a silent node is waited for. Any thread.
 */
void lock_svc_node_down(struct lock_svc *s, unsigned cn, bool down);
bool lock_node_is_down(const struct lock_svc *s, unsigned cn);
/* The one-line reason of this thread's last lock_svc_create failure. */
const char *lock_errmsg(void);

/* Bytes one lock takes on the memory node for type (with cap_log2 for CQL); 0: unknown type. */
size_t lock_type_stride(const char *type, unsigned cap_log2);
/* NULL-terminated list of the lock types built. */
const char *const *lock_type_names(void);

/*
 * A coordinator's client: verbs go through ch, grants come through ep (the worker's endpoint;
 * may be NULL with n_cn 1), coord is the coroutine's index on that worker (< 1024).
 */
int lock_cli_open(struct lock_svc *s, struct remora_chan *ch, struct remora_rpc_ep *ep,
		  unsigned coord, struct lock_cli **out);
void lock_cli_close(struct lock_cli *c);
/* Writes every lock's initial image (one client of one compute node, before any acquire). */
int lock_format(struct lock_cli *c);

/*
 * Takes lock in mode m. Returns 0 (held: h filled), -ETIMEDOUT (no grant within the
 * timeout, even after resets; the lock is not held), or a verb's error. Aborts by a reset are
 * retried inside.
 */
int lock_acquire(struct lock_cli *c, uint32_t lock, enum lock_mode m, struct lock_hold *h);
/*
 * lock_acquire, with n verbs riding on the acquisition's first doorbell to the lock's own
 * words, after its verbs (the FORD artifact's speculative READ: docs/declock.md, section 8).
 * *ride says what they saw: LOCK_RIDE_VALID, memory as of the grant (that doorbell completed
 * without error and decided the acquisition: no verb and no wait came after it; every rider
 * goes to the lock table's memory node, whose connection executes them after the lock's
 * atomic); LOCK_RIDE_STALE, posted but possibly earlier than the grant (read again);
 * LOCK_RIDE_NONE, not posted (riders to another node, more than LOCK_RIDERS_MAX, or an
 * acquisition that touched none of the lock's words, as a local hand-off). Riders keep their
 * own rkeys. Verbs to other words (a clock sync) never carry them.
 */
#define LOCK_RIDERS_MAX 8u
enum lock_ride { LOCK_RIDE_NONE, LOCK_RIDE_STALE, LOCK_RIDE_VALID };
int lock_acquire_riding(struct lock_cli *c, uint32_t lock, enum lock_mode m, struct lock_hold *h,
			const struct remora_wr *riders, unsigned n, enum lock_ride *ride);
/* Gives h's lock back. 0 or a verb's error (the lock counts as released either way). */
int lock_release(struct lock_cli *c, const struct lock_hold *h);

void lock_cli_stats(const struct lock_cli *c, struct lock_stats *out);
void lock_stats_add(struct lock_stats *dst, const struct lock_stats *src);

/* The memory-node address and key of lock's first word (for a critical section's object). */
remora_gaddr lock_addr(const struct lock_svc *s, uint32_t lock);

/* ---- for the lock types (lock_*.c) ------------------------------------------------------- */

#define LOCK_MAX_COORD 1024u
#define LOCK_MAX_DEFER 64u

enum lock_policy { LOCK_FLAT, LOCK_TF, LOCK_PF };

/* Hierarchical mode: a coordinator waiting in a compute node's local queue (on its stack). */
enum lock_lw_state { LOCK_LW_WAIT, LOCK_LW_LOCAL, LOCK_LW_REACQ };
struct lock_lwait {
	struct lock_lwait *next;
	uint8_t mode, state;
	uint16_t ts;
};
enum lock_ll_state { LOCK_LL_FREE, LOCK_LL_SHARED, LOCK_LL_EXCL, LOCK_LL_PENDING };
/* One lock of a compute node's local table: at most one CQL entry per compute node. */
struct lock_local {
	struct lock_lwait *head, *tail;
	struct lock_hold cql;  /* the node's CQL hold, shared by its local holders */
	uint16_t holders;      /* local holders (readers share) */
	uint16_t rts;          /* earliest remote waiter's timestamp ... */
	bool rts_set;          /* ... when known (from a grant or a prefetch) */
	bool cqlheld;
	uint8_t state, cql_mode;
};

enum lock_wait_state { LOCK_W_IDLE, LOCK_W_WAITING, LOCK_W_GRANTED, LOCK_W_ABORTED };

/* A coordinator waits on at most one lock at a time: its mailbox. */
struct lock_wait {
	uint32_t lock;
	uint8_t epoch;
	uint8_t state; /* enum lock_wait_state */
	uint16_t rts;  /* the earliest remote waiter's timestamp a grant carried ... */
	bool rts_set;  /* ... if it carried one */
	uint32_t place; /* CQL: lock_place_tag of the place its entry is at (0: none yet) */
};

struct lock_ops {
	uint32_t size; /* sizeof(struct lock_ops) */
	const char *name;
	uint8_t policy; /* enum lock_policy: hierarchical types keep a local lock table */
	size_t (*stride)(unsigned cap_log2);
	/* The initial image of one lock (stride bytes). */
	void (*image)(const struct lock_svc *s, void *buf);
	int (*acquire)(struct lock_cli *c, uint32_t lock, enum lock_mode m, struct lock_hold *h);
	int (*release)(struct lock_cli *c, const struct lock_hold *h);
};

struct lock_svc {
	struct lock_svc_cfg cfg;   /* cfg.rpc_op: this node's first op code */
	uint16_t op_base;          /* the op code of worker 0's service (node_workers) */
	const struct lock_ops *ops;
	size_t stride;
	unsigned c, cap, m_bits; /* CQL: log2 C, C, M */
	uint8_t *epoch;          /* per lock: this node's reset epoch */
	uint16_t *holders;       /* per lock: this node's holders */
	struct lock_local *local; /* hierarchical types: the local lock table */
	int down;                 /* lock_svc_shutdown was called */
	uint64_t down_cn;         /* compute nodes the control plane declared down (bit per id) */
	uint64_t clock_base, last_sync; /* hierarchical: timestamps count µs from clock_base */
	struct lock_cli *clients[LOCK_MAX_COORD];
	struct remora_rpc_ep *ep;
	struct {
		bool used;
		uint32_t lock;
		struct remora_rpc_token t;
	} deferred[LOCK_MAX_DEFER];
};

struct lock_cli {
	struct lock_svc *svc;
	struct remora_chan *ch;
	struct remora_rpc_ep *ep;
	unsigned coord;
	struct lock_wait w;
	struct lock_stats st;
	uint64_t rng;
	uint64_t *qbuf; /* a queue snapshot (CQL) */
	uint32_t succ_lock, succ; /* shiftlock: the writer queued behind this one (0: none yet) */
	uint32_t x_held;          /* shiftlock: the lock held in X + 1 (0: none); one at a time */
	struct {                  /* lock_acquire_riding: verbs for the lock's first doorbell */
		const struct remora_wr *wrs;
		unsigned n;
		remora_gaddr lo, hi;  /* the lock's words */
		int rc;               /* of the doorbell that carried them */
		bool posted, later;   /* ... and a verb or a wait after it */
	} ride;
};

/* Posts n verbs and waits (parks in a coroutine); adds n to *count. */
int lock_exec(struct lock_cli *c, struct remora_wr *wrs, unsigned n, uint64_t *count);
/* One 8 B atomic; *old gets the previous value. */
int lock_faa(struct lock_cli *c, remora_gaddr a, uint64_t add, uint64_t *old, uint64_t *count);
int lock_cas(struct lock_cli *c, remora_gaddr a, uint64_t cmp, uint64_t swp, uint64_t *old,
	     uint64_t *count);
int lock_read(struct lock_cli *c, remora_gaddr a, void *dst, uint32_t len, uint64_t *count);
void lock_emit(struct lock_cli *c, uint32_t lock, uint64_t ticket, enum lock_mode m,
	       enum lock_event ev);
/* Lets the other coroutines run (a pause of a backoff or a wait). */
void lock_pause(struct lock_cli *c, unsigned spins);
/*
 * One step of a spinning lock's truncated exponential backoff: a random pause of up to *b
 * yields, then *b doubles up to cap. -ECANCELED once the service is shut down (a spinner on a
 * dead holder's lock then ends), else 0.
 */
int lock_backoff(struct lock_cli *c, unsigned *b, unsigned cap);
/* lock_backoff, then an 8 B READ of the lock word at a into *v (its verb counted in *count). */
int lock_backoff_read(struct lock_cli *c, unsigned *b, unsigned cap, remora_gaddr a,
		      uint64_t *v, uint64_t *count);
uint64_t lock_now_ns(void);
uint64_t lock_rand(struct lock_cli *c);
/* Opens the mailbox for lock at the node's current epoch (before the FAA that enqueues). */
void lock_wait_arm(struct lock_cli *c, uint32_t lock);
/*
 * Waits for the mailbox to change: LOCK_W_GRANTED, LOCK_W_ABORTED, or LOCK_W_WAITING when
 * timeout_ms passed. Never touches a memory node (unless a mutation says so: poll_addr).
 */
int lock_wait_grant(struct lock_cli *c, unsigned timeout_ms, remora_gaddr poll_addr);
/*
 * Sends a grant to coordinator coord of compute node cn for lock at epoch, with the earliest
 * remaining remote waiter's timestamp rts (-1: none). 0 or an error.
 */
int lock_grant(struct lock_cli *c, uint32_t lock, unsigned cn, unsigned coord, uint8_t epoch,
	       int32_t rts);
/*
 * The same for the waiter at one CQL place (tag: lock_place_tag of its index): a waiter at
 * another place, or with no entry yet, drops it. Epochs restart at 0 in every process, so a
 * grant left over from a previous incarnation (a message segment that outlived a whole-cluster
 * crash) can match lock, coordinator and epoch of a new waiter; the place tells them apart.
 */
int lock_grant_place(struct lock_cli *c, uint32_t lock, unsigned cn, unsigned coord,
		     uint8_t epoch, int32_t rts, uint32_t tag);
/* A CQL place index as grants and mailboxes name it: never 0 (0 names no place). */
static inline uint32_t lock_place_tag(uint64_t i)
{
	return (uint32_t)(i & 0x7fffffffu) + 1u;
}
/*
 * After winning the reset CAS: raises the lock's epoch on every live compute node, aborts
 * their waiters and waits until no node holds the lock at the old epoch.
 */
int lock_reset_broadcast(struct lock_cli *c, uint32_t lock);
/* A holder left: counts it, and answers a reset that waited for the node's last holder. */
void lock_holder_gone(struct lock_svc *s, uint32_t lock);
bool lock_mut(const struct lock_svc *s, int id);
bool lock_down(const struct lock_svc *s);
/* Wrap-aware order of 16-bit timestamps: a is earlier than b (a larger gap than 2^15 wraps). */
static inline bool lock_ts_before(uint16_t a, uint16_t b)
{
	return (int16_t)(uint16_t)(a - b) < 0;
}
/*
 * The CQL itself, for the hierarchical types: acquire with the entry's timestamp ts (no GRANT
 * event: the caller emits it), and release. After a grant, c->w.rts(_set) holds the earliest
 * remaining remote waiter's timestamp.
 */
int lock_cql_acquire(struct lock_cli *c, uint32_t lock, enum lock_mode m, uint16_t ts,
		     struct lock_hold *h);
int lock_cql_release(struct lock_cli *c, const struct lock_hold *h);
/* This coordinator's id in lock words and messages: (cn << 10 | coord) + 1, never 0. */
uint32_t lock_cli_id(const struct lock_cli *c);
/* Tells coordinator coord of cn that this one is queued right behind it on lock. */
int lock_tell_succ(struct lock_cli *c, uint32_t lock, unsigned cn, unsigned coord);

#endif
