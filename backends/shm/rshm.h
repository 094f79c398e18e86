/* SPDX-License-Identifier: MIT */
/* shm backend internals: pool file layout, message segment layout, backend state. */
#ifndef REMORA_RSHM_H
#define REMORA_RSHM_H

#include <limits.h>
#include <stddef.h>
#include <stdint.h>

#include <remora/backend.h>

#define RSHM_DEFAULT_DIR "/dev/shm"
#define RSHM_RUN_DIR "/dev/shm" /* message segment */

/* ---- pool file: header, then the usable bytes -------------------------------------------- */

#define RSHM_MAGIC UINT64_C(0x4c4f4f502d6d7272) /* "rrm-POOL" */
#define RSHM_LAYOUT 3
#define RSHM_HDR_BYTES 36864u                   /* usable bytes start here (4 KiB aligned) */
#define RSHM_HUGE_BYTES (2u << 20)              /* ... or here with huge pages (2 MiB) */
#define RSHM_FENCE_OFF 1024u

enum rshm_hdr_flags {
	RSHM_HDR_HUGE = 1u << 0, /* usable area 2 MiB aligned; map it 2 MiB aligned too */
};

struct rshm_region {
	uint64_t off;
	uint64_t len;
	uint32_t key; /* 0: free slot */
	uint32_t _pad;
};

struct rshm_hdr {
	uint64_t magic;        /* written last at creation */
	uint32_t layout;       /* RSHM_LAYOUT */
	uint32_t hdr_bytes;    /* offset of the usable bytes in the file */
	uint64_t usable_bytes;
	uint16_t node;
	uint16_t _pad0;
	uint32_t flags;        /* enum rshm_hdr_flags */
	uint64_t region_gen;   /* bumped by every reg/dereg */
	uint64_t _pad1[3];
	struct rshm_region regions[REMORA_MAX_REGIONS];
	uint64_t arbiter;      /* atomics=arbiter: pid of the holder, 0 when free (own line) */
	uint64_t _pad2[7];
	/* struct remora_fence_slot fence[REMORA_MAX_CN] at RSHM_FENCE_OFF */
};

_Static_assert(offsetof(struct rshm_hdr, layout) == 8, "pool header layout");
_Static_assert(offsetof(struct rshm_hdr, usable_bytes) == 16, "pool header layout");
_Static_assert(offsetof(struct rshm_hdr, node) == 24, "pool header layout");
_Static_assert(offsetof(struct rshm_hdr, region_gen) == 32, "pool header layout");
_Static_assert(offsetof(struct rshm_hdr, regions) == 64, "pool header layout");
_Static_assert(sizeof(struct rshm_region) == 24, "pool header layout");
_Static_assert(offsetof(struct rshm_hdr, arbiter) == 256, "pool header layout");
_Static_assert(sizeof(struct rshm_hdr) <= RSHM_FENCE_OFF, "pool header layout");
_Static_assert(RSHM_FENCE_OFF + REMORA_MAX_CN * sizeof(struct remora_fence_slot) <= RSHM_HDR_BYTES,
	       "fence slots fit the header");
_Static_assert(RSHM_HDR_BYTES % 4096 == 0, "usable area page aligned");

static inline struct remora_fence_slot *rshm_fence_slot(struct rshm_hdr *h, unsigned cn)
{
	return (struct remora_fence_slot *)((char *)h + RSHM_FENCE_OFF) + cn;
}

/* ---- message segment: one SPSC ring per (src CN, dst CN) ---------------------------------- */

#define RSHM_MSG_MAGIC UINT64_C(0x47534d2d6d6d7272) /* "rrmm-MSG" */
#define RSHM_MSG_VERSION 2
#define RSHM_MSG_SLOTS 32u
#define RSHM_MSG_SLOT_BYTES 256u
#define RSHM_MSG_MAX (RSHM_MSG_SLOT_BYTES - 16u)

struct rshm_msg_slot {
	uint32_t len;
	uint32_t _pad;
	uint64_t deliver_at; /* cost model: not receivable before this time (0: at once) */
	uint8_t data[RSHM_MSG_MAX];
};

