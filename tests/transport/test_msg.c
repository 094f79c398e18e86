/* SPDX-License-Identifier: MIT */
/*
 * Conformance: compute-node messages. Between processes, every message arrives exactly once and
 * in order per (sender, receiver) pair, also when the bounded mailbox pushes back with -EAGAIN
 * (the receiver starts reading only after each sender has hit -EAGAIN). Oversize messages get
 * -EMSGSIZE, bad destinations and non-compute-node senders -REMORA_ENODE.
 */
#include <errno.h>
#include <sched.h>
#include <string.h>
#include <unistd.h>

#include "transport/mutate.h"
#include "tutil.h"

static struct tu_ctx tool;

TestSuite(msg, .fini = tu_fini, .timeout = TU_TIMEOUT);

#define RECV_CN 5
#define NMSG 4000u

struct hdr {
	uint64_t seq;
	uint32_t len;
	uint16_t from;
	uint16_t _pad;
};

static uint32_t max_msg;

/* Message seq of sender from: a header, then bytes that depend on both; length varies. */
static uint32_t make_msg(uint8_t *buf, uint16_t from, uint64_t seq)
{
	uint32_t room = max_msg < 200 ? max_msg : 200;
	uint32_t len = (uint32_t)sizeof(struct hdr) + (uint32_t)((seq * 37 + from) %
								 (room - sizeof(struct hdr) + 1));
	struct hdr h = { .seq = seq, .len = len, .from = from };

	memcpy(buf, &h, sizeof(h));
	for (uint32_t i = sizeof(h); i < len; i++)
		buf[i] = (uint8_t)(seq * 131 + i * 7 + from);
	return len;
}

static int open_cn(int cn, struct remora_transport **tp, struct remora_chan **ch)
{
	int rc = tu_transport_try(cn, NULL, tp);

	TU_CHILD_CHECK(rc == 0, "cn %d: transport_open = %d (%s): %s", cn, rc, remora_strerror(rc),
		       remora_last_error());
	rc = remora_chan_open(*tp, ch);
	TU_CHILD_CHECK(rc == 0, "cn %d: chan_open = %d (%s)", cn, rc, remora_strerror(rc));
	return 0;
}

struct role {
	int cn;
	unsigned nsenders; /* receiver: how many senders (cn 1..nsenders) */
};

/* Sender: fill the mailbox until -EAGAIN, tell the parent, then send the rest with retries. */
static int sender(void *argp, int rd, int wr)
{
	struct role *r = argp;
	struct remora_transport *tp;
	struct remora_chan *ch;
	struct remora_counters k;
	uint8_t buf[4096];
	uint64_t go, eagain = 0, first_eagain = 0, spins = 0;
	uint16_t me = (uint16_t)r->cn;

	if (open_cn(r->cn, &tp, &ch))
		return 1;
	tu_send(wr, 1);
	TU_CHILD_CHECK(tu_recv(rd, &go) == 0, "no start");
	for (uint64_t seq = 0; seq < NMSG;) {
		uint32_t len = make_msg(buf, me, seq);
		int rc = remora_msg_send(ch, RECV_CN, buf, len);

		if (rc == -EAGAIN) {
			if (!eagain++) {
				first_eagain = seq;
				tu_send(wr, seq); /* mailbox full: the receiver may start */
			}
			TU_CHILD_CHECK(++spins < 20000000, "mailbox stays full at seq %llu",
				       (unsigned long long)seq);
			sched_yield();
			continue;
		}
		TU_CHILD_CHECK(rc == 0, "send seq %llu = %d (%s)", (unsigned long long)seq, rc,
			       remora_strerror(rc));
		seq++;
	}
	TU_CHILD_CHECK(eagain > 0, "%u messages sent without -EAGAIN: the mailbox is not bounded",
		       NMSG);
	TU_CHILD_CHECK(first_eagain > 0, "-EAGAIN into an empty mailbox");
	remora_chan_counters(ch, &k);
	TU_CHILD_CHECK(k.msgs_sent == NMSG, "msgs_sent %llu, want %u",
		       (unsigned long long)k.msgs_sent, NMSG);
	remora_chan_close(ch);
	remora_transport_close(tp);
	return 0;
}

