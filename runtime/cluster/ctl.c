/* SPDX-License-Identifier: MIT */
/*
 * Control-plane messages: lengths, header checks, and the blocking client used by compute
 * nodes and tools (a handful of calls per second: plain blocking sockets with timeouts).
 */
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "cluster/ctl.h"

static const char *const type_names[RCTL__COUNT] = {
	[RCTL_HELLO] = "HELLO",       [RCTL_GET_DESC] = "GET_DESC", [RCTL_JOIN] = "JOIN",
	[RCTL_HEARTBEAT] = "HEARTBEAT", [RCTL_LEAVE] = "LEAVE",     [RCTL_MEMBERS] = "MEMBERS",
	[RCTL_FENCE] = "FENCE",       [RCTL_SHUTDOWN] = "SHUTDOWN", [RCTL_GET_PEER] = "GET_PEER",
	[RCTL_AUTH] = "AUTH",
};

const char *rctl_type_name(unsigned type)
{
	if (type == RCTL_ERROR)
		return "ERROR";
	if (type >= RCTL__COUNT || !type_names[type])
		return "?";
	return type_names[type];
}

size_t rctl_req_len(unsigned type)
{
	switch (type) {
	case RCTL_HELLO:
		return sizeof(struct rctl_hello);
	case RCTL_GET_DESC:
	case RCTL_MEMBERS:
	case RCTL_SHUTDOWN:
		return sizeof(struct rctl_req);
	case RCTL_JOIN:
		return sizeof(struct rctl_join);
	case RCTL_HEARTBEAT:
	case RCTL_LEAVE:
	case RCTL_FENCE:
	case RCTL_GET_PEER:
		return sizeof(struct rctl_cn_req);
	case RCTL_AUTH:
		return sizeof(struct rctl_auth);
	default:
		return 0;
	}
}

size_t rctl_rep_len(unsigned req_type)
{
	switch (req_type) {
	case RCTL_HELLO:
		return sizeof(struct rctl_hello_rep);
	case RCTL_GET_DESC:
		return sizeof(struct rctl_desc_rep);
	case RCTL_JOIN:
	case RCTL_HEARTBEAT:
	case RCTL_LEAVE:
	case RCTL_MEMBERS:
	case RCTL_FENCE:
		return sizeof(struct rctl_view_rep);
	case RCTL_SHUTDOWN:
	case RCTL_AUTH:
		return sizeof(struct rctl_rep);
	case RCTL_GET_PEER:
		return sizeof(struct rctl_peer_rep);
	default:
		return 0;
	}
}

bool rctl_locator_ok(const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		if (s[i] == '\0')
			return true;
		if (s[i] <= ' ' || s[i] > '~')
			return false;
	}
	return false; /* no NUL: not a string */
}

int rctl_check_hdr(const struct rctl_hdr *h, const char **why)
{
	if (h->magic != RCTL_MAGIC) {
		*why = "bad magic (not a remora control-plane peer)";
		return -REMORA_EPROTO;
	}
	if (h->version != RCTL_VERSION) {
		*why = "unsupported protocol version";
		return -REMORA_EPROTO;
	}
	if (h->len < sizeof(struct rctl_hdr) || h->len > RCTL_MAX_MSG) {
		*why = "message length out of bounds";
		return -REMORA_EPROTO;
	}
	return 0;
}

void rctl_hdr_init(struct rctl_hdr *h, unsigned type, size_t len, uint32_t seq)
{
	h->magic = RCTL_MAGIC;
	h->version = RCTL_VERSION;
	h->type = (uint16_t)type;
	h->len = (uint32_t)len;
	h->seq = seq;
}

/* ---- client ----------------------------------------------------------------------------- */

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static int try_connect(const struct addrinfo *ai, int timeout_ms)
{
	struct timeval tv = { .tv_sec = timeout_ms / 1000, .tv_usec = (timeout_ms % 1000) * 1000 };
	int one = 1, fd, e;

	fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
	if (fd < 0)
		return -errno;
	if (connect(fd, ai->ai_addr, ai->ai_addrlen) < 0) {
		e = errno;
		close(fd);
		return -e;
	}
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	return fd;
}

