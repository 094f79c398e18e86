/* SPDX-License-Identifier: MIT */
/*
 * Control-plane wire format (internal to runtime/cluster; see docs/cluster.md).
 *
 * TCP, request/reply, one reply per request, in order. Every message is a fixed-size struct
 * that starts with struct rctl_hdr; hdr.len is the whole message, and each type has exactly
 * one valid length. Integers are little-endian (the only byte order remora builds for).
 * A reply has the request's type with RCTL_REPLY set and echoes its seq, or is an ERROR
 * reply carrying a negative code and one line of text.
 *
 * A frame whose magic, version or length cannot be trusted gets an ERROR reply and the
 * connection is closed (framing is lost); a frame of an unknown type or the wrong length for
 * its type gets an ERROR reply and the connection stays open.
 *
 * Nothing but HELLO and AUTH is served before the connection authenticated: HELLO carries the
 * client's nonce and its reply the memory node's nonce and proof (it holds the cluster secret,
 * auth.h); AUTH carries the client's proof. Any ERROR reply before that ends the connection.
 */
#ifndef REMORA_CLUSTER_CTL_H
#define REMORA_CLUSTER_CTL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <remora/cluster.h>
#include <remora/params.h>
#include <remora/transport.h>

#include "cluster/auth.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the control plane sends host structs as little-endian: port it before building big-endian"
#endif

#define RCTL_MAGIC 0x54434d52u /* "RMCT" */
/* 2: JOIN carries a message locator, views their generations, GET_PEER; 3: HELLO/AUTH handshake */
#define RCTL_VERSION 3
#define RCTL_MAX_MSG 1024 /* no valid message is larger */
#define RCTL_NAME_MAX 64
#define RCTL_TEXT_MAX 112

enum rctl_type {
	RCTL_HELLO = 1, /* cluster name check; node facts */
	RCTL_GET_DESC,  /* the memory node's struct remora_node_desc */
	RCTL_JOIN,      /* a compute node becomes a member */
	RCTL_HEARTBEAT, /* renews the compute node's lease */
	RCTL_LEAVE,     /* a compute node leaves cleanly (not fenced) */
	RCTL_MEMBERS,   /* the membership view */
	RCTL_FENCE,     /* fence a compute node (permanent for its id) */
	RCTL_SHUTDOWN,  /* the memory node exits after replying */
	RCTL_GET_PEER,  /* the message locator a member joined with */
	RCTL_AUTH,      /* the client's proof that it holds the cluster secret */
	RCTL__COUNT,
	RCTL_ERROR = 0x7fff,
	RCTL_REPLY = 0x8000,
};

struct rctl_hdr {
	uint32_t magic;
	uint16_t version;
	uint16_t type;
	uint32_t len; /* bytes of the whole message, header included */
	uint32_t seq; /* chosen by the requester, echoed in the reply */
};
_Static_assert(sizeof(struct rctl_hdr) == 16, "wire layout");

/* GET_DESC, MEMBERS, SHUTDOWN requests: the header alone. */
struct rctl_req {
	struct rctl_hdr h;
};

struct rctl_hello {
	struct rctl_hdr h;
	int32_t cn;      /* the requester's compute-node id, -1 for a tool */
	uint32_t max_cn; /* the requester's cn count; must match the memory node's */
	char cluster[RCTL_NAME_MAX];
	char backend[16];
	uint8_t nonce[RAUTH_NONCE_BYTES]; /* the client's challenge to the memory node */
};
_Static_assert(sizeof(struct rctl_hello) == 136, "wire layout");

/* AUTH: the client's proof (auth.h) over both nonces of this connection's HELLO. */
struct rctl_auth {
	struct rctl_hdr h;
	uint8_t proof[RAUTH_PROOF_BYTES];
};
_Static_assert(sizeof(struct rctl_auth) == 48, "wire layout");

/* HEARTBEAT, LEAVE, FENCE, GET_PEER requests (pid: the requester's; ignored but by JOIN). */
struct rctl_cn_req {
	struct rctl_hdr h;
	uint16_t cn;
	uint16_t _pad;
	uint32_t pid;
};
_Static_assert(sizeof(struct rctl_cn_req) == 24, "wire layout");

/*
 * JOIN: the member's remora_msg_locator(), NUL-terminated printable ASCII without spaces ("" when
 * its backend needs none). Anything else is refused with -EINVAL.
 */
struct rctl_join {
	struct rctl_cn_req q;
	char msg_locator[REMORA_MSG_LOCATOR_MAX];
};
_Static_assert(sizeof(struct rctl_join) == 24 + REMORA_MSG_LOCATOR_MAX, "wire layout");
_Static_assert(offsetof(struct rctl_join, msg_locator) == 24, "wire layout");

/* Every reply starts with this; status is 0 or a negative remora code. */
struct rctl_rep {
	struct rctl_hdr h;
	int32_t status;
	uint32_t _pad;
};
_Static_assert(sizeof(struct rctl_rep) == 24, "wire layout");

struct rctl_hello_rep {
	struct rctl_rep r;
	uint16_t mn;
	uint16_t _pad;
	uint32_t max_cn;
	uint32_t heartbeat_ms;
	uint32_t lease_ms;
	uint32_t pid;
	uint32_t _pad2;
	char cluster[RCTL_NAME_MAX];
	char backend[16];
	uint8_t nonce[RAUTH_NONCE_BYTES]; /* the memory node's challenge to the client */
	uint8_t proof[RAUTH_PROOF_BYTES]; /* the memory node's proof over both nonces */
};
_Static_assert(sizeof(struct rctl_hello_rep) == 192, "wire layout");