/* Receiver: after the parent's go, take NMSG from every sender, each pair in order, once. */
static int receiver(void *argp, int rd, int wr)
{
	struct role *r = argp;
	struct remora_transport *tp;
	struct remora_chan *ch;
	struct remora_counters k;
	uint64_t next[8] = { 0 }, go, total = 0, idle = 0;
	uint8_t buf[4096], want[4096];

	if (open_cn(r->cn, &tp, &ch))
		return 1;
	tu_send(wr, 1);
	TU_CHILD_CHECK(tu_recv(rd, &go) == 0, "no start");
	while (total < (uint64_t)NMSG * r->nsenders) {
		uint16_t src = 0xffff;
		struct hdr h;
		int n = remora_msg_recv(ch, &src, buf, sizeof(buf));

		if (n == -EAGAIN) {
			TU_CHILD_CHECK(++idle < 20000000, "stuck after %llu messages",
				       (unsigned long long)total);
			sched_yield();
			continue;
		}
		TU_CHILD_CHECK(n >= (int)sizeof(h), "recv = %d (%s)", n, remora_strerror(n));
		TU_CHILD_CHECK(src >= 1 && src <= r->nsenders, "message from cn %u", src);
		memcpy(&h, buf, sizeof(h));
		TU_CHILD_CHECK(h.from == src, "src %u but the message says %u", src, h.from);
		TU_CHILD_CHECK(h.seq == next[src], "from cn %u: seq %llu, expected %llu (%s)", src,
			       (unsigned long long)h.seq, (unsigned long long)next[src],
			       h.seq < next[src] ? "duplicate or reordered" : "lost");
		TU_CHILD_CHECK((uint32_t)n == make_msg(want, src, h.seq), "seq %llu: length %d",
			       (unsigned long long)h.seq, n);
		TU_CHILD_CHECK(memcmp(buf, want, (size_t)n) == 0, "seq %llu: payload corrupted",
			       (unsigned long long)h.seq);
		next[src]++;
		total++;
	}
	/* Exactly once: every sent message was received, so a duplicate would be waiting now. */
	for (int i = 0; i < 1000; i++) {
		uint16_t src;
		int n = remora_msg_recv(ch, &src, buf, sizeof(buf));

		TU_CHILD_CHECK(n == -EAGAIN, "extra message (recv = %d) after all %llu", n,
			       (unsigned long long)total);
	}
	remora_chan_counters(ch, &k);
	TU_CHILD_CHECK(k.msgs_recv == total, "msgs_recv %llu, received %llu",
		       (unsigned long long)k.msgs_recv, (unsigned long long)total);
	remora_chan_close(ch);
	remora_transport_close(tp);
	return 0;
}

static void need_msg(void)
{
	struct remora_caps caps;

	tu_open_pools(&tool, -1, 0, 0);
	tu_caps(tool.tp, &caps);
	if (!(caps.flags & REMORA_CAP_MSG))
		tu_skip("backend %s does not advertise REMORA_CAP_MSG", tu_backend());
	cr_assert_gt(caps.max_msg, sizeof(struct hdr), "caps.max_msg %u too small", caps.max_msg);
	max_msg = caps.max_msg;
}

static void run_exchange(unsigned nsenders)
{
	struct role rr = { .cn = RECV_CN, .nsenders = nsenders }, rs[4];
	struct tu_proc recv, send[4], all[5];
	unsigned which;
	uint64_t v;
	int rc;

	need_msg();
	tu_spawn(&recv, receiver, &rr);
	cr_assert_eq(tu_recv(recv.rd, &v), 0, "receiver did not start");
	for (unsigned i = 0; i < nsenders; i++) {
		rs[i] = (struct role){ .cn = 1 + (int)i };
		tu_spawn(&send[i], sender, &rs[i]);
		cr_assert_eq(tu_recv(send[i].rd, &v), 0, "sender %u did not start", i);
	}
	for (unsigned i = 0; i < nsenders; i++)
		tu_send(send[i].wr, 1);
	for (unsigned i = 0; i < nsenders; i++) {
		rc = tu_recv(send[i].rd, &v);
		if (rc) {
			rc = tu_proc_wait(&send[i]);
			cr_assert_fail("sender %u never met a full mailbox (exit %d)", i, rc);
		}
		cr_assert_gt(v, 0, "sender %u: -EAGAIN before any message", i);
	}
	tu_send(recv.wr, 1); /* every mailbox is full: start reading */
	all[0] = recv;
	for (unsigned i = 0; i < nsenders; i++)
		all[1 + i] = send[i];
	rc = tu_proc_wait_all(all, 1 + nsenders, &which);
	cr_assert_eq(rc, 0, "%s %u failed (exit %d, its line is above)",
		     which ? "sender" : "receiver", which ? which - 1 : 0, rc);
}