int rctl_connect(struct rctl_client *c, const struct remora_node_addr *addr, int retry_ms,
		 int timeout_ms, char *err, size_t errlen)
{
	struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM };
	struct addrinfo *res;
	uint64_t deadline = now_ms() + (uint64_t)retry_ms;
	char port[8];
	int rc, fd;

	memset(c, 0, sizeof(*c));
	c->fd = -1;
	c->timeout_ms = timeout_ms;
	snprintf(c->peer, sizeof(c->peer), "%s:%u", addr->host, addr->port);
	if (addr->port == 0) {
		snprintf(err, errlen, "%s: no port given", c->peer);
		return -REMORA_ECONFIG;
	}
	snprintf(port, sizeof(port), "%u", addr->port);
	rc = getaddrinfo(addr->host, port, &hints, &res);
	if (rc) {
		snprintf(err, errlen, "%s: %s", c->peer, gai_strerror(rc));
		return -REMORA_ECONFIG;
	}
	for (;;) {
		fd = try_connect(res, timeout_ms);
		if (fd >= 0 || (fd != -ECONNREFUSED && fd != -ENOENT) || now_ms() >= deadline)
			break;
		/* The memory node may still be starting: retry a refused connection. */
		nanosleep(&(struct timespec){ .tv_nsec = 20 * 1000 * 1000 }, NULL);
	}
	freeaddrinfo(res);
	if (fd < 0) {
		snprintf(err, errlen, "%s: connect: %s", c->peer, strerror(-fd));
		return fd;
	}
	c->fd = fd;
	return 0;
}

void rctl_close(struct rctl_client *c)
{
	if (c->fd >= 0)
		close(c->fd);
	c->fd = -1;
}