struct rctl_desc_rep {
	struct rctl_rep r;
	struct remora_node_desc desc;
};
_Static_assert(sizeof(struct remora_node_desc) == 336, "wire layout of the node descriptor");
_Static_assert(sizeof(struct rctl_desc_rep) == 360, "wire layout");

/*
 * JOIN, HEARTBEAT, LEAVE, MEMBERS and FENCE replies. msg_gen[i]: generation of member i's message
 * locator at this memory node, new at every JOIN that brought a locator; 0 when i has none here
 * (never joined, left, dead, or its backend needs none). A compute node fetches a locator
 * (GET_PEER) when its generation changes, so one rejoin cannot go unnoticed.
 */
struct rctl_view_rep {
	struct rctl_rep r;
	struct remora_cluster_view view;
	uint32_t msg_gen[REMORA_MAX_CN];
};
_Static_assert(sizeof(struct rctl_view_rep) == 24 + 8 * 4 + 8 * REMORA_MAX_CN, "wire layout");
_Static_assert(offsetof(struct rctl_view_rep, msg_gen) == 24 + 8 * 4 + 4 * REMORA_MAX_CN,
	       "wire layout");

/* GET_PEER reply: cn's locator and its generation (0 and "": cn has none at this node). */
struct rctl_peer_rep {
	struct rctl_rep r;
	uint16_t cn;
	uint16_t _pad;
	uint32_t gen;
	char locator[REMORA_MSG_LOCATOR_MAX];
};
_Static_assert(sizeof(struct rctl_peer_rep) == 32 + REMORA_MSG_LOCATOR_MAX, "wire layout");
_Static_assert(offsetof(struct rctl_peer_rep, locator) == 32, "wire layout");

struct rctl_error_rep {
	struct rctl_rep r;
	char text[RCTL_TEXT_MAX];
};
_Static_assert(sizeof(struct rctl_error_rep) == 136, "wire layout");
_Static_assert(sizeof(struct rctl_view_rep) <= RCTL_MAX_MSG, "largest message fits a frame");

/* Whether s (a field of n bytes from a peer) is a message locator: NUL within n, printable. */
bool rctl_locator_ok(const char *s, size_t n);

/* Name of a request type, for messages ("HELLO", ...; "?" if unknown). */
const char *rctl_type_name(unsigned type);
/* The one valid length of a request of this type, or 0 for an unknown type. */
size_t rctl_req_len(unsigned type);
/* The one valid length of a reply to a request of this type (ERROR replies aside). */
size_t rctl_rep_len(unsigned req_type);

/*
 * Checks a header received from a peer. Returns 0 when the frame can be read (its length
 * may still be wrong for its type), or -REMORA_EPROTO when framing cannot be trusted; *why
 * then names the problem.
 */
int rctl_check_hdr(const struct rctl_hdr *h, const char **why);

/* Fills a request header. */
void rctl_hdr_init(struct rctl_hdr *h, unsigned type, size_t len, uint32_t seq);

/* ---- blocking client side (compute nodes, tools) ---------------------------------------- */

struct rctl_client {
	int fd;
	uint32_t seq;
	int timeout_ms; /* per reply */
	char peer[REMORA_HOST_MAX + 8];
	char text[RCTL_TEXT_MAX]; /* the text of the last ERROR reply */
};

/*
 * Connects to addr, retrying refused connections for up to retry_ms (memory nodes may be
 * starting). Returns 0, or -errno with a line in err.
 */
int rctl_connect(struct rctl_client *c, const struct remora_node_addr *addr, int retry_ms,
		 int timeout_ms, char *err, size_t errlen);
void rctl_close(struct rctl_client *c);
/*
 * Sends req (its header is filled here) and reads the reply into rep (rep_len: the reply's
 * valid length). Returns the reply's status (0 or negative), -REMORA_EPROTO for a malformed
 * reply, or -errno for I/O; err gets a line on failure (the peer's text for ERROR replies).
 */
int rctl_call(struct rctl_client *c, unsigned type, void *req, size_t req_len, void *rep,
	      size_t rep_len, char *err, size_t errlen);
/*
 * rctl_call in two halves, so that one thread can have a request out at several memory nodes
 * at once: rctl_send, then rctl_recv of its reply, which waits timeout_ms (< 0: the
 * connection's own timeout). A failed half closes the connection, as rctl_call does.
 */
int rctl_send(struct rctl_client *c, unsigned type, void *req, size_t req_len, char *err,
	      size_t errlen);
int rctl_recv(struct rctl_client *c, unsigned type, void *rep, size_t rep_len, int timeout_ms,
	      char *err, size_t errlen);
/*
 * The handshake: HELLO (q: cn, max_cn, cluster and backend filled by the caller; the nonce is
 * drawn here), then AUTH. Returns 0 once both sides proved they hold key, with the memory node's
 * facts in rep; otherwise a negative code and one line in err naming the reason: the memory
 * node's refusal ("memory node H:P refused us: wrong cluster key (key file F)"), or that it
 * could not prove the key (-EACCES). The connection is closed on failure.
 */
int rctl_handshake(struct rctl_client *c, const uint8_t key[RAUTH_KEY_BYTES],
		   const char *key_path, struct rctl_hello *q, struct rctl_hello_rep *rep,
		   char *err, size_t errlen);


#endif
