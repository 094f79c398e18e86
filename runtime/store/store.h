/* SPDX-License-Identifier: MIT */
/*
 * runtime/store: the database as it lies in memory-node pools -- superblock, catalog, hash
 * index, record areas, allocation, replication, logs -- and the verbs that format, check and
 * load it. Internal to libremora (prefix store_); applications use <remora/tx.h>.
 */
#ifndef REMORA_STORE_H
#define REMORA_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <remora/transport.h>
#include <remora/tx.h>

#include "codec.h"
#include "hash.h"
#include "layout.h"

#define REMORA_STORE_DEFAULT_MAX_CN 4u
#define REMORA_STORE_DEFAULT_COORDS_PER_CN 64u
#define REMORA_STORE_DEFAULT_LOG_SLOT (32u * 1024)
/* Coordinator slots per compute node in coordinator ids (docs/engine.md, "Identifiers"). */
#define REMORA_STORE_COORD_SLOTS 1024u

struct store_table {
	bool present;
	struct store_tabent ent;
	struct codec_geom geom;
};

/* A compute node's view of the formatted pools (read-only after store_open). */
struct store_db {
	struct remora_transport *tp;
	uint16_t n_mn;
	uint16_t replicas;
	/*
	 * Memory nodes failed over (docs/recovery.md, "Memory-node failover"): placement skips them, the
	 * first live copy being the primary. Changed (store_set_dead) only while no transaction
	 * of the process runs; read atomically.
	 */
	uint32_t dead;
	uint32_t rkey[REMORA_MAX_MN];
	struct store_sb sb; /* node 0's superblock (all nodes agree but for node) */
	const struct codec_ops *codec;
	struct store_table tab[REMORA_MAX_TABLES];
};

/* Where a key lives. */
struct store_place {
	uint64_t hash;
	uint64_t bucket;  /* home bucket */
	uint16_t fp;      /* fingerprint kept in index slots */
	uint16_t primary; /* memory node of the primary replica */
};

/* ---- formatting and opening ------------------------------------------------------------ */

/* Replicas actually used for n_mn nodes when asked for r (0: default). */
uint16_t store_default_replicas(uint16_t n_mn, uint16_t r);

/*
 * Formats nodes 0 .. cfg->n_mn-1 through verbs; tail_bytes at store_tail_off on node 0 (the
 * protocol's own state, what fits the pool) are zeroed too. Returns 0, -REMORA_EFULL when the
 * layout does not fit the smallest pool, -REMORA_ECONFIG for bad tables or sizes, or a verb's
 * error; err (errlen bytes) gets a one-line reason.
 */
int store_format(struct remora_transport *tp, const struct remora_db_format_cfg *cfg,
		 uint32_t codec, uint64_t tail_bytes, char *err, size_t errlen);

/* Where a protocol's own state past the store layout starts on memory node 0 (4 KiB aligned). */
static inline uint64_t store_tail_off(const struct store_sb *sb)
{
	return (sb->layout_bytes + 4095u) & ~(uint64_t)4095u;
}

/*
 * Reads and checks every node's superblock and catalog; writes nothing. Returns 0,
 * -REMORA_ELAYOUT (not formatted, wrong magic/version, mixed formats, codec mismatch; codec
 * REMORA_CODEC_NONE takes the database's own, for recovery),
 * -REMORA_ECONFIG (n_mn or replicas disagree with the format), or a verb's error.
 */
int store_open(struct store_db *st, struct remora_transport *tp,
		      struct remora_chan *ch, uint16_t n_mn, uint16_t replicas, uint32_t codec,
		      char *err, size_t errlen);

/* The region key of node's pool and its size, from the transport's attachment. */
int store_node_key(struct remora_transport *tp, uint16_t node, uint32_t *key,
			  uint64_t *bytes);


/* ---- running batches (the engine's one way: txn, protocols, loader, format, recovery) ---- */

#include <remora/sched.h>

/*
 * Posts n verbs (any count: split into doorbells of the channel's batch limit) and waits for
 * all of them: parks the running coroutine meanwhile (polling the channel itself when it is
 * not its scheduler's), polls outside a coroutine. Returns 0 or the first failed verb's
 * status. This is remora_co_exec: the one post-and-wait loop.
 */
static inline int store_exec(struct remora_chan *ch, struct remora_wr *wrs, unsigned n)
{
	return n ? remora_co_exec(ch, wrs, n) : 0;
}

/* Doorbell size of the no-wait variant (every backend takes at least this many). */
#define REMORA_STORE_NOWAIT_BATCH 16u

