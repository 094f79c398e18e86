/* SPDX-License-Identifier: MIT */
/*
 * Compute-node messages: one segment /dev/shm/remora-<cluster>-msg holding a single-producer
 * single-consumer ring per (sender, receiver) pair, RSHM_MSG_SLOTS fixed slots each. Lock-free
 * between processes: the sender alone writes tail, the receiver alone writes head, and the
 * release/acquire pair on those words publishes the slot contents. Several threads of one
 * process sending to the same receiver (or receiving) are serialized by a process-local lock,
 * which keeps each ring single-producer and single-consumer.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "rshm.h"
#include "transport/cpuverbs.h"

#define CREATE_WAIT_MS 5000

int rshm_msg_path(const char *cluster, char *buf, size_t size)
{
	char name[128];
	int rc = remora_backend_cluster_name(cluster, "msg", name, sizeof(name));

	if (rc)
		return rc;
	if ((size_t)snprintf(buf, size, "%s/%s", RSHM_RUN_DIR, name) >= size)
		return -ENAMETOOLONG;
	return 0;
}

static size_t seg_bytes(uint32_t max_cn)
{
	return sizeof(struct rshm_msg_hdr) + (size_t)max_cn * max_cn * sizeof(struct rshm_ring);
}

static struct rshm_ring *ring(struct rshm_tp *t, unsigned src, unsigned dst)
{
	struct rshm_ring *rings = (struct rshm_ring *)(t->msg + 1);

	return &rings[(size_t)src * t->msg_max_cn + dst];
}

static void sleep_ms(unsigned ms)
{
	struct timespec ts = { .tv_sec = 0, .tv_nsec = (long)ms * 1000000 };

	nanosleep(&ts, NULL);
}

static int msg_create(struct rshm_tp *t, int fd, const char *path)
{
	size_t len = seg_bytes(t->cfg.max_cn);
	struct rshm_msg_hdr *h;

	if (ftruncate(fd, (off_t)len) < 0)
		return remora_backend_error(t->tp, -errno, "%s: %s", path, strerror(errno));
	h = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (h == MAP_FAILED)
		return remora_backend_error(t->tp, -errno, "%s: mmap: %s", path, strerror(errno));
	h->magic = RSHM_MSG_MAGIC;
	h->version = RSHM_MSG_VERSION;
	h->max_cn = t->cfg.max_cn;
	h->slots = RSHM_MSG_SLOTS;
	h->slot_bytes = RSHM_MSG_SLOT_BYTES;
	__atomic_store_n(&h->ready, 1, __ATOMIC_RELEASE);
	t->msg = h;
	t->msg_len = len;
	t->msg_max_cn = h->max_cn;
	return 0;
}

/* Someone else created the segment: wait until it is sized and initialized, then check it. */
static int msg_join(struct rshm_tp *t, int fd, const char *path)
{
	struct rshm_msg_hdr *h;
	struct stat st;
	unsigned waited = 0;
	size_t len;

	for (;;) {
		if (fstat(fd, &st) < 0)
			return -errno;
		if ((size_t)st.st_size >= sizeof(*h)) {
			h = mmap(NULL, sizeof(*h), PROT_READ, MAP_SHARED, fd, 0);
			if (h == MAP_FAILED)
				return -errno;
			if (__atomic_load_n(&h->ready, __ATOMIC_ACQUIRE))
				break;
			munmap(h, sizeof(*h));
		}
		if (waited >= CREATE_WAIT_MS)
			return remora_backend_error(t->tp, -ETIMEDOUT,
						    "%s: never initialized (stale? run cleanup)",
						    path);
		sleep_ms(1);
		waited++;
	}
	if (h->magic != RSHM_MSG_MAGIC || h->version != RSHM_MSG_VERSION ||
	    h->slots != RSHM_MSG_SLOTS || h->slot_bytes != RSHM_MSG_SLOT_BYTES ||
	    h->max_cn == 0 || h->max_cn > REMORA_MAX_CN ||
	    (size_t)st.st_size < seg_bytes(h->max_cn)) {
		munmap(h, sizeof(*h));
		return remora_backend_error(t->tp, -REMORA_ELAYOUT,
					    "%s: message segment of another layout", path);
	}
	t->msg_max_cn = h->max_cn;
	munmap(h, sizeof(*h));
	if ((uint32_t)t->cfg.self_cn >= t->msg_max_cn)
		return remora_backend_error(t->tp, -REMORA_ECONFIG,
					    "%s: cluster has max_cn %u, self_cn is %d", path,
					    t->msg_max_cn, t->cfg.self_cn);
	len = seg_bytes(t->msg_max_cn);
	t->msg = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (t->msg == MAP_FAILED) {
		t->msg = NULL;
		return -errno;
	}
	t->msg_len = len;
	return 0;
}

