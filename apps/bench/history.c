// SPDX-License-Identifier: MIT
#include "history.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "workload.h"

/* ---- logs ------------------------------------------------------------------------------- */

#define HIST_LOG_BUF (1u << 20)

int hist_log_open(struct hist_log *log, const char *dir, unsigned cn, unsigned thread,
		  unsigned coro)
{
	struct hist_file_hdr h = { .version = 1, .rec_size = sizeof(struct hist_txn) };
	int n, rc;

	memset(log, 0, sizeof(*log));
	n = snprintf(log->path, sizeof(log->path), "%s/hist-cn%u-t%u-c%u.bin", dir, cn, thread,
		     coro);
	if (n < 0 || (size_t)n >= sizeof(log->path))
		return -ENAMETOOLONG;
	log->buf = malloc(HIST_LOG_BUF);
	if (!log->buf)
		return -ENOMEM;
	log->f = fopen(log->path, "wb");
	if (!log->f) {
		rc = -errno;
		goto free_buf;
	}
	setvbuf(log->f, log->buf, _IOFBF, HIST_LOG_BUF);
	memcpy(h.magic, HIST_MAGIC, sizeof(HIST_MAGIC));
	if (fwrite(&h, sizeof(h), 1, log->f) != 1) {
		rc = -EIO;
		goto close_file;
	}
	return 0;
close_file:
	fclose(log->f);
	log->f = NULL;
free_buf:
	free(log->buf);
	log->buf = NULL;
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

int hist_log_append(struct hist_log *log, const struct hist_txn *t)
{
	if (!log->err && fwrite(t, sizeof(*t), 1, log->f) != 1)
		log->err = -EIO;
	return log->err;
}

int hist_log_close(struct hist_log *log)
{
	int rc = log->err;

	if (log->f && fclose(log->f) && !rc)
		rc = -EIO;
	log->f = NULL;
	free(log->buf);
	log->buf = NULL;
	return rc;
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

static int load_file(struct hist_set *s, const char *path, char *err, size_t errlen)
{
	struct hist_file_hdr h;
	struct hist_txn t;
	FILE *f = fopen(path, "rb");
	int rc = 0;

	if (!f) {
		rc = -errno;
		snprintf(err, errlen, "%s: %s", path, strerror(errno));
		return rc;
	}
	if (fread(&h, sizeof(h), 1, f) != 1 || memcmp(h.magic, HIST_MAGIC, sizeof(HIST_MAGIC)) ||
	    h.version != 1 || h.rec_size != sizeof(t)) {
		snprintf(err, errlen, "%s: not a history file of this version", path);
		rc = -EPROTO;
		goto close_file;
	}
	while (fread(&t, sizeof(t), 1, f) == 1) {
		if (t.nops > HIST_MAX_OPS) {
			snprintf(err, errlen, "%s: record with %u operations", path, t.nops);
			rc = -EPROTO;
			goto close_file;
		}
		rc = hist_set_add(s, &t);
		if (rc)
			goto close_file;
	}
	if (ferror(f)) {
		snprintf(err, errlen, "%s: read error", path);
		rc = -EIO;
	}
close_file:
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

/* SI: the wr/ww edges first (their cycles are G1c), then G-single over the rw edges. */
static int find_si_violation(struct checker *ck)
{
	size_t nd = 0, ne = ck->ne;
	int rc;

	for (size_t e = 0; e < ne; e++) { /* stable partition: dependencies first */
		if (ck->edges[e].kind != EDGE_RW) {
			struct edge t = ck->edges[e];

			memmove(&ck->edges[nd + 1], &ck->edges[nd], (e - nd) * sizeof(t));
			ck->edges[nd++] = t;
		}
	}
	ck->ne = nd;
	rc = find_cycle(ck);
	ck->ne = ne;
	if (rc || ck->rep->violations)
		return rc;
	return find_g_single(ck, nd);
}

static int hist_check_mode(const struct hist_set *s, const uint64_t *final, uint64_t nkeys,
			   struct hist_report *rep, bool si)
{
	struct checker ck = { .s = s, .rep = rep };
	int rc;

	memset(rep, 0, sizeof(*rep));
	rep->txns = s->n;
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
