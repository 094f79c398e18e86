// SPDX-License-Identifier: MIT
#include "history.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "workload.h"

/* ---- logs ------------------------------------------------------------------------------- */

/*
 * Why a shared mapping (crash_safe): a record must be in the page cache (which outlives a
 * SIGKILL of the process) before the commit verbs start, and a write(2) per record would put
 * one or two system calls on every transaction. Stores into a MAP_SHARED window cost a 224 B
 * copy and a checksum; a system call happens once per window (8192 records: 1.75 MiB, a whole
 * number of pages, so every window starts at a page-aligned offset). Each fresh page still
 * costs a page fault (one per 18 records): measured 1.2-2.9 us per transaction in a loaded
 * 2-core VM, against 0.1-0.3 us through the stdio buffer, hence crash_safe only on request.
 */
#define HIST_WIN_RECS 8192u
#define HIST_WIN_BYTES ((off_t)HIST_WIN_RECS * (off_t)sizeof(struct hist_rec))

uint64_t hist_rec_sum(const struct hist_txn *t)
{
	uint64_t w[sizeof(*t) / 8], h = 0xcbf29ce484222325ull;

	memcpy(w, t, sizeof(w));
	for (size_t i = 0; i < sizeof(w) / 8; i++)
		h = (h ^ w[i]) * 0x100000001b3ull;
	return h ^ (h >> 29);
}

static int log_fail(struct hist_log *log, int rc)
{
	if (!log->err)
		log->err = rc;
	return log->err;
}

/* Maps the window holding slot; NULL (log->err set) on failure. */
static struct hist_rec *log_slot(struct hist_log *log, uint64_t slot)
{
	uint64_t first = slot / HIST_WIN_RECS * HIST_WIN_RECS;
	off_t off = (off_t)(first / HIST_WIN_RECS) * HIST_WIN_BYTES;
	void *p;

	if (log->win && first == log->win_first)
		return &log->win[slot - first];
	if (log->win)
		munmap(log->win, (size_t)HIST_WIN_BYTES);
	log->win = NULL;
	if (ftruncate(log->fd, off + HIST_WIN_BYTES)) {
		log_fail(log, -errno);
		return NULL;
	}
	p = mmap(NULL, (size_t)HIST_WIN_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, log->fd, off);
	if (p == MAP_FAILED) {
		log_fail(log, -errno);
		return NULL;
	}
	log->win = p;
	log->win_first = first;
	return &log->win[slot - first];
}

/*
 * The commit word goes last. A SIGKILL stops the thread between two instructions, and every
 * store before that point is in the page cache, so only the compiler's order matters: the
 * signal fences keep it (they emit no instruction).
 */
static void rec_store(struct hist_rec *r, const struct hist_txn *t, uint32_t state)
{
	__atomic_store_n(&r->state, HIST_REC_EMPTY, __ATOMIC_RELAXED);
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
	r->t = *t;
	r->sum = hist_rec_sum(t);
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
	__atomic_store_n(&r->state, state, __ATOMIC_RELAXED);
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
}

#define HIST_LOG_BUF (1u << 20)

/* The buffered form: header slot through stdio, records appended as they commit. */
static int stream_open(struct hist_log *log, const struct hist_rec *hdr)
{
	int rc;

	log->buf = malloc(HIST_LOG_BUF);
	if (!log->buf)
		return -ENOMEM;
	log->f = fopen(log->path, "wb");
	if (!log->f) {
		rc = -errno;
		free(log->buf);
		log->buf = NULL;
		return rc;
	}
	setvbuf(log->f, log->buf, _IOFBF, HIST_LOG_BUF);
	if (fwrite(hdr, sizeof(*hdr), 1, log->f) != 1 || fflush(log->f))
		log->err = -EIO;
	return 0;
}