struct rshm_ring {
	uint64_t head; /* next slot the receiver reads; written by the receiver only */
	uint64_t _pad0[7];
	uint64_t tail; /* next slot the sender writes; written by the sender only */
	uint64_t _pad1[7];
	struct rshm_msg_slot slots[RSHM_MSG_SLOTS];
};

struct rshm_msg_hdr {
	uint64_t magic;
	uint32_t version;
	uint32_t max_cn;
	uint32_t slots;
	uint32_t slot_bytes;
	uint32_t ready; /* 1 once the creator initialized the header */
	uint32_t _pad[9];
};

_Static_assert(sizeof(struct rshm_msg_slot) == RSHM_MSG_SLOT_BYTES, "message slot layout");
_Static_assert(offsetof(struct rshm_ring, tail) == 64, "ring layout");
_Static_assert(offsetof(struct rshm_ring, slots) == 128, "ring layout");
_Static_assert(sizeof(struct rshm_msg_hdr) == 64, "message header layout");

/* ---- process-local state ------------------------------------------------------------------ */

struct rshm_node {
	char *base;                     /* usable bytes */
	struct rshm_hdr *hdr;
	void *map;
	size_t map_len;
	struct remora_fence_slot *slot; /* this CN's slot; NULL when not a compute node */
	uint64_t epoch;
	bool asym;                      /* lanes skip the CPU barrier (backend.h) */
	uint64_t region_gen;            /* hdr->region_gen the attach-time region table matches */
	char locator[128];
};

struct rshm_tp {
	struct remora_transport *tp;
	struct remora_backend_cfg cfg;
	char cluster[64];
	char dir[PATH_MAX];
	struct rshm_node nodes[REMORA_MAX_MN];
	/* messages */
	struct rshm_msg_hdr *msg;
	size_t msg_len;
	uint32_t msg_max_cn;
	uint32_t send_lock[REMORA_MAX_CN]; /* serializes this process's senders per destination */
	uint32_t recv_lock;
	uint32_t lanes;                    /* fence lanes held by this process's channels */
	uint32_t recv_next;                /* round-robin start over senders */
};

struct rshm_pool {
	struct rshm_tp *t;
	struct rshm_hdr *hdr;
	void *map;
	size_t map_len;
	char path[PATH_MAX];
};

struct rshm_chan {
	struct rshm_tp *t;
	struct remora_chan *ch;
	int lane; /* fence lane, or -1: the shared counter */
};

/* pool.c */
int rshm_pool_path(const struct rshm_tp *t, unsigned node, char *buf, size_t size);
int rshm_map_file(int fd, size_t len, bool huge, void **map);
int rshm_pool_open(void *tpriv, const struct remora_pool_spec *spec, void **ppriv, void **base,
		   uint64_t *bytes);
void rshm_pool_close(void *ppriv, bool unlink);
int rshm_pool_reg(void *ppriv, uint64_t off, uint64_t len, uint32_t *key);
int rshm_pool_dereg(void *ppriv, uint32_t key);
int rshm_pool_fence(void *ppriv, uint16_t cn);
int rshm_pool_describe(void *ppriv, struct remora_node_desc *desc);
int rshm_attach(void *tpriv, const struct remora_node_desc *desc);
int rshm_detach(void *tpriv, uint16_t node);
int rshm_check_header(const struct rshm_hdr *h, size_t file_len);

/* msg.c */
int rshm_msg_open(struct rshm_tp *t);
void rshm_msg_close(struct rshm_tp *t);
int rshm_msg_send(void *cpriv, uint16_t dst_cn, const void *buf, uint32_t len);
int rshm_msg_recv(void *cpriv, uint16_t *src_cn, void *buf, uint32_t cap);
int rshm_msg_send_at(void *cpriv, uint16_t dst_cn, const void *buf, uint32_t len,
		     uint64_t deliver_at);
int rshm_msg_recv_at(void *cpriv, uint16_t *src_cn, void *buf, uint32_t cap, uint64_t now);
int rshm_msg_path(const char *cluster, char *buf, size_t size);

/* verbs.c */
int rshm_post(void *cpriv, const struct remora_wr *wrs, unsigned n, int32_t *status,
	      unsigned pflags);

#endif
