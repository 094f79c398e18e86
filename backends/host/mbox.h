/* SPDX-License-Identifier: MIT */
/*
 * Compute-node mailboxes in one shared segment: a core service for the backends whose compute
 * nodes share a host (shm, pmem). Include it as "transport/mbox.h".
 *
 * The segment /dev/shm/remora-<cluster>-msg holds a header, then one single-producer
 * single-consumer ring of RT_MBOX_SLOTS fixed slots per (sender, receiver) pair. Between
 * processes it is lock-free: the sender alone writes a ring's tail, the receiver alone its
 * head, and a release store / acquire load on those words publishes the slot. Threads of one
 * process that send to the same receiver (or receive) take a process-local lock, which keeps
 * each ring single-producer and single-consumer. Delivery is exactly once and in order per pair.
 *
 * The first compute node to open the segment creates it (O_EXCL) and sets `ready` last; the
 * others wait for `ready` (bounded) and check the layout.
 *
 * Incarnations: every open of compute node n adds 1 to incarnation[n]. A sender stamps each
 * message with its own incarnation and the receiver's current one (1 for a receiver that has
 * not opened yet: its first incarnation is 1). The receiver drops a message stamped for
 * another incarnation of itself, or sent by an incarnation of its sender that has since been
 * replaced: nothing a restarted compute node's previous process sent or was sent reaches
 * either side (docs/declock.md 1.6). Stamps keep the low 16 bits; a message would have to wait
 * through 65536 restarts of one node to pass for a new one.
 */
#ifndef REMORA_BACKENDS_HOST_MBOX_H
#define REMORA_BACKENDS_HOST_MBOX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <remora/backend.h>

#define RT_MBOX_DIR "/dev/shm"
#define RT_MBOX_MAGIC UINT64_C(0x47534d2d6d6d7272) /* "rrmm-MSG" */
#define RT_MBOX_VERSION 3
#define RT_MBOX_SLOTS 32u
#define RT_MBOX_SLOT_BYTES 256u
#define RT_MBOX_MAX (RT_MBOX_SLOT_BYTES - 16u) /* bytes one message may carry */

struct rt_mbox_slot {
	uint32_t len;
	uint16_t to_inc;     /* the receiver's incarnation when it was sent (low 16 bits) */
	uint16_t from_inc;   /* the sender's incarnation */
	uint64_t deliver_at; /* cost model: not receivable before this time (0: at once) */
	uint8_t data[RT_MBOX_MAX];
};

struct rt_mbox_ring {
	uint64_t head; /* next slot the receiver reads; written by the receiver only */
	uint64_t _pad0[7];
	uint64_t tail; /* next slot the sender writes; written by the sender only */
	uint64_t _pad1[7];
	struct rt_mbox_slot slots[RT_MBOX_SLOTS];
};

struct rt_mbox_hdr {
	uint64_t magic;
	uint32_t version;
	uint32_t max_cn;     /* rings form a max_cn x max_cn matrix, [src][dst] */
	uint32_t slots;
	uint32_t slot_bytes;
	uint32_t ready;      /* 1 once the creator initialized the header */
	uint32_t _pad[9];
	uint32_t incarnation[REMORA_MAX_CN]; /* opens of each compute node so far */
};

_Static_assert(sizeof(struct rt_mbox_slot) == RT_MBOX_SLOT_BYTES, "mailbox slot layout");
_Static_assert(offsetof(struct rt_mbox_ring, tail) == 64, "mailbox ring layout");
_Static_assert(offsetof(struct rt_mbox_ring, slots) == 128, "mailbox ring layout");
_Static_assert(sizeof(struct rt_mbox_hdr) == 64 + 4 * REMORA_MAX_CN, "mailbox header layout");
_Static_assert(sizeof(struct rt_mbox_hdr) % 64 == 0, "rings start on a cache line");

/* One process's view of the segment. */
struct rt_mbox {
	struct remora_transport *tp;       /* for error messages */
	struct rt_mbox_hdr *hdr;           /* NULL: not a compute node, no segment */
	size_t len;
	uint32_t max_cn;                   /* of the segment (its creator's configuration) */
	int self_cn;
	uint32_t incarnation;              /* of self_cn: this open's */
	bool keep_stale;                   /* mutation keep_stale_messages: no drain, no stamps */
	uint32_t send_lock[REMORA_MAX_CN]; /* serializes this process's senders per receiver */
	uint32_t recv_lock;
	uint32_t recv_next;                /* round-robin start over senders */
	int fd;                            /* holds a shared flock: one per user of the segment */
	char path[192];
};

/*
 * Opens (or creates) the mailbox segment of cluster for compute node self_cn; with self_cn < 0
 * only initializes *m (sends and receives then fail with -REMORA_ENODE). Returns 0 or a negative
 * code with the transport's error message set.
 */
int rt_mbox_open(struct rt_mbox *m, struct remora_transport *tp, const char *cluster,
		 const char *dir, uint32_t max_cn, int self_cn);
/* The last compute node to close the segment removes it (no user left: an exclusive flock). */
void rt_mbox_close(struct rt_mbox *m);
/*
 * 0, -EAGAIN (the receiver's ring is full), -EMSGSIZE, -REMORA_ENODE. The message may not be
 * received before time deliver_at (cost-model ns; 0: at once).
 */
int rt_mbox_send(struct rt_mbox *m, uint16_t dst_cn, const void *buf, uint32_t len,
		 uint64_t deliver_at);
/*
 * The message length with *src_cn set, -EAGAIN (none has arrived by time now; UINT64_MAX: any),
 * -EMSGSIZE (cap too small: the message stays queued).
 */
int rt_mbox_recv(struct rt_mbox *m, uint16_t *src_cn, void *buf, uint32_t cap, uint64_t now);
/* Path of the segment of cluster (dir as configured, NULL: default; rt_seg_key). */
int rt_mbox_path(const char *cluster, const char *dir, char *buf, size_t size);
/* Removes the segment of cluster (backends' cleanup). 0, or -errno other than ENOENT. */
int rt_mbox_unlink(const char *cluster, const char *dir);

#endif