Test(msg, one_sender_in_order_exactly_once_with_backpressure)
{
	run_exchange(1);
}

Test(msg, three_senders_each_pair_in_order)
{
	run_exchange(3);
}

/* Sizes and destinations, checked on the sender; the receiver checks the edge sizes arrive. */
static int size_sender(void *argp, int rd, int wr)
{
	struct remora_transport *tp;
	struct remora_chan *ch;
	static uint8_t buf[1 << 16];
	uint64_t go;
	int rc;

	(void)argp;
	if (open_cn(1, &tp, &ch))
		return 1;
	TU_CHILD_CHECK(tu_recv(rd, &go) == 0, "no start");
	memset(buf, 0xab, sizeof(buf));
	rc = remora_msg_send(ch, RECV_CN, buf, max_msg + 1);
	TU_CHILD_CHECK(rc == -EMSGSIZE, "max_msg + 1 bytes: %d (%s)", rc, remora_strerror(rc));
	rc = remora_msg_send(ch, RECV_CN, buf, sizeof(buf));
	TU_CHILD_CHECK(rc == -EMSGSIZE, "64 KiB: %d (%s)", rc, remora_strerror(rc));
	rc = remora_msg_send(ch, REMORA_MAX_CN, buf, 8);
	TU_CHILD_CHECK(rc == -REMORA_ENODE, "to cn %d: %d (%s)", REMORA_MAX_CN, rc,
		       remora_strerror(rc));
	rc = remora_msg_send(ch, 0xffff, buf, 8);
	TU_CHILD_CHECK(rc == -REMORA_ENODE, "to cn 0xffff: %d (%s)", rc, remora_strerror(rc));
	rc = remora_msg_send(ch, RECV_CN, buf, max_msg);
	TU_CHILD_CHECK(rc == 0, "exactly max_msg bytes: %d (%s)", rc, remora_strerror(rc));
	rc = remora_msg_send(ch, RECV_CN, buf, 0);
	TU_CHILD_CHECK(rc == 0, "empty message: %d (%s)", rc, remora_strerror(rc));
	tu_send(wr, 1);
	remora_chan_close(ch);
	remora_transport_close(tp);
	return 0;
}

static int size_receiver(void *argp, int rd, int wr)
{
	struct remora_transport *tp;
	struct remora_chan *ch;
	static uint8_t buf[1 << 16];
	uint16_t src = 0;
	uint64_t go;
	int n;

	(void)argp;
	if (open_cn(RECV_CN, &tp, &ch))
		return 1;
	tu_send(wr, 1);
	TU_CHILD_CHECK(tu_recv(rd, &go) == 0, "no start");
	n = remora_msg_recv(ch, &src, buf, sizeof(buf));
	TU_CHILD_CHECK(n == (int)max_msg, "first message: %d bytes, want %u (an oversize one "
		       "leaked through?)", n, max_msg);
	TU_CHILD_CHECK(src == 1, "from %u", src);
	for (uint32_t i = 0; i < max_msg; i++)
		TU_CHILD_CHECK(buf[i] == 0xab, "byte %u", i);
	n = remora_msg_recv(ch, &src, buf, sizeof(buf));
	TU_CHILD_CHECK(n == 0, "empty message: recv = %d", n);
	n = remora_msg_recv(ch, &src, buf, sizeof(buf));
	TU_CHILD_CHECK(n == -EAGAIN, "nothing else: recv = %d", n);
	remora_chan_close(ch);
	remora_transport_close(tp);
	return 0;
}

