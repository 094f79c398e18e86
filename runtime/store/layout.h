/* SPDX-License-Identifier: MIT */
/*
 * What lives in a memory node's pool. Every structure here is pool memory shared by every
 * process of every architecture we build for (little-endian, 64-bit), so each one carries a
 * _Static_assert on its size and the offsets readers depend on.
 *
 * Every memory node carries the same layout at the same offsets (docs/engine.md, "Layout"):
 *
 *   0        superblock            4 KiB   magic, version, geometry, offsets of everything below
 *   4 KiB    catalog               4 KiB   one 128-byte entry per table id
 *   8 KiB    control area         64 KiB   allocation cursors, timestamp counter, lease words
 *   72 KiB   log area              max_cn x coords_per_cn slots of log_slot_bytes
 *   ...      per table: hash index (128-byte buckets), record area, codec side area
 *
 * A record's replicas sit at the same offset on each of its replica nodes, so a backup address
 * is the primary address with another node id.
 */
#ifndef REMORA_STORE_LAYOUT_H
#define REMORA_STORE_LAYOUT_H

#include <stddef.h>
#include <stdint.h>

#include <remora/transport.h>
#include <remora/tx.h>

#define REMORA_STORE_MAGIC UINT64_C(0x424441524f4d4552) /* "REMORADB" */
/* Seeds of store_csum for the superblock and for log records. */
#define REMORA_STORE_SB_CSUM_SEED 0x5342u
#define REMORA_STORE_LOG_CSUM_SEED 0x4c4f47u
/*
 * 2: node 0's control words (allocation cursors, incarnation, id blocks, recovery claims) are
 * mirrored on the other copies of home 0, so that node 0 can fail over; a version-1 pool's
 * mirrors are zero, and a failover of its node 0 would hand out record slots again.
 * 3: every checksum (superblock, logs, record images) is XXH3-64 (runtime/store/hash.h); a
 * version-2 pool's checksums would all fail.
 */
#define REMORA_STORE_LAYOUT_VERSION 3u

#define REMORA_STORE_SB_OFF 0u
#define REMORA_STORE_SB_BYTES 4096u
#define REMORA_STORE_CATALOG_OFF 4096u
#define REMORA_STORE_CATALOG_BYTES 4096u
#define REMORA_STORE_CONTROL_OFF 8192u
#define REMORA_STORE_CONTROL_BYTES 65536u
#define REMORA_STORE_LOG_OFF (REMORA_STORE_CONTROL_OFF + REMORA_STORE_CONTROL_BYTES)
#define REMORA_STORE_ALIGN 4096u

/* ---- superblock ------------------------------------------------------------------------- */

struct store_sb {
	uint64_t magic;          /* REMORA_STORE_MAGIC; written last by format */
	uint32_t layout_version; /* REMORA_STORE_LAYOUT_VERSION */
	uint32_t sb_bytes;       /* sizeof(struct store_sb) */
	uint64_t format_id;      /* same on every node of one format: mixed pools are refused */
	uint16_t node;           /* the memory node this pool was formatted as */
	uint16_t n_mn;
	uint16_t replicas;
	uint16_t codec;          /* enum codec_id */
	uint32_t ntables;
	uint32_t log_slot_bytes;
	uint16_t max_cn;
	uint16_t coords_per_cn;
	uint32_t bucket_bytes;
	uint64_t layout_bytes;   /* bytes of the pool the layout covers */
	uint64_t catalog_off, catalog_bytes;
	uint64_t control_off, control_bytes;
	uint64_t log_off, log_bytes;
	uint64_t data_off, data_bytes;
	uint64_t reserved[8];
	uint64_t csum;           /* store_csum over every byte before this field */
};
_Static_assert(sizeof(struct store_sb) == 192, "superblock layout");
_Static_assert(offsetof(struct store_sb, format_id) == 16, "superblock layout");
_Static_assert(offsetof(struct store_sb, csum) == 184, "superblock layout");
_Static_assert(sizeof(struct store_sb) <= REMORA_STORE_SB_BYTES, "superblock fits");