int rshm_msg_open(struct rshm_tp *t)
{
	char path[PATH_MAX];
	int fd, rc;

	rc = rshm_msg_path(t->cluster, path, sizeof(path));
	if (rc)
		return remora_backend_error(t->tp, rc, "message segment name too long");
	fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (fd >= 0) {
		rc = msg_create(t, fd, path);
		if (rc)
			unlink(path);
	} else if (errno == EEXIST) {
		fd = open(path, O_RDWR | O_CLOEXEC);
		if (fd < 0)
			return remora_backend_error(t->tp, -errno, "%s: %s", path, strerror(errno));
		rc = msg_join(t, fd, path);
	} else {
		return remora_backend_error(t->tp, -errno, "%s: %s", path, strerror(errno));
	}
	close(fd);
	return rc;
}

void rshm_msg_close(struct rshm_tp *t)
{
	if (t->msg)
		munmap(t->msg, t->msg_len);
	t->msg = NULL;
}

int rshm_msg_send_at(void *cpriv, uint16_t dst_cn, const void *buf, uint32_t len,
		     uint64_t deliver_at)
{
	struct rshm_chan *c = cpriv;
	struct rshm_tp *t = c->t;
	struct rshm_ring *r;
	struct rshm_msg_slot *s;
	uint64_t tail;

	if (!t->msg || dst_cn >= t->msg_max_cn)
		return -REMORA_ENODE;
	r = ring(t, (unsigned)t->cfg.self_cn, dst_cn);
	rt_cpu_lock(&t->send_lock[dst_cn]);
	tail = __atomic_load_n(&r->tail, __ATOMIC_RELAXED);
	if (tail - __atomic_load_n(&r->head, __ATOMIC_ACQUIRE) >= RSHM_MSG_SLOTS) {
		rt_cpu_unlock(&t->send_lock[dst_cn]);
		return -EAGAIN;
	}
	s = &r->slots[tail % RSHM_MSG_SLOTS];
	s->len = len;
	s->deliver_at = deliver_at;
	if (len)
		memcpy(s->data, buf, len);
	__atomic_store_n(&r->tail, tail + 1, __ATOMIC_RELEASE);
	rt_cpu_unlock(&t->send_lock[dst_cn]);
	return 0;
}

int rshm_msg_send(void *cpriv, uint16_t dst_cn, const void *buf, uint32_t len)
{
	return rshm_msg_send_at(cpriv, dst_cn, buf, len, 0);
}

/*
 * Takes the oldest message of the first ring whose oldest message has arrived (deliver_at <=
 * now), starting after the last sender served.
 */
int rshm_msg_recv_at(void *cpriv, uint16_t *src_cn, void *buf, uint32_t cap, uint64_t now)
{
	struct rshm_chan *c = cpriv;
	struct rshm_tp *t = c->t;
	unsigned self = (unsigned)t->cfg.self_cn;
	int rc = -EAGAIN;

	if (!t->msg)
		return -REMORA_ENODE;
	rt_cpu_lock(&t->recv_lock);
	for (unsigned k = 0; k < t->msg_max_cn; k++) {
		unsigned src = (t->recv_next + k) % t->msg_max_cn;
		struct rshm_ring *r = ring(t, src, self);
		uint64_t head = __atomic_load_n(&r->head, __ATOMIC_RELAXED);
		struct rshm_msg_slot *s;

		if (__atomic_load_n(&r->tail, __ATOMIC_ACQUIRE) == head)
			continue;
		s = &r->slots[head % RSHM_MSG_SLOTS];
		if (s->deliver_at > now)
			continue; /* still on the wire; later ones of this sender are too */
		if (s->len > RSHM_MSG_MAX) { /* corrupt slot: drop it rather than over-read */
			__atomic_store_n(&r->head, head + 1, __ATOMIC_RELEASE);
			rc = -REMORA_EPROTO;
			break;
		}
		if (s->len > cap) {
			rc = -EMSGSIZE; /* the message stays; retry with a larger buffer */
			break;
		}
		if (s->len)
			memcpy(buf, s->data, s->len);
		rc = (int)s->len;
		*src_cn = (uint16_t)src;
		__atomic_store_n(&r->head, head + 1, __ATOMIC_RELEASE);
		t->recv_next = (src + 1) % t->msg_max_cn;
		break;
	}
	rt_cpu_unlock(&t->recv_lock);
	return rc;
}

int rshm_msg_recv(void *cpriv, uint16_t *src_cn, void *buf, uint32_t cap)
{
	return rshm_msg_recv_at(cpriv, src_cn, buf, cap, UINT64_MAX);
}