Test(msg, sizes_and_bad_destinations)
{
	struct tu_proc s, r;
	uint64_t v;
	int rc;

	need_msg();
	tu_spawn(&r, size_receiver, NULL);
	cr_assert_eq(tu_recv(r.rd, &v), 0);
	tu_spawn(&s, size_sender, NULL);
	tu_send(s.wr, 1);
	if (tu_recv(s.rd, &v)) {
		rc = tu_proc_wait(&s);
		cr_assert_fail("sender failed (exit %d, its line is above)", rc);
	}
	tu_send(r.wr, 1);
	rc = tu_proc_wait(&s);
	cr_assert_eq(rc, 0, "sender failed (exit %d, its line is above)", rc);
	rc = tu_proc_wait(&r);
	cr_assert_eq(rc, 0, "receiver failed (exit %d, its line is above)", rc);
}

Test(msg, not_a_compute_node)
{
	struct remora_chan *ch;
	uint16_t src;
	uint8_t b[8] = { 0 };
	int rc;

	need_msg();
	rc = remora_chan_open(tool.tp, &ch);
	cr_assert_eq(rc, 0);
	tool.ch = ch;
	rc = remora_msg_send(ch, 1, b, sizeof(b));
	cr_assert_eq(rc, -REMORA_ENODE, "send from a non-CN process = %d (%s)", rc,
		     remora_strerror(rc));
	rc = remora_msg_recv(ch, &src, b, sizeof(b));
	cr_assert_eq(rc, -REMORA_ENODE, "recv in a non-CN process = %d (%s)", rc,
		     remora_strerror(rc));
}

/*
 * A whole cluster crashed with a message queued: the message segment stays (only a clean last
 * close removes it), and the compute nodes that start next reuse the dead ones' ids. The
 * first of them to join finds nobody else holding the segment and empties it, so nothing sent
 * before the crash reaches them (an old lock grant or RPC reply would pass for a new one).
 * Negative control: keep_stale_messages (the receiver keeps the queued message).
 */
static int crashing_sender(void *argp, int rd, int wr)
{
	struct remora_transport *tp;
	struct remora_chan *ch;
	uint8_t b[16] = { 0x5a };
	int rc;

	(void)argp;
	(void)rd;
	if (open_cn(1, &tp, &ch))
		return 1;
	for (uint16_t dst = RECV_CN; dst <= RECV_CN + 1; dst++) {
		rc = remora_msg_send(ch, dst, b, sizeof(b));
		TU_CHILD_CHECK(rc == 0, "send to %u = %d (%s)", dst, rc, remora_strerror(rc));
	}
	tu_send(wr, 1);
	return 0; /* exits without closing anything, as a crash does */
}

struct late {
	const char *mutation;
	int cn;
};

/*
 * Joins after the crash, waits until every receiver has joined (one that closed first, the
 * last user then, would remove the segment under a later one), and counts what it receives.
 */
static int late_receiver(void *argp, int rd, int wr)
{
	const struct late *l = argp;
	struct remora_transport *tp;
	struct remora_chan *ch;
	uint8_t b[64];
	uint16_t src;
	uint64_t got = 0, go;

	if (l->mutation)
		TU_CHILD_CHECK(rt_transport_mutate_opens(l->mutation) == 0, "mutation %s",
			       l->mutation);
	if (open_cn(l->cn, &tp, &ch))
		return 1;
	tu_send(wr, 1);
	TU_CHILD_CHECK(tu_recv(rd, &go) == 0, "no start");
	for (unsigned i = 0; i < 2000; i++) {
		int n = remora_msg_recv(ch, &src, b, sizeof(b));

		TU_CHILD_CHECK(n >= 0 || n == -EAGAIN, "recv = %d", n);
		got += n >= 0;
		sched_yield();
	}
	tu_send(wr, got);
	remora_chan_close(ch);
	remora_transport_close(tp);
	return 0;
}

