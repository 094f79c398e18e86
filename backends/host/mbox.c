/* SPDX-License-Identifier: MIT */
/* Compute-node mailboxes in a shared segment; protocol and layout in mbox.h. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "mutate/mutate.h"
#include "transport/core.h"
#include "transport/mutate.h"
#include "cpuverbs.h"
#include "mbox.h"

#define JOIN_WAIT_MS 5000

int rt_mbox_path(const char *cluster, const char *dir, char *buf, size_t size)
{
	char key[128];
	int rc = rt_seg_key(cluster, dir, key, sizeof(key));

	return rc ? rc : remora_backend_cluster_path(RT_MBOX_DIR, key, "msg", buf, size);
}

int rt_mbox_unlink(const char *cluster, const char *dir)
{
	char path[PATH_MAX];
	int rc = rt_mbox_path(cluster, dir, path, sizeof(path));

	if (rc)
		return rc;
	if (unlink(path) < 0 && errno != ENOENT)
		return -errno;
	return 0;
}

static size_t seg_len(uint32_t max_cn)
{
	return sizeof(struct rt_mbox_hdr) + (size_t)max_cn * max_cn * sizeof(struct rt_mbox_ring);
}

static struct rt_mbox_ring *ring_of(const struct rt_mbox *m, unsigned src, unsigned dst)
{
	struct rt_mbox_ring *rings = (struct rt_mbox_ring *)(void *)(m->hdr + 1);

	return &rings[(size_t)src * m->max_cn + dst];
}

static int map_seg(struct rt_mbox *m, int fd, size_t len, const char *path)
{
	void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);

	if (p == MAP_FAILED)
		return remora_backend_error(m->tp, -errno, "%s: mmap: %s", path, strerror(errno));
	m->hdr = p;
	m->len = len;
	return 0;
}

/* We created the file: size it, map it, fill in the header and publish it with `ready`. */
static int seg_create(struct rt_mbox *m, int fd, uint32_t max_cn, const char *path)
{
	size_t len = seg_len(max_cn);
	int rc;

	/* Blocks reserved now: a full /dev/shm is an error here, not SIGBUS at the first send. */
	rc = posix_fallocate(fd, 0, (off_t)len);
	if (rc == EOPNOTSUPP || rc == EINVAL)
		rc = ftruncate(fd, (off_t)len) < 0 ? errno : 0;
	if (rc)
		return remora_backend_error(m->tp, -rc, "%s: cannot reserve %zu bytes for the "
					    "message segment: %s", path, len, strerror(rc));
	rc = map_seg(m, fd, len, path);
	if (rc)
		return rc;
	m->hdr->magic = RT_MBOX_MAGIC;
	m->hdr->version = RT_MBOX_VERSION;
	m->hdr->max_cn = max_cn;
	m->hdr->slots = RT_MBOX_SLOTS;
	m->hdr->slot_bytes = RT_MBOX_SLOT_BYTES;
	__atomic_store_n(&m->hdr->ready, 1, __ATOMIC_RELEASE);
	m->max_cn = max_cn;
	return 0;
}

/* Copies the header if the segment is initialized: 1, 0 (not yet), or a negative errno. */
static int seg_peek(struct rt_mbox *m, int fd, const char *path, struct rt_mbox_hdr *out,
		    off_t *size)
{
	struct rt_mbox_hdr *h;
	struct stat st;
	bool ready;

	if (fstat(fd, &st) < 0)
		return remora_backend_error(m->tp, -errno, "%s: %s", path, strerror(errno));
	if ((size_t)st.st_size < sizeof(*out))
		return 0;
	h = mmap(NULL, sizeof(*h), PROT_READ, MAP_SHARED, fd, 0);
	if (h == MAP_FAILED)
		return remora_backend_error(m->tp, -errno, "%s: mmap: %s", path, strerror(errno));
	ready = __atomic_load_n(&h->ready, __ATOMIC_ACQUIRE);
	if (ready)
		memcpy(out, h, sizeof(*out));
	munmap(h, sizeof(*h));
	*size = st.st_size;
	return ready;
}