int hist_log_open(struct hist_log *log, const char *dir, unsigned cn, unsigned thread,
		  unsigned coro, bool crash_safe)
{
	struct hist_file_hdr h = { .version = HIST_VERSION, .rec_size = sizeof(struct hist_rec) };
	struct hist_rec *r, hdr = { 0 };
	int n, rc;

	memset(log, 0, sizeof(*log));
	log->fd = -1;
	log->crash_safe = crash_safe;
	n = snprintf(log->path, sizeof(log->path), "%s/hist-cn%u-t%u-c%u.bin", dir, cn, thread,
		     coro);
	if (n < 0 || (size_t)n >= sizeof(log->path))
		return -ENAMETOOLONG;
	memcpy(h.magic, HIST_MAGIC, sizeof(HIST_MAGIC));
	h.buffered = !crash_safe;
	memcpy(&hdr, &h, sizeof(h));
	if (!crash_safe)
		return stream_open(log, &hdr);
	log->fd = open(log->path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (log->fd < 0)
		return -errno;
	r = log_slot(log, 0);
	if (!r) {
		rc = log->err;
		close(log->fd);
		log->fd = -1;
		return rc;
	}
	memcpy(r, &h, sizeof(h));
	return 0;
}

void hist_log_undecided(struct hist_log *log)
{
	log->undecided = log->crash_safe;
}

int hist_log_pending(struct hist_log *log, const struct hist_txn *t)
{
	struct hist_txn p = *t;
	struct hist_rec *r;

	if (log->undecided && !log->err)
		log->err = -EPROTO; /* it would replace the undecided record */
	if (log->err || !log->crash_safe)
		return log->err;
	r = log_slot(log, log->n + 1);
	if (!r)
		return log->err;
	p.flags = 0;
	rec_store(r, &p, HIST_REC_PENDING);
	return 0;
}

int hist_log_append(struct hist_log *log, const struct hist_txn *t)
{
	struct hist_txn c = *t;
	struct hist_rec *r;

	if (log->undecided && !log->err)
		log->err = -EPROTO;
	if (log->err)
		return log->err;
	c.flags = 0;
	if (!log->crash_safe) {
		struct hist_rec w = { .t = c, .sum = hist_rec_sum(&c),
				      .state = HIST_REC_COMMITTED };

		if (fwrite(&w, sizeof(w), 1, log->f) != 1)
			return log_fail(log, -EIO);
		log->n++;
		return 0;
	}
	r = log_slot(log, log->n + 1);
	if (!r)
		return log->err;
	if (r->state == HIST_REC_PENDING && !memcmp(&r->t, &c, sizeof(c)))
		__atomic_store_n(&r->state, HIST_REC_COMMITTED, __ATOMIC_RELAXED);
	else
		rec_store(r, &c, HIST_REC_COMMITTED);
	log->n++;
	return 0;
}

int hist_log_close(struct hist_log *log)
{
	int rc = log->err;

	if (log->f) {
		uint32_t closed = 1;

		if (!rc && (fseek(log->f, offsetof(struct hist_file_hdr, closed), SEEK_SET) ||
			    fwrite(&closed, sizeof(closed), 1, log->f) != 1))
			rc = -EIO;
		if (fclose(log->f) && !rc)
			rc = -EIO;
		log->f = NULL;
		free(log->buf);
		log->buf = NULL;
	}
	if (log->fd < 0)
		return rc;
	if (log->win)
		munmap(log->win, (size_t)HIST_WIN_BYTES);
	log->win = NULL;
	/* a pending record past the end is an attempt that aborted, or was given up; or one
	 * whose commit has no verdict (undecided): that one stays */
	if (ftruncate(log->fd, (off_t)(log->n + 1 + log->undecided) *
				       (off_t)sizeof(struct hist_rec)) && !rc)
		rc = -errno;
	if (close(log->fd) && !rc)
		rc = -EIO;
	log->fd = -1;
	return rc;
}

static int grow(void **p, size_t *cap, size_t need, size_t elem)
{
	size_t ncap = *cap ? *cap : 1024;
	void *np;

	if (need <= *cap)
		return 0;
	while (ncap < need)
		ncap *= 2;
	np = realloc(*p, ncap * elem);
	if (!np)
		return -ENOMEM;
	*p = np;
	*cap = ncap;
	return 0;
}

/* ---- sets ------------------------------------------------------------------------------- */

int hist_set_add(struct hist_set *s, const struct hist_txn *t)
{
	if (grow((void **)&s->rec, &s->cap, s->n + 1, sizeof(*t)))
		return -ENOMEM;
	s->rec[s->n++] = *t;
	return 0;
}

void hist_set_free(struct hist_set *s)
{
	free(s->rec);
	memset(s, 0, sizeof(*s));
}

/* A record's state, or -1 when it is torn (its sum does not match) or unknown. */
static int rec_state(const struct hist_rec *r)
{
	if (r->state != HIST_REC_PENDING && r->state != HIST_REC_COMMITTED)
		return -1;
	if (r->sum != hist_rec_sum(&r->t) || r->t.nops > HIST_MAX_OPS)
		return -1;
	return (int)r->state;
}

/* Reads records up to the first empty slot; only the last may be torn (dropped) or pending. */
static int load_records(struct hist_set *s, FILE *f, const char *path, char *err,
			size_t errlen)
{
	struct hist_rec r, next;
	bool have = fread(&r, sizeof(r), 1, f) == 1 && r.state != HIST_REC_EMPTY;
	size_t at = 0;

	while (have) {
		int st = rec_state(&r);
		bool last = !(fread(&next, sizeof(next), 1, f) == 1 &&
			      next.state != HIST_REC_EMPTY);

		if (st < 0 && last)
			break; /* cut short by a kill: never committed, nor pending */
		if (st < 0 || (st == HIST_REC_PENDING && !last)) {
			snprintf(err, errlen, "%s: record %zu is %s before the end", path, at,
				 st < 0 ? "corrupt" : "pending");
			return -EPROTO;
		}
		r.t.flags = st == HIST_REC_PENDING ? HIST_PENDING : 0;
		if (hist_set_add(s, &r.t))
			return -ENOMEM;
		r = next;
		have = !last;
		at++;
	}
	if (ferror(f)) {
		snprintf(err, errlen, "%s: read error", path);
		return -EIO;
	}
	return 0;
}

/*
 * 1: an empty file or header (a node killed inside hist_log_open), 0: a header, -1: neither,
 * -2: a buffered log never closed (its records died with the process).
 */
static int read_header(FILE *f, struct hist_file_hdr *h)
{
	static const struct hist_file_hdr zero;

	memset(h, 0, sizeof(*h));
	if (fread(h, sizeof(*h), 1, f) != 1)
		return !ferror(f) && ftell(f) == 0 ? 1 : -1;
	if (!memcmp(h, &zero, sizeof(*h)))
		return 1;
	if (memcmp(h->magic, HIST_MAGIC, sizeof(HIST_MAGIC)) || h->version != HIST_VERSION ||
	    h->rec_size != sizeof(struct hist_rec) || fseek(f, (long)h->rec_size, SEEK_SET))
		return -1;
	return h->buffered && !h->closed ? -2 : 0;
}

static int load_file(struct hist_set *s, const char *path, char *err, size_t errlen)
{
	struct hist_file_hdr h;
	FILE *f = fopen(path, "rb");
	int rc;

	if (!f) {
		rc = -errno;
		snprintf(err, errlen, "%s: %s", path, strerror(errno));
		return rc;
	}
	rc = read_header(f, &h);
	if (rc == -2) {
		snprintf(err, errlen, "%s: its process was killed before writing its buffer "
			 "(record with --history-crash on to check a crash)", path);
		rc = -EPROTO;
	} else if (rc < 0) {
		snprintf(err, errlen, "%s: not a history file of this version", path);
		rc = -EPROTO;
	} else if (rc == 0) {
		rc = load_records(s, f, path, err, errlen);
	} else {
		rc = 0;
	}
	fclose(f);
	return rc;
}

int hist_set_load_dir(struct hist_set *s, const char *dir, char *err, size_t errlen)
{
	struct dirent *de;
	DIR *d = opendir(dir);
	int rc = 0;

	if (!d) {
		rc = -errno;
		snprintf(err, errlen, "%s: %s", dir, strerror(errno));
		return rc;
	}
	while ((de = readdir(d))) {
		char path[1024];
		size_t len = strlen(de->d_name);

		if (strncmp(de->d_name, "hist-", 5) || len < 4 || strcmp(de->d_name + len - 4, ".bin"))
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
		rc = load_file(s, path, err, errlen);
		if (rc)
			break;
	}
	closedir(d);
	return rc;
}

void hist_fmt_txid(uint64_t txid, char *buf, size_t len)
{
	unsigned cn, thread, coro;
	uint64_t seq;

	if (!txid) {
		snprintf(buf, len, "load");
		return;
	}
	wl_txid_parts(txid, &cn, &thread, &coro, &seq);
	if (cn == UINT32_MAX) /* not a workload id (hand-built histories) */
		snprintf(buf, len, "tx%" PRIu64, txid);
	else
		snprintf(buf, len, "cn%u.t%u.c%u#%" PRIu64, cn, thread, coro, seq);
}

/* ---- the checker ------------------------------------------------------------------------ */

enum edge_kind { EDGE_WR, EDGE_WW, EDGE_RW };
static const char *const edge_name[] = { "wr", "ww", "rw" };

struct edge {
	uint32_t src, dst;
	uint32_t kind;
	uint32_t _pad;
	uint64_t key;
};

/* A committed write: key, the version it overwrote (prev) and its writer's index. */
struct wver {
	uint64_t key;
	uint64_t prev;
	uint64_t writer;  /* txid */
};

struct checker {
	const struct hist_set *s;
	uint32_t *order;    /* record indexes sorted by txid */
	struct wver *by_prev;   /* writes sorted by (key, prev) */
	struct wver *by_writer; /* writes sorted by (key, writer) */
	size_t nw;
	struct edge *edges;
	size_t ne, ecap;
	struct hist_report *rep;
};

static const struct hist_set *sort_set;

static int cmp_txid(const void *a, const void *b)
{
	uint64_t x = sort_set->rec[*(const uint32_t *)a].txid;
	uint64_t y = sort_set->rec[*(const uint32_t *)b].txid;

	return x < y ? -1 : x > y;
}

static int cmp_prev(const void *a, const void *b)
{
	const struct wver *x = a, *y = b;

	if (x->key != y->key)
		return x->key < y->key ? -1 : 1;
	return x->prev < y->prev ? -1 : x->prev > y->prev;
}

static int cmp_writer(const void *a, const void *b)
{
	const struct wver *x = a, *y = b;

	if (x->key != y->key)
		return x->key < y->key ? -1 : 1;
	return x->writer < y->writer ? -1 : x->writer > y->writer;
}

/* Index of the record with this txid, or -1. */
static int64_t find_txn(const struct checker *ck, uint64_t txid)
{
	size_t lo = 0, hi = ck->s->n;

	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		uint64_t v = ck->s->rec[ck->order[mid]].txid;

		if (v == txid)
			return ck->order[mid];
		if (v < txid)
			lo = mid + 1;
		else
			hi = mid;
	}
	return -1;
}