/* Messages the receivers (cn RECV_CN, then RECV_CN + 1 if two) got after the crash. */
static uint64_t received_after_crash(const char *mutation, unsigned receivers)
{
	struct late l[2] = { { mutation, RECV_CN }, { mutation, RECV_CN + 1 } };
	struct tu_proc s, r[2];
	uint64_t v = 0, sum = 0;

	need_msg();
	if (strcmp(tu_backend(), "shm") && strcmp(tu_backend(), "pmem"))
		tu_skip("backend %s keeps no message segment", tu_backend());
	tu_spawn(&s, crashing_sender, NULL);
	cr_assert_eq(tu_recv(s.rd, &v), 0, "the sender did not send");
	cr_assert_eq(tu_proc_wait(&s), 0);
	for (unsigned i = 0; i < receivers; i++)
		tu_spawn(&r[i], late_receiver, &l[i]);
	for (unsigned i = 0; i < receivers; i++)
		cr_assert_eq(tu_recv(r[i].rd, &v), 0, "receiver %u did not join", i);
	for (unsigned i = 0; i < receivers; i++)
		tu_send(r[i].wr, 1);
	for (unsigned i = 0; i < receivers; i++) {
		cr_assert_eq(tu_recv(r[i].rd, &v), 0, "receiver %u did not report", i);
		sum += v;
	}
	for (unsigned i = 0; i < receivers; i++)
		cr_assert_eq(tu_proc_wait(&r[i]), 0);
	return sum;
}

Test(msg, crashed_clusters_messages_dropped)
{
	uint64_t got = received_after_crash(NULL, 1);

	cr_assert_eq(got, 0, "%llu message(s) of the crashed cluster delivered",
		     (unsigned long long)got);
}

/*
 * Two compute nodes join the leftover segment at once: one of them must still empty it (a
 * version that took the shared lock before trying the exclusive one let both skip it).
 */
Test(msg, crashed_clusters_messages_dropped_two_joiners)
{
	uint64_t got = received_after_crash(NULL, 2);

	cr_assert_eq(got, 0, "%llu message(s) of the crashed cluster delivered",
		     (unsigned long long)got);
}

Test(msg, crashed_clusters_messages_kept_when_mutated)
{
	uint64_t got = received_after_crash("keep_stale_messages", 2);

	cr_assert_eq(got, 2, "keep_stale_messages: %llu message(s), want the two stale ones",
		     (unsigned long long)got);
}

/*
 * One compute node restarts while the others keep the segment open (no whole-cluster crash, so
 * no joiner empties it): messages sent to its previous process, and messages its previous
 * process sent, reach nobody; messages of the new process do. Each node is a child that the
 * parent drives with commands.
 */
enum node_cmd {
	NODE_SEND = 1,  /* arg: destination cn */
	NODE_COUNT = 2, /* receive for a while, report how many arrived */
	NODE_CRASH = 3, /* exit without closing */
	NODE_CLOSE = 4,
};

struct node {
	int cn;
	const char *mutation; /* transport mutation set before its open, or NULL */
};

static uint64_t node_count(struct remora_chan *ch)
{
	uint8_t b[64];
	uint16_t src;
	uint64_t got = 0;

	for (unsigned i = 0; i < 2000; i++) {
		int n = remora_msg_recv(ch, &src, b, sizeof(b));

		if (n < 0 && n != -EAGAIN)
			return UINT64_MAX;
		got += n >= 0;
		sched_yield();
	}
	return got;
}

static int scripted_node(void *argp, int rd, int wr)
{
	const struct node *nd = argp;
	struct remora_transport *tp;
	struct remora_chan *ch;
	uint8_t b[16] = { 0x33 };
	uint64_t cmd;

	if (nd->mutation)
		TU_CHILD_CHECK(rt_transport_mutate_opens(nd->mutation) == 0, "mutation");
	if (open_cn(nd->cn, &tp, &ch))
		return 1;
	tu_send(wr, 1);
	while (tu_recv(rd, &cmd) == 0) {
		int rc;

		switch (cmd & 0xff) {
		case NODE_SEND:
			rc = remora_msg_send(ch, (uint16_t)(cmd >> 8), b, sizeof(b));
			TU_CHILD_CHECK(rc == 0, "cn %d: send = %d", nd->cn, rc);
			tu_send(wr, 1);
			break;
		case NODE_COUNT:
			tu_send(wr, node_count(ch));
			break;
		case NODE_CRASH:
			return 0;
		default:
			remora_chan_close(ch);
			remora_transport_close(tp);
			return 0;
		}
	}
	return 1;
}