/*
 * The no-wait variant (async unlocks, insert backups): posts n verbs in doorbells of at most
 * REMORA_STORE_NOWAIT_BATCH and returns without waiting. Their completions go to track
 * (counted in track->pending; the caller waits for it before reusing the verbs' buffers), or
 * nowhere when track is NULL (fire and forget: sources that outlive the verbs). When the
 * channel is full, the verbs not posted yet are run and waited for instead. 0 or an error.
 */
int store_post_nowait(struct remora_chan *ch, struct remora_wr *wrs, unsigned n,
			     struct remora_waiter *track);

/* Work requests on node's pool at byte offset off (the region key comes from st). */
static inline struct remora_wr store_wr_read(const struct store_db *st, uint16_t node,
						    uint64_t off, void *dst, uint32_t len)
{
	return (struct remora_wr){ .raddr = remora_gaddr_make(node, off), .rkey = st->rkey[node],
				   .len = len, .op = REMORA_OP_READ, .local = dst };
}

static inline struct remora_wr store_wr_write(const struct store_db *st,
						     uint16_t node, uint64_t off, const void *src,
						     uint32_t len, uint8_t flags)
{
	return (struct remora_wr){ .raddr = remora_gaddr_make(node, off), .rkey = st->rkey[node],
				   .len = len, .op = REMORA_OP_WRITE, .flags = flags,
				   .local = (void *)(uintptr_t)src };
}

static inline struct remora_wr store_wr_cas(const struct store_db *st, uint16_t node,
						   uint64_t off, uint64_t compare, uint64_t swap,
						   uint64_t *old)
{
	return (struct remora_wr){ .raddr = remora_gaddr_make(node, off), .rkey = st->rkey[node],
				   .op = REMORA_OP_CAS, .compare = compare, .swap = swap,
				   .local = old };
}

static inline struct remora_wr store_wr_faa(const struct store_db *st, uint16_t node,
						   uint64_t off, uint64_t add, uint64_t *old,
						   uint8_t flags)
{
	return (struct remora_wr){ .raddr = remora_gaddr_make(node, off), .rkey = st->rkey[node],
				   .op = REMORA_OP_FAA, .flags = flags, .swap = add, .local = old };
}

/* ---- placement ------------------------------------------------------------------------- */

static inline const struct store_table *store_table(const struct store_db *st,
								  uint32_t id)
{
	return id < REMORA_MAX_TABLES && st->tab[id].present ? &st->tab[id] : NULL;
}

/*
 * Reads mnf_dead again into st->dead (store_open read it once), ORed over every node this
 * process has not taken out, one at a time (a node that died unseen is skipped; the live ones
 * carry every published death): an open acknowledges to the failover barrier first, then
 * reads it (runtime/txn/db.c). 0, or a verb's error when no node answered.
 */
int store_read_dead(struct store_db *st, struct remora_chan *ch, char *err, size_t errlen);

static inline uint32_t store_dead(const struct store_db *st)
{
	return __atomic_load_n(&st->dead, __ATOMIC_RELAXED);
}

static inline void store_set_dead(struct store_db *st, uint32_t dead)
{
	__atomic_store_n(&st->dead, dead, __ATOMIC_RELEASE);
}

static inline bool store_node_dead(const struct store_db *st, uint16_t node)
{
	return store_dead(st) >> node & 1u;
}

/* The home node of bucket b: the primary while every node lives. */
static inline uint16_t store_home(const struct store_db *st, uint64_t b)
{
	return (uint16_t)(b % st->n_mn);
}

/* The primary of data homed on node home: its first live copy (home if none lives). */
static inline uint16_t store_primary(const struct store_db *st, uint16_t home)
{
	uint32_t dead = store_dead(st);

	for (unsigned i = 0; dead && i < st->replicas; i++) {
		uint16_t m = (uint16_t)((home + i) % st->n_mn);

		if (!(dead >> m & 1u))
			return m;
	}
	return home;
}

static inline void store_place(const struct store_db *st,
				      const struct store_table *t, uint64_t key,
				      struct store_place *p)
{
	p->hash = store_key_hash(t->ent.id, key);
	p->bucket = store_range(p->hash, t->ent.nbuckets);
	p->fp = (uint16_t)(p->hash >> 5);
	p->primary = store_primary(st, store_home(st, p->bucket));
}

/*
 * The acting control node: the first live copy of data homed on node 0 (node 0 itself until
 * it fails over). The control words that one node arbitrates (allocation cursors, the
 * incarnation counter, coordinator-id blocks, online-recovery claims) are used there and
 * mirrored on the other copies of home 0, so that node 0 can fail over too.
 */