/* Reads the header of a segment someone else creates; waits (bounded) until it is ready. */
static int seg_wait_ready(struct rt_mbox *m, int fd, const char *path, struct rt_mbox_hdr *out,
			  off_t *size)
{
	const struct timespec ms = { .tv_sec = 0, .tv_nsec = 1000000 };

	for (unsigned waited = 0;; waited++) {
		int rc = seg_peek(m, fd, path, out, size);

		if (rc)
			return rc < 0 ? rc : 0;
		if (waited >= JOIN_WAIT_MS)
			return remora_backend_error(m->tp, -ETIMEDOUT,
						    "%s: never initialized (stale file of a crashed "
						    "process? run remora clean)", path);
		nanosleep(&ms, NULL);
	}
}

/* Takes (or drops to) the shared lock every user of the segment holds. */
static int seg_share(struct rt_mbox *m, int fd, const char *path)
{
	if (flock(fd, LOCK_SH) < 0)
		return remora_backend_error(m->tp, -errno, "%s: flock: %s", path, strerror(errno));
	return 0;
}

/* Set by tests only (negative control of seg_drop_stale); read when a segment is joined. */
static uint64_t open_mutations;

int rt_transport_mutate_opens(const char *name)
{
	uint64_t mask = __atomic_load_n(&open_mutations, __ATOMIC_RELAXED);

	if (mut_set(&mask, MUT_TRANSPORT, name))
		return -EINVAL;
	__atomic_store_n(&open_mutations, mask, __ATOMIC_RELAXED);
	return 0;
}

/*
 * A segment that a joiner could lock exclusively was left by processes that all crashed (every
 * live user holds a shared lock, and the last clean close removes the file). Its queued
 * messages were meant for compute nodes that are gone, and the ones starting now reuse their
 * ids, coordinator slots and lock epochs, so an old lock grant or RPC reply would pass for a
 * new one (docs/declock.md, 1.6): empty every ring, then drop to the shared lock. Joiners that
 * start together block on their shared lock until then; flock's downgrade is not atomic, so in
 * its gap another joiner may win the exclusive lock and empty the rings again: harmless, since
 * nobody holds a shared lock then, so no open has returned and nobody has sent.
 */
static int seg_drop_stale(struct rt_mbox *m, int fd, const char *path)
{
	if (!m->keep_stale) {
		/* the dead nodes' incarnations go too: messages sent to a node not yet back are
		 * stamped for its first incarnation of the new cluster, 1 */
		for (unsigned cn = 0; cn < m->max_cn; cn++)
			__atomic_store_n(&m->hdr->incarnation[cn], 0, __ATOMIC_RELAXED);
		for (unsigned src = 0; src < m->max_cn; src++) {
			for (unsigned dst = 0; dst < m->max_cn; dst++) {
				struct rt_mbox_ring *r = ring_of(m, src, dst);

				__atomic_store_n(&r->head, 0, __ATOMIC_RELAXED);
				__atomic_store_n(&r->tail, 0, __ATOMIC_RELEASE);
			}
		}
	}
	return seg_share(m, fd, path);
}

static int seg_join(struct rt_mbox *m, int fd, const char *path, bool alone)
{
	struct rt_mbox_hdr h;
	off_t size = 0;
	int rc;

	/*
	 * Not initialized yet: its creator is between its create and its shared lock, and waits
	 * for our exclusive one. Join as everyone does (a leftover segment is always initialized).
	 */
	if (alone && seg_peek(m, fd, path, &h, &size) != 1) {
		rc = seg_share(m, fd, path);
		if (rc)
			return rc;
		alone = false;
	}
	rc = seg_wait_ready(m, fd, path, &h, &size);
	if (rc)
		return rc;
	if (h.magic != RT_MBOX_MAGIC || h.version != RT_MBOX_VERSION ||
	    h.slots != RT_MBOX_SLOTS || h.slot_bytes != RT_MBOX_SLOT_BYTES || h.max_cn == 0 ||
	    h.max_cn > REMORA_MAX_CN || (size_t)size < seg_len(h.max_cn))
		return remora_backend_error(m->tp, -REMORA_ELAYOUT,
					    "%s: message segment of another layout", path);
	if ((uint32_t)m->self_cn >= h.max_cn)
		return remora_backend_error(m->tp, -REMORA_ECONFIG,
					    "%s: cluster has max_cn %u, self_cn is %d", path,
					    h.max_cn, m->self_cn);
	m->max_cn = h.max_cn;
	rc = map_seg(m, fd, seg_len(h.max_cn), path);
	return rc || !alone ? rc : seg_drop_stale(m, fd, path);
}