/* Sends cmd to node p and returns its answer. */
static uint64_t node_do(struct tu_proc *p, uint64_t cmd)
{
	uint64_t v = UINT64_MAX;

	tu_send(p->wr, cmd);
	cr_assert_eq(tu_recv(p->rd, &v), 0, "a node did not answer command %llu",
		     (unsigned long long)cmd);
	return v;
}

static void node_start(struct tu_proc *p, struct node *nd)
{
	uint64_t v;

	tu_spawn(p, scripted_node, nd);
	cr_assert_eq(tu_recv(p->rd, &v), 0, "cn %d did not open", nd->cn);
}

static void node_end(struct tu_proc *p, enum node_cmd how)
{
	tu_send(p->wr, how);
	cr_assert_eq(tu_proc_wait(p), 0);
}

#define SEND_TO(cn) (NODE_SEND | (uint64_t)(cn) << 8)

struct restart_got {
	uint64_t restarted; /* what the restarted receiver got */
	uint64_t keeper;    /* what the node that never stopped got */
};

/*
 * keeper (cn 2) holds the segment throughout. cn RECV_CN is sent two messages and crashes;
 * cn 1 sends those and one to the keeper, then crashes. Both restart; the new cn 1 sends one
 * message to each.
 */
static struct restart_got restart_one_node(const char *mutation)
{
	struct node keep = { 2, mutation }, recv = { RECV_CN, mutation }, send = { 1, NULL };
	struct tu_proc k, r, s;
	struct restart_got got;

	need_msg();
	if (strcmp(tu_backend(), "shm") && strcmp(tu_backend(), "pmem"))
		tu_skip("backend %s keeps no message segment", tu_backend());
	node_start(&k, &keep);
	node_start(&r, &recv);
	node_start(&s, &send);
	node_do(&s, SEND_TO(RECV_CN));
	node_do(&s, SEND_TO(RECV_CN));
	node_do(&s, SEND_TO(keep.cn));
	node_end(&s, NODE_CRASH);
	node_end(&r, NODE_CRASH);
	node_start(&r, &recv);
	node_start(&s, &send);
	node_do(&s, SEND_TO(RECV_CN));
	node_do(&s, SEND_TO(keep.cn));
	got.restarted = node_do(&r, NODE_COUNT);
	got.keeper = node_do(&k, NODE_COUNT);
	node_end(&s, NODE_CLOSE);
	node_end(&r, NODE_CLOSE);
	node_end(&k, NODE_CLOSE);
	return got;
}

Test(msg, restarted_nodes_old_messages_dropped)
{
	struct restart_got got = restart_one_node(NULL);

	cr_assert_eq(got.restarted, 1, "the restarted receiver got %llu message(s), want only "
		     "the one sent to it after its restart", (unsigned long long)got.restarted);
	cr_assert_eq(got.keeper, 1, "the keeper got %llu message(s), want only the restarted "
		     "sender's new one", (unsigned long long)got.keeper);
}

Test(msg, restarted_nodes_old_messages_kept_when_mutated)
{
	struct restart_got got = restart_one_node("keep_stale_messages");

	cr_assert_eq(got.restarted, 3, "keep_stale_messages: the restarted receiver got %llu, "
		     "want all 3", (unsigned long long)got.restarted);
	cr_assert_eq(got.keeper, 2, "keep_stale_messages: the keeper got %llu, want both",
		     (unsigned long long)got.keeper);
}

/* A message sent to a compute node that has not opened yet is for its first process. */
Test(msg, message_before_the_first_open_arrives)
{
	struct node send = { 1, NULL }, recv = { RECV_CN, NULL };
	struct tu_proc s, r;
	uint64_t got;

	need_msg();
	if (strcmp(tu_backend(), "shm") && strcmp(tu_backend(), "pmem"))
		tu_skip("backend %s needs the receiver's locator first", tu_backend());
	node_start(&s, &send);
	node_do(&s, SEND_TO(RECV_CN));
	node_start(&r, &recv);
	got = node_do(&r, NODE_COUNT);
	node_end(&r, NODE_CLOSE);
	node_end(&s, NODE_CLOSE);
	cr_assert_eq(got, 1, "the first process of cn %d got %llu message(s) sent before it "
		     "opened, want 1", RECV_CN, (unsigned long long)got);
}
