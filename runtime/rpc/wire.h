/* SPDX-License-Identifier: MIT */
/*
 * The RPC wire format (docs/rpc.md). A message is a byte string of at most REMORA_RPC_MAX_MSG
 * bytes, cut into frames that each fit one message slot of the transport; every frame starts
 * with struct rpc_hdr. Fields are in host byte order: compute nodes of one cluster share an
 * architecture (as the mailboxes and the log already assume).
 *
 *   request message: nent x (struct rpc_req_ent, then len bytes)
 *   reply message:   nent x (struct rpc_rep_ent, then len bytes), in the requests' order
 *   busy:            one frame, no payload: the receiver had no reassembly buffer; retry
 *   one-way request: one frame, as a request message; handled, never answered
 */
#ifndef REMORA_RPC_WIRE_H
#define REMORA_RPC_WIRE_H

#include <stddef.h>
#include <stdint.h>

#include <remora/rpc.h>

#define RPC_MAGIC 0x7072u /* "rp" */
#define RPC_VERSION 1u
/* Largest frame the layer builds (the rdma backend's slots are 1 KiB; shm's 240 B). */
#define RPC_FRAME_MAX 1024u

enum rpc_kind {
	RPC_REQ = 1,
	RPC_REP = 2,
	RPC_BUSY = 3,
	RPC_ONEWAY = 4,
};

/* The id of a one-way request: no caller's pending slot has it (slots are < 2^16 - 1). */
#define RPC_ONEWAY_ID UINT32_MAX

struct rpc_hdr {
	uint16_t magic;
	uint8_t version;
	uint8_t kind;        /* enum rpc_kind */
	uint16_t src_worker; /* sender's worker */
	uint16_t dst_worker; /* worker that receives it */
	uint16_t coord;      /* REQ: the asking coordinator; REP/BUSY: echoed back */
	uint16_t nent;       /* entries in the whole message */
	uint16_t frag;       /* this frame's index, 0 .. nfrag-1 */
	uint16_t nfrag;
	uint32_t id;         /* the caller's request id (pending slot | generation << 16) */
	uint32_t total;      /* payload bytes of the whole message */
};

struct rpc_req_ent {
	uint16_t op;
	uint16_t _pad;
	uint32_t len;
};

struct rpc_rep_ent {
	int32_t status;
	uint32_t len;
};

_Static_assert(sizeof(struct rpc_hdr) == 24, "rpc frame header layout");
_Static_assert(offsetof(struct rpc_hdr, id) == 16, "rpc frame header layout");
_Static_assert(sizeof(struct rpc_req_ent) == 8, "rpc request entry layout");
_Static_assert(sizeof(struct rpc_rep_ent) == 8, "rpc reply entry layout");
_Static_assert(REMORA_RPC_MAX_MSG <= UINT16_MAX * 64u, "nfrag fits its field");
_Static_assert(REMORA_RPC_MAX_BATCH <= UINT16_MAX, "nent fits its field");

#endif