int rt_mbox_open(struct rt_mbox *m, struct remora_transport *tp, const char *cluster,
		 const char *dir, uint32_t max_cn, int self_cn)
{
	char *path = m->path;
	bool created = false, alone = false;
	int fd = -1, rc;

	memset(m, 0, sizeof(*m));
	m->tp = tp;
	m->self_cn = self_cn;
	m->fd = -1;
	m->keep_stale = mut_on(__atomic_load_n(&open_mutations, __ATOMIC_RELAXED),
			       MUT_KEEP_STALE_MESSAGES);
	if (self_cn < 0)
		return 0;
	rc = rt_mbox_path(cluster, dir, path, sizeof(m->path));
	if (rc)
		return remora_backend_error(tp, rc, "message segment name too long");
	/*
	 * Every user holds a shared flock, so the last one to close can tell it is the last and
	 * remove the segment. A file the last user unlinked while we opened it is not ours: open
	 * again until the name and the locked file agree.
	 */
	for (unsigned tries = 0; fd < 0 && tries < 100; tries++) {
		struct stat a, b;

		fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
		created = fd >= 0;
		if (fd < 0 && errno == EEXIST)
			fd = open(path, O_RDWR | O_CLOEXEC);
		if (fd < 0 && errno == ENOENT)
			continue;
		if (fd < 0)
			return remora_backend_error(tp, -errno, "%s: %s", path, strerror(errno));
		/* A joiner tries the exclusive lock first (seg_drop_stale), before any shared one. */
		alone = !created && flock(fd, LOCK_EX | LOCK_NB) == 0;
		if ((alone || flock(fd, LOCK_SH) == 0) && fstat(fd, &a) == 0 && stat(path, &b) == 0 &&
		    a.st_ino == b.st_ino && a.st_dev == b.st_dev)
			break;
		close(fd);
		fd = -1;
	}
	if (fd < 0)
		return remora_backend_error(tp, -EAGAIN, "%s: removed and created again under us",
					    path);
	if (created) {
		rc = seg_create(m, fd, max_cn, path);
		if (rc)
			unlink(path);
	} else {
		rc = seg_join(m, fd, path, alone);
	}
	m->fd = fd;
	if (rc) {
		rt_mbox_close(m);
		return rc;
	}
	/* after the drain and the shared lock: a new incarnation, which earlier messages miss */
	m->incarnation = __atomic_add_fetch(&m->hdr->incarnation[self_cn], 1, __ATOMIC_SEQ_CST);
	return 0;
}

void rt_mbox_close(struct rt_mbox *m)
{
	struct stat a, b;

	if (m->hdr)
		munmap(m->hdr, m->len);
	m->hdr = NULL;
	if (m->fd < 0)
		return;
	/* nobody else holds it: the last user removes it (unless it was replaced meanwhile) */
	if (flock(m->fd, LOCK_EX | LOCK_NB) == 0 && fstat(m->fd, &a) == 0 &&
	    stat(m->path, &b) == 0 && a.st_ino == b.st_ino && a.st_dev == b.st_dev)
		unlink(m->path);
	close(m->fd);
	m->fd = -1;
}

/* The incarnation of cn that a message sent now is for: its current one, or its first. */
static uint16_t stamp_for(const struct rt_mbox *m, unsigned cn)
{
	uint32_t inc = __atomic_load_n(&m->hdr->incarnation[cn], __ATOMIC_ACQUIRE);

	return (uint16_t)(inc ? inc : 1);
}