static inline uint16_t store_ctl_node(const struct store_db *st)
{
	return store_primary(st, 0);
}

/* The live copies of home 0, the acting control node among them, as a node mask (copy i of
 * home 0 is node i, replicas <= n_mn). */
static inline uint32_t store_ctl_copies(const struct store_db *st)
{
	uint32_t all = st->replicas >= 32 ? UINT32_MAX : (1u << st->replicas) - 1u;

	return all & ~store_dead(st);
}

/*
 * Adds n to the control word at off: on every other live copy of home 0 first (from the last
 * one down, each waited for), then on the acting control node, whose old value goes to *old. So every
 * backup's word is at least the acting node's, and a backup that takes over after node 0
 * failed hands out nothing that was handed out before. 0 or a verb's error.
 */
int store_ctl_faa(const struct store_db *st, struct remora_chan *ch, uint64_t off, uint64_t n,
		  uint64_t *old, uint32_t flags);

/*
 * The i-th copy of data homed on node primary (0 = home). Once a node failed over, pass the
 * home (store_home), not the acting primary, and skip the dead copies (store_node_dead).
 */
static inline uint16_t store_replica(const struct store_db *st, uint16_t primary,
					    unsigned i)
{
	return (uint16_t)((primary + i) % st->n_mn);
}

/* Next bucket of a probe sequence: same node, wrapping around the index. */
static inline uint64_t store_next_bucket(const struct store_db *st,
						const struct store_table *t, uint64_t b)
{
	b += st->n_mn;
	return b >= t->ent.nbuckets ? b % st->n_mn : b;
}

static inline uint64_t store_bucket_off(const struct store_table *t, uint64_t b)
{
	return t->ent.index_off + b * sizeof(struct store_bucket);
}

static inline uint64_t store_rec_off(const struct store_table *t, uint64_t idx)
{
	return t->ent.rec_off + idx * t->geom.stride;
}

/* Where the side area of record slot idx starts (codecs with side_bytes > 0). */
static inline uint64_t store_side_off(const struct store_table *t, uint64_t idx)
{
	return t->ent.side_off + idx * t->geom.side_bytes;
}

/* True when off is the start of a record slot of table t. */
static inline bool store_rec_valid(const struct store_table *t, uint64_t off)
{
	return off >= t->ent.rec_off && off < t->ent.rec_off + t->ent.rec_bytes &&
	       (off - t->ent.rec_off) % t->geom.stride == 0;
}

static inline remora_gaddr store_addr(uint16_t node, uint64_t off)
{
	return remora_gaddr_make(node, off);
}

/* ---- logs ------------------------------------------------------------------------------ */

/* Log slot of coordinator slot `slot` (cn * coords_per_cn + local index). */
static inline uint64_t store_log_off(const struct store_db *st, uint32_t slot)
{
	return st->sb.log_off + (uint64_t)slot * st->sb.log_slot_bytes;
}

/* The i-th of a coordinator's replicas log servers (dead ones are skipped by the writer). */
static inline uint16_t store_log_server(const struct store_db *st, uint16_t coord_id,
					       unsigned i)
{
	return (uint16_t)((coord_id + i) % st->n_mn);
}

/* ---- allocation ------------------------------------------------------------------------ */

/* A range of record slots a coordinator claimed and carves locally. */
struct store_chunk {
	uint64_t next, end;
};

/* Records per claim: large tables take larger chunks (fewer FAAs), small ones waste little. */
uint32_t store_chunk_records(const struct store_table *t);

/*
 * Takes one record slot index for table t from c, claiming a new chunk with an FAA on the
 * table's cursor (store_ctl_faa) when c is empty. Returns 0, -REMORA_EFULL or a verb's error.
 */
int store_alloc(const struct store_db *st, struct remora_chan *ch,
		       const struct store_table *t, struct store_chunk *c,
		       uint32_t nrec, uint64_t *idx);

/* ---- bulk loading ---------------------------------------------------------------------- */

struct store_loader;

/* Called for every record loaded (placement hash, record offset): address-cache fill. */
typedef void (*store_loaded_fn)(void *arg, uint64_t hash, uint64_t off);

int store_loader_create(const struct store_db *st, struct remora_chan *ch,
			       uint64_t *counter, store_loaded_fn loaded, void *arg,
			       struct store_loader **out);
void store_loader_destroy(struct store_loader *l);
/* Queues one record; sends a batch when one is full. */
int store_load(struct store_loader *l, uint32_t table, uint64_t key,
		      const void *value);
int store_load_flush(struct store_loader *l);
const char *store_loader_errmsg(const struct store_loader *l);

#endif