/* ---- catalog ---------------------------------------------------------------------------- */

enum store_tab_flags {
	REMORA_STORE_TAB_PRESENT = 1u << 0,
};

struct store_tabent {
	char name[REMORA_TABLE_NAME_MAX];
	uint32_t id;
	uint32_t value_size;
	uint64_t max_records;   /* as asked by the table definition */
	uint64_t capacity;      /* record slots: max_records plus room for chunks and tombstones */
	uint32_t stride;        /* bytes per record slot (codec geometry) */
	uint32_t flags;         /* enum store_tab_flags */
	uint64_t nbuckets;      /* a multiple of n_mn: bucket b lives with primary b % n_mn */
	uint64_t index_off, index_bytes;
	uint64_t rec_off, rec_bytes;
	uint64_t side_off, side_bytes; /* codec side area (version records); 0 for lock+version */
	uint64_t cursor_off;    /* allocation cursor word, in the control area of node 0 */
	uint64_t cells;         /* cell layout (codec_cells_pack); 0: one cell */
};
_Static_assert(sizeof(struct store_tabent) == 128, "catalog entry layout");
_Static_assert(offsetof(struct store_tabent, nbuckets) == 56, "catalog entry layout");
_Static_assert(REMORA_MAX_TABLES * sizeof(struct store_tabent) <= REMORA_STORE_CATALOG_BYTES,
	       "catalog fits");

/* ---- control area ----------------------------------------------------------------------- */

/*
 * Words CNs change with atomics. Allocation cursors and the timestamp counter are used on
 * node 0 only (one arbiter for the whole cluster); the area exists on every node so the
 * layout stays identical. Lease and failed-id words are reserved for the cluster and recovery
 * modules.
 */
struct store_control {
	uint64_t cursor[REMORA_MAX_TABLES]; /* record slots handed out per table (FAA) */
	uint64_t ts_counter;                /* MN-counter timestamp service (FAA) */
	uint64_t incarnation;               /* db opens so far (FAA): tx ids stay unique */
	/*
	 * Opens not closed yet (FAA +1 at remora_db_open, -1 at remora_db_close, every node).
	 * A memory node that starts on a kept pool with live_opens != 0 moves the count into
	 * needs_recovery: the processes that opened it are gone with their logs and locks.
	 * remora_db_open refuses while needs_recovery != 0; remora recover zeroes both.
	 */
	uint64_t live_opens;
	uint64_t needs_recovery;
	uint64_t reserved0[28];
	uint64_t lease[REMORA_MAX_CN];      /* reserved: membership / lease words */
	uint64_t failed_ids[65536 / 64];    /* reserved: replicated failed-coordinator bitset */
	/*
	 * MVCC garbage collection (motor): per compute node, 1 + a timestamp no transaction of
	 * it running now or later starts below (its oldest running T_start, or its newest
	 * timestamp when none runs); 0: the node has no database open. Node 0 only.
	 */
	uint64_t gc_horizon[REMORA_MAX_CN];
	/*
	 * Coordinator-id blocks (runtime/txn/ids.h), node 0 only: bit k of id_used says block k
	 * is held by an open db or by a failed one whose stray locks may remain; id_owner[cn] is
	 * the block cn's latest open took (incarnation << 32 | block + 1; 0: none); id_recycling
	 * is the recycler's exclusive claim (lease expiry s << 32 | incarnation << 16 | cn + 1,
	 * runtime/txn/ids.c); id_recycled counts the blocks it freed.
	 */
	uint64_t id_used[65536 / 64 / 64];
	uint64_t id_owner[REMORA_MAX_CN];
	uint64_t id_recycling;
	uint64_t id_recycled;
	/*
	 * Memory-node failover (docs/recovery.md, "Memory-node failover"), on every live node: mnf_dead is
	 * the mask of memory nodes declared dead for the run (CAS OR, never cleared while the
	 * database lives); mnf_ack[cn] is MNF_ACK_OPEN | the dead mask compute node cn runs on
	 * (written at open and at each failover barrier), 0 once it closed the database.
	 */
	uint64_t mnf_dead;
	uint64_t mnf_ack[REMORA_MAX_CN];
};
#define REMORA_STORE_MNF_ACK_OPEN (UINT64_C(1) << 63)
_Static_assert(offsetof(struct store_control, ts_counter) == 256, "control layout");
_Static_assert(offsetof(struct store_control, incarnation) == 264, "control layout");
_Static_assert(offsetof(struct store_control, live_opens) == 272, "control layout");
_Static_assert(offsetof(struct store_control, lease) == 512, "control layout");
_Static_assert(sizeof(struct store_control) <= REMORA_STORE_CONTROL_BYTES, "control fits");