/* Sent to an earlier incarnation of this node, or by one of its sender's that was replaced. */
static bool slot_stale(const struct rt_mbox *m, const struct rt_mbox_slot *s, unsigned src)
{
	return !m->keep_stale && (s->to_inc != (uint16_t)m->incarnation ||
				  s->from_inc != stamp_for(m, src));
}

int rt_mbox_send(struct rt_mbox *m, uint16_t dst_cn, const void *buf, uint32_t len,
		 uint64_t deliver_at)
{
	struct rt_mbox_ring *r;
	struct rt_mbox_slot *s;
	uint64_t tail;

	if (!m->hdr || dst_cn >= m->max_cn)
		return -REMORA_ENODE;
	if (len > RT_MBOX_MAX)
		return -EMSGSIZE;
	r = ring_of(m, (unsigned)m->self_cn, dst_cn);
	rt_cpu_lock(&m->send_lock[dst_cn]);
	tail = __atomic_load_n(&r->tail, __ATOMIC_RELAXED);
	if (tail - __atomic_load_n(&r->head, __ATOMIC_ACQUIRE) >= RT_MBOX_SLOTS) {
		rt_cpu_unlock(&m->send_lock[dst_cn]);
		return -EAGAIN;
	}
	s = &r->slots[tail % RT_MBOX_SLOTS];
	s->len = len;
	s->to_inc = stamp_for(m, dst_cn);
	s->from_inc = (uint16_t)m->incarnation;
	s->deliver_at = deliver_at;
	if (len)
		memcpy(s->data, buf, len);
	__atomic_store_n(&r->tail, tail + 1, __ATOMIC_RELEASE);
	rt_cpu_unlock(&m->send_lock[dst_cn]);
	return 0;
}

/* Drops the stale messages at the front of ring r (from src, up to tail); returns its head. */
static uint64_t drop_stale(struct rt_mbox *m, struct rt_mbox_ring *r, unsigned src,
			   uint64_t tail)
{
	uint64_t head = __atomic_load_n(&r->head, __ATOMIC_RELAXED);

	while (head != tail && slot_stale(m, &r->slots[head % RT_MBOX_SLOTS], src)) {
		__atomic_store_n(&r->head, ++head, __ATOMIC_RELEASE);
	}
	return head;
}

/*
 * Takes the oldest message of the first ring whose oldest message has arrived by now, starting
 * after the last sender served.
 */
int rt_mbox_recv(struct rt_mbox *m, uint16_t *src_cn, void *buf, uint32_t cap, uint64_t now)
{
	int rc = -EAGAIN;

	if (!m->hdr)
		return -REMORA_ENODE;
	rt_cpu_lock(&m->recv_lock);
	for (unsigned k = 0; k < m->max_cn; k++) {
		unsigned src = (m->recv_next + k) % m->max_cn;
		struct rt_mbox_ring *r = ring_of(m, src, (unsigned)m->self_cn);
		uint64_t tail = __atomic_load_n(&r->tail, __ATOMIC_ACQUIRE);
		uint64_t head = drop_stale(m, r, src, tail);
		struct rt_mbox_slot *s;

		if (head == tail)
			continue;
		s = &r->slots[head % RT_MBOX_SLOTS];
		if (s->deliver_at > now)
			continue; /* still on the wire, and so are the later ones of this sender */
		if (s->len > RT_MBOX_MAX) { /* a corrupt slot: drop it rather than over-read */
			__atomic_store_n(&r->head, head + 1, __ATOMIC_RELEASE);
			rc = -REMORA_EPROTO;
			break;
		}
		if (s->len > cap) {
			rc = -EMSGSIZE;
			break;
		}
		if (s->len)
			memcpy(buf, s->data, s->len);
		rc = (int)s->len;
		*src_cn = (uint16_t)src;
		__atomic_store_n(&r->head, head + 1, __ATOMIC_RELEASE);
		m->recv_next = (src + 1) % m->max_cn;
		break;
	}
	rt_cpu_unlock(&m->recv_lock);
	return rc;
}
