/* SPDX-License-Identifier: MIT */
/*
 * Coordinator-id blocks for PILL lock words (docs/recovery.md, section 7, "Ids").
 *
 * A lock word names its owner's 16-bit coordinator id, and a failed owner's stray locks are
 * found by that id alone. So an id must never be handed out again while a stray lock of it
 * can exist. A db that uses PILL takes a block of ids at open: a CAS on the used-block bitmap
 * in the acting control node's area (store_ctl_node: node 0, or after it failed over the
 * copy of its control words that the allocation mirrors). A restarted compute node (same
 * compute-node id, new process) therefore gets fresh ids, never its dead predecessor's. A
 * clean close gives the block back. The block of a failed compute node stays used until the
 * recycler frees it.
 *
 * The recycler runs when an open finds 95% of the blocks used. Under its own claim word it
 * takes every used block whose ids are published as failed (their compute node was
 * recovered), releases the stray locks of those ids by a sweep of every record's lock word
 * (CAS on the exact stray value), then clears their failed bits on every node, and only then
 * their used bits. A live compute node may still cache a recycled id as failed: its cache
 * also keeps the failed owner's incarnation (bits 63:48 of the lock word), which the block's
 * next owner does not share, so the stale entry never matches a live lock.
 */
#ifndef REMORA_TXN_IDS_H
#define REMORA_TXN_IDS_H

#include <stdint.h>

#include "store/store.h"

/* Ids per block: a power of two above coords_per_cn, at least 64. */
uint32_t txn_ids_block_size(uint32_t coords_per_cn);

/* Blocks in the id space for a database with coords_per_cn coordinators per compute node. */
uint32_t txn_ids_blocks(uint32_t coords_per_cn);

/* The first coordinator id of block k (ids first .. first + coords_per_cn - 1). */
uint16_t txn_ids_first(uint32_t coords_per_cn, uint32_t block);

/*
 * Takes a free block for compute node cn of incarnation inc (recycling first when 95% are
 * used) and records it as cn's (id_owner). *block: the block taken. 0, -REMORA_EFULL (no
 * free block even after recycling), or a verb's error.
 */
int txn_ids_alloc(const struct store_db *st, struct remora_chan *ch, uint16_t cn, uint16_t inc,
		  uint64_t mutations, uint32_t *block);

/*
 * Gives block back after a clean close of cn's open of incarnation inc (no lock of it is
 * left), and clears cn's id_owner if it still names that open. 0 or an error.
 */
int txn_ids_free(const struct store_db *st, struct remora_chan *ch, uint16_t cn, uint16_t inc,
		 uint32_t block);

/*
 * The block and incarnation of compute node cn's latest open (id_owner). 1 when there is
 * one, 0 when none (cn never opened with allocated ids), or a verb's error.
 */
int txn_ids_owner(const struct store_db *st, struct remora_chan *ch, uint16_t cn,
		  uint32_t *block, uint16_t *inc);

/*
 * The recycler (see above), run by compute node cn's open of incarnation inc. Its claim word
 * names it and carries a lease, renewed as it goes: a recycler that died holding the claim
 * blocks recycling only until the lease expires. *freed: blocks freed here; *strays: stray
 * locks released. 0 (also when a live recycler holds the claim: nothing done), -EBUSY (the
 * claim lapsed under this one and was taken over: it stopped), or an error.
 */
int txn_ids_recycle(const struct store_db *st, struct remora_chan *ch, uint16_t cn, uint16_t inc,
		    uint64_t mutations, uint32_t *freed, uint64_t *strays);

#endif