static int send_all(int fd, const void *buf, size_t len)
{
	const char *p = buf;

	while (len) {
		ssize_t n = send(fd, p, len, MSG_NOSIGNAL);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return errno == EAGAIN ? -ETIMEDOUT : -errno;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

static int recv_all(int fd, void *buf, size_t len)
{
	char *p = buf;

	while (len) {
		ssize_t n = recv(fd, p, len, 0);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return errno == EAGAIN ? -ETIMEDOUT : -errno;
		if (n == 0)
			return -ECONNRESET;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

int rctl_send(struct rctl_client *c, unsigned type, void *req, size_t req_len, char *err,
	      size_t errlen)
{
	struct rctl_hdr *h = req;
	int rc;

	if (c->fd < 0) {
		snprintf(err, errlen, "%s: not connected (connection lost earlier)", c->peer);
		return -ENOTCONN;
	}
	if (++c->seq == 0)
		c->seq = 1; /* seq 0 marks the memory node's unsolicited ERRORs */
	rctl_hdr_init(h, type, req_len, c->seq);
	rc = send_all(c->fd, req, req_len);
	if (rc) {
		/* The stream may hold half a message now: this connection cannot be used again. */
		snprintf(err, errlen, "%s: %s: %s", c->peer, rctl_type_name(type), strerror(-rc));
		rctl_close(c);
	}
	return rc;
}

/* recv_all with a deadline of timeout_ms for this reply (< 0: the connection's own). */
static int recv_within(struct rctl_client *c, void *buf, size_t len, int timeout_ms)
{
	struct timeval tv = { .tv_sec = timeout_ms / 1000, .tv_usec = (timeout_ms % 1000) * 1000 };
	struct timeval own = { .tv_sec = c->timeout_ms / 1000,
			       .tv_usec = (c->timeout_ms % 1000) * 1000 };
	int rc;

	if (timeout_ms < 0 || timeout_ms == c->timeout_ms)
		return recv_all(c->fd, buf, len);
	setsockopt(c->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	rc = recv_all(c->fd, buf, len);
	setsockopt(c->fd, SOL_SOCKET, SO_RCVTIMEO, &own, sizeof(own));
	return rc;
}

int rctl_recv(struct rctl_client *c, unsigned type, void *rep, size_t rep_len, int timeout_ms,
	      char *err, size_t errlen)
{
	union {
		struct rctl_rep r;
		struct rctl_error_rep e;
		char bytes[RCTL_MAX_MSG];
	} in;
	const char *why;
	int rc;

	if (c->fd < 0) {
		snprintf(err, errlen, "%s: not connected (connection lost earlier)", c->peer);
		return -ENOTCONN;
	}
	rc = recv_within(c, &in.r.h, sizeof(in.r.h), timeout_ms);
	if (rc)
		goto broken;
	if (rctl_check_hdr(&in.r.h, &why) || in.r.h.len < sizeof(struct rctl_rep)) {
		snprintf(err, errlen, "%s: %s reply: %s", c->peer, rctl_type_name(type),
			 rctl_check_hdr(&in.r.h, &why) ? why : "too short");
		rctl_close(c);
		return -REMORA_EPROTO;
	}
	rc = recv_within(c, in.bytes + sizeof(in.r.h), in.r.h.len - sizeof(in.r.h), timeout_ms);
	if (rc)
		goto broken;
	c->text[0] = '\0';
	if (in.r.h.seq == 0 && in.r.h.type == (RCTL_REPLY | RCTL_ERROR) &&
	    in.r.h.len == sizeof(in.e) && in.r.status < 0) {
		/* Not an answer: the memory node closes this connection and says why (seq 0). */
		in.e.text[sizeof(in.e.text) - 1] = '\0';
		snprintf(c->text, sizeof(c->text), "%s", in.e.text);
		snprintf(err, errlen, "memory node %s refused us: %s", c->peer, in.e.text);
		rctl_close(c);
		return in.r.status;
	}
	if (in.r.h.seq != c->seq) {
		snprintf(err, errlen, "%s: %s reply out of sequence", c->peer,
			 rctl_type_name(type));
		rctl_close(c);
		return -REMORA_EPROTO;
	}
	if (in.r.h.type == (RCTL_REPLY | RCTL_ERROR) && in.r.h.len == sizeof(in.e) &&
	    in.r.status < 0) {
		in.e.text[sizeof(in.e.text) - 1] = '\0';
		snprintf(c->text, sizeof(c->text), "%s", in.e.text);
		snprintf(err, errlen, "%s: %s", c->peer, in.e.text);
		return in.r.status;
	}
	if (in.r.h.type != (RCTL_REPLY | type) || in.r.h.len != rep_len) {
		snprintf(err, errlen, "%s: %s reply has type %u and length %u", c->peer,
			 rctl_type_name(type), in.r.h.type, in.r.h.len);
		rctl_close(c);
		return -REMORA_EPROTO;
	}
	memcpy(rep, in.bytes, rep_len);
	if (in.r.status < 0)
		snprintf(err, errlen, "%s: %s: %s", c->peer, rctl_type_name(type),
			 remora_strerror(in.r.status));
	return in.r.status;

broken:
	/* The stream may hold half a message now: this connection cannot be used again. */
	snprintf(err, errlen, "%s: %s: %s", c->peer, rctl_type_name(type), strerror(-rc));
	rctl_close(c);
	return rc;
}

int rctl_call(struct rctl_client *c, unsigned type, void *req, size_t req_len, void *rep,
	      size_t rep_len, char *err, size_t errlen)
{
	int rc = rctl_send(c, type, req, req_len, err, errlen);

	return rc ? rc : rctl_recv(c, type, rep, rep_len, -1, err, errlen);
}

int rctl_handshake(struct rctl_client *c, const uint8_t key[RAUTH_KEY_BYTES],
		   const char *key_path, struct rctl_hello *q, struct rctl_hello_rep *rep,
		   char *err, size_t errlen)
{
	struct rctl_auth a;
	struct rctl_rep ar;
	bool mn_proved;
	int rc;

	rauth_nonce(q->nonce);
	rc = rctl_call(c, RCTL_HELLO, q, sizeof(*q), rep, sizeof(*rep), err, errlen);
	if (rc) {
		if (c->text[0])
			snprintf(err, errlen, "memory node %s refused us: %s", c->peer, c->text);
		rctl_close(c); /* a memory node hangs up after any refusal before AUTH */
		return rc;
	}
	mn_proved = rauth_check(rep->proof, key, RAUTH_MN, q->cluster, q->nonce, rep->nonce);
	/*
	 * Our proof goes out even when the node's failed: it is bound to this connection's nonces,
	 * so it is worth nothing elsewhere, and a node of another key then says so and logs us.
	 */
	memset(&a, 0, sizeof(a));
	rauth_proof(a.proof, key, RAUTH_CLIENT, q->cluster, q->nonce, rep->nonce);
	rc = rctl_call(c, RCTL_AUTH, &a, sizeof(a), &ar, sizeof(ar), err, errlen);
	if (rc == -EACCES && c->text[0])
		snprintf(err, errlen, "memory node %s refused us: %s (key file %s)", c->peer,
			 c->text, key_path);
	else if (rc && c->text[0])
		snprintf(err, errlen, "memory node %s refused us: %s", c->peer, c->text);
	else if (!rc && !mn_proved) {
		snprintf(err, errlen,
			 "memory node %s could not prove it holds the cluster key (key file %s): "
			 "an impostor, or a node of another cluster's key",
			 c->peer, key_path);
		rc = -EACCES;
	}
	if (rc)
		rctl_close(c);
	return rc;
}