static const struct wver *find_wver(const struct wver *arr, size_t n, const struct wver *k,
				    int (*cmp)(const void *, const void *))
{
	return bsearch(k, arr, n, sizeof(*arr), cmp);
}

/* The write that overwrote version (key, prev), or NULL. */
static const struct wver *next_version(const struct checker *ck, uint64_t key, uint64_t prev)
{
	struct wver k = { .key = key, .prev = prev };

	return find_wver(ck->by_prev, ck->nw, &k, cmp_prev);
}

static bool key_written_by(const struct checker *ck, uint64_t key, uint64_t writer)
{
	struct wver k = { .key = key, .writer = writer };

	return find_wver(ck->by_writer, ck->nw, &k, cmp_writer) != NULL;
}

static int violation(struct checker *ck, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static int violation(struct checker *ck, const char *fmt, ...)
{
	va_list ap;

	if (ck->rep->violations++ == 0) {
		va_start(ap, fmt);
		vsnprintf(ck->rep->msg, sizeof(ck->rep->msg), fmt, ap);
		va_end(ap);
	}
	return 1;
}

static int add_edge(struct checker *ck, int64_t src, int64_t dst, enum edge_kind kind,
		    uint64_t key)
{
	if (src < 0 || dst < 0 || src == dst)
		return 0;
	if (grow((void **)&ck->edges, &ck->ecap, ck->ne + 1, sizeof(struct edge)))
		return -ENOMEM;
	ck->edges[ck->ne++] = (struct edge){ .src = (uint32_t)src, .dst = (uint32_t)dst,
					     .kind = kind, .key = key };
	if (kind == EDGE_WR)
		ck->rep->edges_wr++;
	else if (kind == EDGE_WW)
		ck->rep->edges_ww++;
	else
		ck->rep->edges_rw++;
	return 0;
}

static int index_txns(struct checker *ck)
{
	const struct hist_set *s = ck->s;
	char a[48];

	ck->order = malloc((s->n ? s->n : 1) * sizeof(*ck->order));
	if (!ck->order)
		return -ENOMEM;
	for (size_t i = 0; i < s->n; i++)
		ck->order[i] = (uint32_t)i;
	sort_set = s;
	qsort(ck->order, s->n, sizeof(*ck->order), cmp_txid);
	for (size_t i = 0; i < s->n; i++) {
		uint64_t id = s->rec[ck->order[i]].txid;

		if (id == 0) {
			violation(ck, "a committed transaction has id 0 (reserved for the load)");
		} else if (i && id == s->rec[ck->order[i - 1]].txid) {
			hist_fmt_txid(id, a, sizeof(a));
			violation(ck, "transaction %s recorded twice", a);
		}
	}
	return 0;
}

static int index_writes(struct checker *ck)
{
	const struct hist_set *s = ck->s;
	size_t nw = 0;

	for (size_t i = 0; i < s->n; i++)
		for (uint32_t j = 0; j < s->rec[i].nops; j++)
			nw += s->rec[i].op[j].write != 0;
	ck->by_prev = malloc((nw ? nw : 1) * sizeof(struct wver));
	ck->by_writer = malloc((nw ? nw : 1) * sizeof(struct wver));
	if (!ck->by_prev || !ck->by_writer)
		return -ENOMEM;
	for (size_t i = 0; i < s->n; i++) {
		for (uint32_t j = 0; j < s->rec[i].nops; j++) {
			const struct hist_op *op = &s->rec[i].op[j];

			if (!op->write)
				continue;
			ck->by_prev[ck->nw++] = (struct wver){ .key = op->key, .prev = op->seen,
							       .writer = s->rec[i].txid };
		}
	}
	memcpy(ck->by_writer, ck->by_prev, ck->nw * sizeof(struct wver));
	qsort(ck->by_prev, ck->nw, sizeof(struct wver), cmp_prev);
	qsort(ck->by_writer, ck->nw, sizeof(struct wver), cmp_writer);
	ck->rep->writes = ck->nw;
	for (size_t i = 1; i < ck->nw; i++) {
		const struct wver *x = &ck->by_prev[i - 1], *y = &ck->by_prev[i];
		char a[48], b[48], p[48];

		if (x->key != y->key || x->prev != y->prev)
			continue;
		hist_fmt_txid(x->writer, a, sizeof(a));
		hist_fmt_txid(y->writer, b, sizeof(b));
		hist_fmt_txid(x->prev, p, sizeof(p));
		violation(ck, "lost update: %s and %s both committed an overwrite of version %s "
			  "of key %" PRIu64, a, b, p, x->key);
	}
	return 0;
}

/* Reads, version chains and edges. */
static int build_edges(struct checker *ck)
{
	const struct hist_set *s = ck->s;

	for (size_t i = 0; i < s->n; i++) {
		const struct hist_txn *t = &s->rec[i];

		for (uint32_t j = 0; j < t->nops; j++) {
			const struct hist_op *op = &t->op[j];
			const struct wver *next;
			int64_t w = -1;
			char a[48], b[48];

			ck->rep->reads++;
			if (op->seen) {
				w = find_txn(ck, op->seen);
				if (w < 0 || !key_written_by(ck, op->key, op->seen)) {
					hist_fmt_txid(t->txid, a, sizeof(a));
					hist_fmt_txid(op->seen, b, sizeof(b));
					violation(ck, "%s read key %" PRIu64 " as written by %s, "
						  "which committed no such write", a, op->key, b);
					continue;
				}
			}
			if (add_edge(ck, w, (int64_t)i, op->write ? EDGE_WW : EDGE_WR, op->key))
				return -ENOMEM;
			next = next_version(ck, op->key, op->seen);
			if (next && next->writer != t->txid &&
			    add_edge(ck, (int64_t)i, find_txn(ck, next->writer), EDGE_RW, op->key))
				return -ENOMEM;
		}
	}
	return 0;
}

/* The last version of key: follow the chain from the load. */
static void check_final(struct checker *ck, const uint64_t *final, uint64_t nkeys)
{
	for (uint64_t key = 0; key < nkeys; key++) {
		uint64_t at = 0;
		const struct wver *n;
		size_t hops = 0;
		char a[48], b[48];

		while ((n = next_version(ck, key, at)) && hops++ <= ck->nw)
			at = n->writer;
		if (final[key] == at)
			continue;
		hist_fmt_txid(final[key], a, sizeof(a));
		hist_fmt_txid(at, b, sizeof(b));
		violation(ck, "key %" PRIu64 " holds the version of %s after the run, but the "
			  "last committed version is %s's", key, a, b);
	}
}

/*
 * Every node left after Kahn's algorithm has a predecessor that is also left (indeg > 0), so
 * walking predecessors from any of them must revisit a node: that stretch is a cycle.
 */
static int describe_cycle(struct checker *ck, const uint32_t *indeg)
{
	size_t n = ck->s->n;
	uint32_t *rstart = calloc(n + 2, sizeof(*rstart));
	uint32_t *radj = malloc((ck->ne + 1) * sizeof(*radj));
	uint32_t *fill = calloc(n + 1, sizeof(*fill));
	int64_t *step = malloc((n + 1) * sizeof(*step));
	uint32_t *path = malloc((n + 1) * sizeof(*path)); /* edge taken into path[i]'s node */
	uint32_t v = 0;
	size_t len = 0, off;
	char msg[sizeof(ck->rep->msg)];
	int rc = -ENOMEM;

	if (!rstart || !radj || !fill || !step || !path)
		goto free_all;
	for (size_t e = 0; e < ck->ne; e++)
		rstart[ck->edges[e].dst + 1]++;
	for (size_t i = 0; i < n; i++)
		rstart[i + 1] += rstart[i];
	for (size_t e = 0; e < ck->ne; e++) {
		uint32_t d = ck->edges[e].dst;

		radj[rstart[d] + fill[d]++] = (uint32_t)e;
	}
	for (size_t i = 0; i < n; i++)
		step[i] = -1;
	while (v < n && !indeg[v])
		v++;
	for (;;) {
		uint32_t e = UINT32_MAX;

		step[v] = (int64_t)len;
		for (uint32_t i = rstart[v]; i < rstart[v + 1]; i++) {
			if (indeg[ck->edges[radj[i]].src]) {
				e = radj[i];
				break;
			}
		}
		if (e == UINT32_MAX)
			break; /* cannot happen: v is in the remainder */
		path[len++] = e;
		v = ck->edges[e].src;
		if (step[v] >= 0)
			break;
	}
	/* path[step[v] .. len-1] walks the cycle backwards; print it forwards, at most 8 hops */
	off = 0;
	msg[0] = 0;
	for (size_t i = len, hops = 0; i-- > (size_t)step[v]; hops++) {
		const struct edge *e = &ck->edges[path[i]];
		char a[48];
		int w;

		if (hops == 8) {
			snprintf(msg + off, sizeof(msg) - off, "... ");
			break;
		}
		hist_fmt_txid(ck->s->rec[e->src].txid, a, sizeof(a));
		w = snprintf(msg + off, sizeof(msg) - off, "%s -%s(key %" PRIu64 ")-> ", a,
			     edge_name[e->kind], e->key);
		if (w < 0 || (size_t)w >= sizeof(msg) - off)
			break;
		off += (size_t)w;
	}
	{
		char a[48];

		hist_fmt_txid(ck->s->rec[v].txid, a, sizeof(a));
		violation(ck, "not serializable: dependency cycle %.900s%s", msg, a);
	}
	rc = 0;
free_all:
	free(rstart);
	free(radj);
	free(fill);
	free(step);
	free(path);
	return rc;
}

/* Kahn's algorithm; on a cycle, walk predecessors inside the remainder to print one. */
static int find_cycle(struct checker *ck)
{
	size_t n = ck->s->n;
	uint32_t *indeg = calloc(n + 1, sizeof(*indeg));
	uint32_t *start = calloc(n + 2, sizeof(*start));
	uint32_t *adj = malloc((ck->ne + 1) * sizeof(*adj));
	uint32_t *queue = malloc((n + 1) * sizeof(*queue));
	size_t head = 0, tail = 0, done = 0;
	int rc = -ENOMEM;

	if (!indeg || !start || !adj || !queue)
		goto free_all;
	for (size_t e = 0; e < ck->ne; e++) {
		indeg[ck->edges[e].dst]++;
		start[ck->edges[e].src + 1]++;
	}
	for (size_t v = 0; v < n; v++)
		start[v + 1] += start[v];
	{
		uint32_t *fill = calloc(n + 1, sizeof(*fill));

		if (!fill)
			goto free_all;
		for (size_t e = 0; e < ck->ne; e++) {
			uint32_t src = ck->edges[e].src;

			adj[start[src] + fill[src]++] = (uint32_t)e;
		}
		free(fill);
	}
	for (size_t v = 0; v < n; v++)
		if (!indeg[v])
			queue[tail++] = (uint32_t)v;
	while (head < tail) {
		uint32_t v = queue[head++];

		done++;
		for (uint32_t i = start[v]; i < start[v + 1]; i++) {
			uint32_t d = ck->edges[adj[i]].dst;

			if (--indeg[d] == 0)
				queue[tail++] = d;
		}
	}
	rc = 0;
	if (done < n)
		rc = describe_cycle(ck, indeg);
free_all:
	free(indeg);
	free(start);
	free(adj);
	free(queue);
	return rc;
}

/* Topological positions of the (acyclic) graph of the first ne edges; NULL: out of memory. */
static uint32_t *topo_positions(const struct checker *ck, size_t ne)
{
	size_t n = ck->s->n, head = 0, tail = 0;
	uint32_t *indeg = calloc(n + 1, sizeof(*indeg)), *start = calloc(n + 2, sizeof(*start));
	uint32_t *adj = malloc((ne + 1) * sizeof(*adj)), *queue = malloc((n + 1) * sizeof(*queue));
	uint32_t *pos = malloc((n + 1) * sizeof(*pos)), *fill = calloc(n + 1, sizeof(*fill));

	if (indeg && start && adj && queue && pos && fill) {
		for (size_t e = 0; e < ne; e++) {
			indeg[ck->edges[e].dst]++;
			start[ck->edges[e].src + 1]++;
		}
		for (size_t v = 0; v < n; v++)
			start[v + 1] += start[v];
		for (size_t e = 0; e < ne; e++)
			adj[start[ck->edges[e].src] + fill[ck->edges[e].src]++] = ck->edges[e].dst;
		for (size_t v = 0; v < n; v++)
			if (!indeg[v])
				queue[tail++] = (uint32_t)v;
		while (head < tail) {
			uint32_t v = queue[head];

			pos[v] = (uint32_t)head++;
			for (uint32_t i = start[v]; i < start[v + 1]; i++)
				if (--indeg[adj[i]] == 0)
					queue[tail++] = adj[i];
		}
	} else {
		free(pos);
		pos = NULL;
	}
	free(indeg);
	free(start);
	free(adj);
	free(queue);
	free(fill);
	return pos;
}

/*
 * Snapshot isolation allows cycles only with two consecutive rw edges (Fekete et al.). With the
 * dependency graph D (wr and ww edges, checked acyclic first: G1c), this finds G-single, a
 * cycle with exactly one rw edge T -> W: T reachable from W over D. The search from W stops at
 * transactions after T in D's topological order, which cannot reach T.
 */
static int find_g_single(struct checker *ck, size_t nd)
{
	size_t n = ck->s->n;
	uint32_t *pos = topo_positions(ck, nd), *stack = malloc((n + 1) * sizeof(*stack));
	uint32_t *seen = calloc(n + 1, sizeof(*seen)), *start = calloc(n + 2, sizeof(*start));
	uint32_t *adj = malloc((nd + 1) * sizeof(*adj)), *fill = calloc(n + 1, sizeof(*fill));
	int rc = -ENOMEM;

	if (!pos || !stack || !seen || !start || !adj || !fill)
		goto out;
	for (size_t e = 0; e < nd; e++)
		start[ck->edges[e].src + 1]++;
	for (size_t v = 0; v < n; v++)
		start[v + 1] += start[v];
	for (size_t e = 0; e < nd; e++)
		adj[start[ck->edges[e].src] + fill[ck->edges[e].src]++] = ck->edges[e].dst;
	rc = 0;
	for (size_t e = nd; e < ck->ne && !rc; e++) {
		uint32_t t = ck->edges[e].src, w = ck->edges[e].dst, sp = 0;

		if (pos[w] > pos[t])
			continue;
		stack[sp++] = w;
		seen[w] = (uint32_t)e + 1;
		while (sp && !rc) {
			uint32_t v = stack[--sp];

			if (v == t) {
				char a[48], b[48];

				hist_fmt_txid(ck->s->rec[t].txid, a, sizeof(a));
				hist_fmt_txid(ck->s->rec[w].txid, b, sizeof(b));
				rc = violation(ck, "not snapshot isolation (G-single): %s read key %"
					       PRIu64 " before %s wrote it (rw), yet depends on %s "
					       "through wr/ww edges", a, ck->edges[e].key, b, b);
				break;
			}
			for (uint32_t i = start[v]; i < start[v + 1]; i++) {
				uint32_t d = adj[i];

				if (seen[d] != (uint32_t)e + 1 && pos[d] <= pos[t]) {
					seen[d] = (uint32_t)e + 1;
					stack[sp++] = d;
				}
			}
		}
	}
out:
	free(pos);
	free(stack);
	free(seen);
	free(start);
	free(adj);
	free(fill);
	return rc < 0 ? rc : 0;
}

/*
 * Stable partition of the edges, the wr/ww dependencies first; returns their count. Through a
 * copy, in one pass: build_edges interleaves the kinds, and moving the rw tail along for each
 * dependency made a 128K-transaction history take minutes to check.
 */
static ssize_t dependencies_first(struct checker *ck)
{
	size_t nd = 0, nr = 0, ne = ck->ne;
	struct edge *rw = malloc((ne + 1) * sizeof(*rw));

	if (!rw)
		return -ENOMEM;
	for (size_t e = 0; e < ne; e++) {
		if (ck->edges[e].kind == EDGE_RW)
			rw[nr++] = ck->edges[e];
		else
			ck->edges[nd++] = ck->edges[e];
	}
	memcpy(&ck->edges[nd], rw, nr * sizeof(*rw));
	free(rw);
	return (ssize_t)nd;
}

/* SI: the wr/ww edges first (their cycles are G1c), then G-single over the rw edges. */
static int find_si_violation(struct checker *ck)
{
	ssize_t r = dependencies_first(ck);
	size_t nd, ne = ck->ne;
	int rc;

	if (r < 0)
		return (int)r;
	nd = (size_t)r;
	ck->ne = nd;
	rc = find_cycle(ck);
	ck->ne = ne;
	if (rc || ck->rep->violations)
		return rc;
	return find_g_single(ck, nd);
}

/* ---- pending transactions ----------------------------------------------------------- */

struct pend {
	uint64_t txid;
	size_t rec;
	bool keep, expanded;
};

static int cmp_pend(const void *a, const void *b)
{
	uint64_t x = ((const struct pend *)a)->txid, y = ((const struct pend *)b)->txid;

	return x < y ? -1 : x > y;
}

/* Keeps the pending transaction that wrote id, if it is one; true when newly kept. */
static bool keep_writer(struct pend *p, size_t np, uint64_t id)
{
	struct pend k = { .txid = id }, *hit;

	if (!id || !np)
		return false;
	hit = bsearch(&k, p, np, sizeof(*p), cmp_pend);
	if (!hit || hit->keep)
		return false;
	hit->keep = true;
	return true;
}

static bool keep_seen(struct pend *p, size_t np, const struct hist_txn *t)
{
	bool any = false;

	for (uint32_t j = 0; j < t->nops; j++)
		any |= keep_writer(p, np, t->op[j].seen);
	return any;
}

/*
 * A pending transaction's commit is visible exactly when a version it wrote was read or
 * overwritten by a kept transaction, or is in the store: then it committed (a partial commit
 * then shows as a broken chain, which the checks below report); otherwise it did not. Kept
 * pending transactions add their own reads, hence the fixpoint.
 */
static int resolve_pending(const struct hist_set *s, const uint64_t *final, uint64_t nkeys,
			   struct hist_set *out, struct hist_report *rep)
{
	struct pend *p = malloc((rep->pending + 1) * sizeof(*p));
	size_t np = 0;
	bool more = true;
	int rc = 0;

	if (!p)
		return -ENOMEM;
	for (size_t i = 0; i < s->n; i++)
		if (s->rec[i].flags & HIST_PENDING)
			p[np++] = (struct pend){ .txid = s->rec[i].txid, .rec = i };
	qsort(p, np, sizeof(*p), cmp_pend);
	for (size_t i = 0; i < s->n; i++)
		if (!(s->rec[i].flags & HIST_PENDING))
			keep_seen(p, np, &s->rec[i]);
	for (uint64_t k = 0; final && k < nkeys; k++)
		keep_writer(p, np, final[k]);
	while (more) {
		more = false;
		for (size_t i = 0; i < np; i++) {
			if (p[i].keep && !p[i].expanded) {
				p[i].expanded = true;
				more |= keep_seen(p, np, &s->rec[p[i].rec]);
			}
		}
	}
	for (size_t i = 0; i < np; i++)
		rep->pending_kept += p[i].keep;
	for (size_t i = 0; i < s->n && !rc; i++) {
		struct pend k = { .txid = s->rec[i].txid };
		const struct pend *hit = (s->rec[i].flags & HIST_PENDING) ?
			bsearch(&k, p, np, sizeof(*p), cmp_pend) : NULL;

		if (!hit || hit->keep)
			rc = hist_set_add(out, &s->rec[i]);
	}
	free(p);
	return rc;
}

static int hist_check_mode(const struct hist_set *s, const uint64_t *final, uint64_t nkeys,
			   struct hist_report *rep, bool si)
{
	struct hist_set kept = { 0 };
	struct checker ck = { .s = s, .rep = rep };
	int rc = 0;

	memset(rep, 0, sizeof(*rep));
	for (size_t i = 0; i < s->n; i++)
		rep->pending += (s->rec[i].flags & HIST_PENDING) != 0;
	if (rep->pending) {
		rc = resolve_pending(s, final, nkeys, &kept, rep);
		ck.s = s = &kept;
	}
	rep->txns = s->n;
	if (!rc)
		rc = index_txns(&ck);
	if (!rc)
		rc = index_writes(&ck);
	if (!rc)
		rc = build_edges(&ck);
	if (!rc && final)
		check_final(&ck, final, nkeys);
	if (!rc)
		rc = si ? find_si_violation(&ck) : find_cycle(&ck);
	free(ck.order);
	free(ck.by_prev);
	free(ck.by_writer);
	free(ck.edges);
	hist_set_free(&kept);
	if (rc)
		return rc;
	if (!rep->violations)
		snprintf(rep->msg, sizeof(rep->msg), si ? "snapshot isolation" : "serializable");
	return rep->violations ? 1 : 0;
}

int hist_check(const struct hist_set *s, const uint64_t *final, uint64_t nkeys,
	       struct hist_report *rep)
{
	return hist_check_mode(s, final, nkeys, rep, false);
}

int hist_check_si(const struct hist_set *s, const uint64_t *final, uint64_t nkeys,
		  struct hist_report *rep)
{
	return hist_check_mode(s, final, nkeys, rep, true);
}

int hist_lost_msg(int64_t lost, char *msg, size_t msglen)
{
	if (!lost)
		return 0;
	snprintf(msg, msglen, "%" PRId64 " history records were lost (out of memory or i/o error)",
		 lost);
	return 1;
}

int hist_dir_clear(const char *dir)
{
	struct dirent *de;
	DIR *d = opendir(dir);

	if (!d)
		return -errno;
	while ((de = readdir(d))) {
		size_t len = strlen(de->d_name);
		char path[1024];

		if (strncmp(de->d_name, "hist-", 5) || len < 4 || strcmp(de->d_name + len - 4, ".bin"))
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
		unlink(path);
	}
	closedir(d);
	return 0;
}