/* ---- hash index ------------------------------------------------------------------------- */

/*
 * A bucket is 128 bytes, read whole in one READ: a header word and 15 slots. A slot is 0
 * (empty) or fp << 48 | record offset, set once by CAS from 0 and never cleared: a deleted or
 * aborted key keeps its record (flags say absent), so a key's record never moves. An insert
 * takes the FIRST empty slot of the key's probe sequence (home bucket, then every n_mn-th
 * bucket after it, so the probe stays on the same memory node), hence a lookup may stop at
 * the first empty slot.
 */
#define REMORA_STORE_BUCKET_SLOTS 15u
#define REMORA_STORE_BUCKET_MAGIC UINT64_C(0xb0c7)

struct store_bucket {
	uint64_t hdr;                               /* MAGIC << 48 | table << 32 | bucket index */
	uint64_t slot[REMORA_STORE_BUCKET_SLOTS];
};
_Static_assert(sizeof(struct store_bucket) == 128, "bucket layout");

#define REMORA_STORE_SLOT_OFF_MASK REMORA_GADDR_OFF_MASK
#define REMORA_STORE_SLOT_FP_SHIFT 48

static inline uint64_t store_bucket_hdr(uint32_t table, uint64_t b)
{
	return REMORA_STORE_BUCKET_MAGIC << 48 | (uint64_t)(table & 0xffff) << 32 | (uint32_t)b;
}

static inline uint64_t store_slot_make(uint16_t fp, uint64_t off)
{
	return (uint64_t)fp << REMORA_STORE_SLOT_FP_SHIFT | (off & REMORA_STORE_SLOT_OFF_MASK);
}

/* ---- per-coordinator logs --------------------------------------------------------------- */

enum store_log_flags {
	REMORA_STORE_LOG_VALID = 1u << 0,
};

enum store_log_op {
	REMORA_STORE_LOG_UPD = 1,
	REMORA_STORE_LOG_INS = 2,
	REMORA_STORE_LOG_DEL = 3,
};

/*
 * One log record: this header, then n entries. The whole record goes out in ONE WRITE per log
 * server. It counts only when VALID is set and csum matches (a torn WRITE does not).
 */
struct store_log_hdr {
	uint64_t tx_id;
	uint64_t lock;      /* the lock word value the transaction held its locks with */
	uint32_t flags;     /* enum store_log_flags */
	uint16_t coord;     /* coordinator id */
	uint16_t n;         /* entries */
	uint32_t len;       /* bytes of header and entries */
	uint32_t codec;     /* enum codec_id of the images */
	uint64_t csum;      /* store_csum over the record with this field zero */
	uint64_t reserved[3];
};
_Static_assert(sizeof(struct store_log_hdr) == 64, "log header layout");
_Static_assert(offsetof(struct store_log_hdr, csum) == 32, "log header layout");

/* An entry, followed by img_len bytes of the record's old image, padded to 8 bytes. */
struct store_log_ent {
	uint32_t table;
	uint8_t op;         /* enum store_log_op */
	uint8_t _pad0;
	uint16_t _pad1;
	uint64_t key;
	uint64_t off;       /* record offset, the same on every replica */
	uint64_t old_version;
	uint64_t new_version; /* the tx id: recovery compares replicas against it */
	uint32_t img_len;
	uint32_t _pad2;
};
_Static_assert(sizeof(struct store_log_ent) == 48, "log entry layout");

#endif
