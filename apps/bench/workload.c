// SPDX-License-Identifier: MIT
#include "workload.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <sched.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <remora/sched.h>

extern const struct wl_desc wl_kvs;
extern const struct wl_desc wl_ycsb;
extern const struct wl_desc wl_smallbank;
extern const struct wl_desc wl_litmus;
extern const struct wl_desc wl_tatp;
extern const struct wl_desc wl_tpcc;
extern const struct wl_desc wl_objstore;

static const struct wl_desc *const registry[] = {
	&wl_kvs, &wl_ycsb, &wl_smallbank, &wl_litmus, &wl_tatp, &wl_tpcc, &wl_objstore, NULL,
};

const struct wl_desc *const *wl_list(void)
{
	return registry;
}

const struct wl_desc *wl_find(const char *name)
{
	for (unsigned i = 0; registry[i]; i++)
		if (strcmp(registry[i]->name, name) == 0)
			return registry[i];
	return NULL;
}

const struct wl_knob *wl_knob_find(const struct wl_desc *d, const char *name)
{
	for (const struct wl_knob *k = d->knobs; k && k->name; k++)
		if (strcmp(k->name, name) == 0)
			return k;
	return NULL;
}

const char *const *wl_all_knob_names(void)
{
	static const char *names[64];
	static unsigned n;

	if (n)
		return names;
	for (unsigned i = 0; registry[i]; i++) {
		for (const struct wl_knob *k = registry[i]->knobs; k && k->name; k++) {
			unsigned j;

			for (j = 0; j < n; j++)
				if (strcmp(names[j], k->name) == 0)
					break;
			if (j == n && n + 1 < sizeof(names) / sizeof(names[0]))
				names[n++] = k->name;
		}
	}
	names[n] = NULL;
	return names;
}

int wl_args_set(struct wl_args *a, const char *name, const char *value)
{
	for (unsigned i = 0; i < a->n; i++) {
		if (strcmp(a->name[i], name) == 0) {
			a->value[i] = value;
			return 0;
		}
	}
	if (a->n == WL_MAX_KNOBS)
		return -ENOSPC;
	a->name[a->n] = name;
	a->value[a->n] = value;
	a->n++;
	return 0;
}

int wl_fail(struct wl *wl, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(wl->err, sizeof(wl->err), fmt, ap);
	va_end(ap);
	return -REMORA_ECONFIG;
}

int wl_setup(struct wl *wl, const struct wl_desc *d, const struct wl_args *args, uint64_t seed,
	     unsigned total_coords)
{
	memset(wl, 0, sizeof(*wl));
	wl->desc = d;
	wl->seed = seed;
	wl->total_coords = total_coords ? total_coords : 1;
	if (args)
		wl->args = *args;
	for (unsigned i = 0; i < wl->args.n; i++)
		if (!wl_knob_find(d, wl->args.name[i]))
			return wl_fail(wl, "option --%s does not apply to workload %s",
				       wl->args.name[i], d->name);
	return d->init ? d->init(wl) : 0;
}

void wl_teardown(struct wl *wl)
{
	if (wl->desc && wl->desc->fini)
		wl->desc->fini(wl);
	wl->priv = NULL;
}

const char *wl_knob_str(const struct wl *wl, const char *name)
{
	const struct wl_knob *k;

	for (unsigned i = 0; i < wl->args.n; i++)
		if (strcmp(wl->args.name[i], name) == 0 && wl->args.value[i])
			return wl->args.value[i];
	k = wl_knob_find(wl->desc, name);
	return k ? k->def : NULL;
}

/* Counts take decimal suffixes (1M = 10^6 records), unlike byte sizes. */
static int parse_count(const char *s, uint64_t *out)
{
	char *end;
	unsigned long long v;
	uint64_t mul = 1;

	if (!s || !*s || *s == '-' || *s == '+')
		return -EINVAL;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno || end == s)
		return -EINVAL;
	switch (*end) {
	case 'k':
	case 'K':
		mul = 1000;
		end++;
		break;
	case 'm':
	case 'M':
		mul = 1000000;
		end++;
		break;
	case 'g':
	case 'G':
		mul = 1000000000;
		end++;
		break;
	default:
		break;
	}
	if (*end || (v && mul > UINT64_MAX / v))
		return -EINVAL;
	*out = v * mul;
	return 0;
}

int wl_knob_u64(struct wl *wl, const char *name, uint64_t min, uint64_t max, uint64_t *out)
{
	const char *s = wl_knob_str(wl, name);
	uint64_t v;

	if (parse_count(s, &v))
		return wl_fail(wl, "--%s: '%s' is not a count (digits, optional k/M/G suffix)",
			       name, s ? s : "");
	if (v < min || v > max)
		return wl_fail(wl, "--%s: %llu is outside [%llu, %llu]", name,
			       (unsigned long long)v, (unsigned long long)min,
			       (unsigned long long)max);
	*out = v;
	return 0;
}

int wl_knob_double(struct wl *wl, const char *name, double min, double max, double *out)
{
	const char *s = wl_knob_str(wl, name);
	char *end;
	double v;

	if (!s || !*s)
		return wl_fail(wl, "--%s: missing value", name);
	errno = 0;
	v = strtod(s, &end);
	if (errno || *end || !isfinite(v))
		return wl_fail(wl, "--%s: '%s' is not a number", name, s);
	if (v < min || v > max)
		return wl_fail(wl, "--%s: %g is outside [%g, %g]", name, v, min, max);
	*out = v;
	return 0;
}

int wl_knob_onoff(struct wl *wl, const char *name, bool *out)
{
	static const char *const onoff[] = { "off", "on", NULL };
	unsigned m = 0;
	int rc = wl_knob_choice(wl, name, onoff, &m);

	*out = m == 1;
	return rc;
}

int wl_knob_choice(struct wl *wl, const char *name, const char *const *choices, unsigned *out)
{
	const char *s = wl_knob_str(wl, name);
	char list[128] = "";

	for (unsigned i = 0; choices[i]; i++) {
		if (s && strcmp(s, choices[i]) == 0) {
			*out = i;
			return 0;
		}
		if (i)
			strncat(list, "|", sizeof(list) - strlen(list) - 1);
		strncat(list, choices[i], sizeof(list) - strlen(list) - 1);
	}
	return wl_fail(wl, "--%s: '%s' is not one of %s", name, s ? s : "", list);
}

static uint64_t gcd64(uint64_t a, uint64_t b)
{
	while (b) {
		uint64_t t = a % b;

		a = b;
		b = t;
	}
	return a;
}

int wl_keydist_init(struct wl *wl, struct wl_keydist *kd, uint64_t n, double theta,
		    bool scramble)
{
	memset(kd, 0, sizeof(*kd));
	kd->n = n;
	if (wl_zipf_init(&kd->zipf, n, theta))
		return wl_fail(wl, "cannot draw from %llu keys with theta %g",
			       (unsigned long long)n, theta);
	kd->scramble = scramble && theta > 0.0 && n > 2;
	if (kd->scramble) {
		/* An affine map with gcd(mul, n) == 1 is a bijection of [0, n). */
		kd->mul = (uint64_t)((double)n * 0.6180339887) | 1;
		while (gcd64(kd->mul, n) != 1)
			kd->mul += 2;
		kd->add = n / 3;
	}
	return 0;
}

int wl_keydist_setup(struct wl *wl, struct wl_keydist *kd, uint64_t n, const char *dist_knob,
		     const char *theta_knob, bool scramble)
{
	static const char *const dists[] = { "uniform", "zipf", NULL };
	unsigned dist;
	double theta = 0.0;
	int rc;

	rc = wl_knob_choice(wl, dist_knob, dists, &dist);
	if (rc)
		return rc;
	if (dist == 1) {
		rc = wl_knob_double(wl, theta_knob, 0.0, 10.0, &theta);
		if (rc)
			return rc;
	}
	return wl_keydist_init(wl, kd, n, theta, scramble);
}

uint64_t wl_keydist_next(const struct wl_keydist *kd, struct wl_rng *r)
{
	uint64_t rank = wl_zipf_next(&kd->zipf, r);

	if (!kd->scramble)
		return rank;
	return (uint64_t)(((unsigned __int128)rank * kd->mul + kd->add) % kd->n);
}

/* ---- coordinators ----------------------------------------------------------------------- */

#define TXID_SEQ_BITS 34
#define TXID_CORO_BITS 12
#define TXID_THREAD_BITS 10
#define TXID_CN_BITS 8

void wl_coord_prepare(const struct wl *wl, struct wl_coord *c, struct remora_worker *w,
		      uint16_t cn, uint16_t thread, uint16_t coro, uint32_t global_index)
{
	memset(c, 0, sizeof(*c));
	c->w = w;
	c->cn = cn;
	c->thread = thread;
	c->coro = coro;
	c->global_index = global_index;
	wl_rng_seed(&c->rng, wl->seed, ((uint64_t)cn << 32) | ((uint64_t)thread << 16) | coro);
}

int wl_coord_init(const struct wl *wl, struct wl_coord *c)
{
	return wl->desc->coord_init ? wl->desc->coord_init(wl, c) : 0;
}

void wl_coord_fini(const struct wl *wl, struct wl_coord *c)
{
	if (wl->desc->coord_fini)
		wl->desc->coord_fini(wl, c);
	c->priv = NULL;
}

uint64_t wl_txid(const struct wl_coord *c)
{
	uint64_t id = (uint64_t)(c->cn + 1u) & ((1u << TXID_CN_BITS) - 1);

	id = (id << TXID_THREAD_BITS) | (c->thread & ((1u << TXID_THREAD_BITS) - 1));
	id = (id << TXID_CORO_BITS) | (c->coro & ((1u << TXID_CORO_BITS) - 1));
	return (id << TXID_SEQ_BITS) | (c->seq & ((UINT64_C(1) << TXID_SEQ_BITS) - 1));
}

void wl_txid_parts(uint64_t txid, unsigned *cn, unsigned *thread, unsigned *coro, uint64_t *seq)
{
	*seq = txid & ((UINT64_C(1) << TXID_SEQ_BITS) - 1);
	txid >>= TXID_SEQ_BITS;
	*coro = (unsigned)(txid & ((1u << TXID_CORO_BITS) - 1));
	txid >>= TXID_CORO_BITS;
	*thread = (unsigned)(txid & ((1u << TXID_THREAD_BITS) - 1));
	txid >>= TXID_THREAD_BITS;
	*cn = (unsigned)txid - 1;
}

/* ---- the retry loop --------------------------------------------------------------------- */

/*
 * Before retry number n: let the coordinators this one conflicts with finish. Those on this
 * thread need a coroutine yield; those in other threads or processes may be descheduled while
 * holding the lock (compute nodes often have fewer cores than coordinators), so from the third
 * abort on the thread also yields the CPU, and the number of coroutine yields grows
 * exponentially with randomness, which keeps retries from marching in lock step.
 */
static void backoff(struct wl_coord *c, unsigned n)
{
	unsigned spins;

	if (n >= 3)
		sched_yield();
	if (!remora_coro_self())
		return;
	spins = 1 + (unsigned)wl_rng_below(&c->rng, 1u << (n < 6 ? n : 6));
	while (spins--)
		remora_yield();
}

static void count_commit(const struct wl *wl, struct wl_coord *c, const struct wl_input *in,
			 const struct wl_result *res, struct wl_counts *cnt, uint64_t txid)
{
	cnt->committed++;
	if (in->type < WL_MAX_TYPES)
		cnt->committed_by_type[in->type]++;
	cnt->integrity_errors += res->integrity_errors;
	cnt->not_found += res->not_found;
	if (wl->desc->commit)
		wl->desc->commit(wl, c, in, res, txid);
}

int wl_run_txn(const struct wl *wl, struct wl_coord *c, const struct wl_input *in,
	       struct wl_counts *cnt, const int *stop)
{
	const struct wl_desc *d = wl->desc;
	unsigned flags = d->tx_flags ? d->tx_flags(wl, in) : 0;
	unsigned aborts = 0;

	for (;;) {
		enum remora_abort_reason why = REMORA_ABORT_NONE;
		struct wl_result res;
		struct remora_tx *tx;
		uint64_t txid;
		int rc;

		if (stop && __atomic_load_n(stop, __ATOMIC_RELAXED))
			return -ECANCELED;
		c->seq++;
		txid = wl_txid(c);
		cnt->attempts++;
		memset(&res, 0, sizeof(res));
		rc = remora_tx_begin(c->w, flags, &tx);
		if (rc == 0) {
			rc = d->exec(wl, c, tx, in, &res);
			if (rc == 0) {
				rc = remora_tx_commit(tx);
				if (rc == 0) {
					count_commit(wl, c, in, &res, cnt, txid);
					return 0;
				}
				if (rc != -REMORA_EABORT && d->undecided)
					d->undecided(wl, c);
				why = remora_worker_last_abort(c->w);
			} else if (rc == WL_USER_ABORT) {
				remora_tx_abort(tx);
				cnt->user_aborts++;
				return WL_USER_ABORT;
			} else if (rc == WL_RETRY) {
				remora_tx_abort(tx);
				why = REMORA_ABORT_NOT_FOUND;
				rc = -REMORA_EABORT;
			} else {
				/* read the reason before abort() can overwrite it */
				why = remora_worker_last_abort(c->w);
				remora_tx_abort(tx);
			}
		} else if (rc == -REMORA_EABORT) {
			why = remora_worker_last_abort(c->w);
		}
		if (rc != -REMORA_EABORT)
			return rc;
		if ((unsigned)why >= REMORA_ABORT__COUNT)
			why = REMORA_ABORT_NONE;
		cnt->aborts[why]++;
		backoff(c, ++aborts);
	}
}

void wl_counts_add(struct wl_counts *dst, const struct wl_counts *src)
{
	dst->committed += src->committed;
	dst->attempts += src->attempts;
	dst->user_aborts += src->user_aborts;
	for (unsigned i = 0; i < REMORA_ABORT__COUNT; i++)
		dst->aborts[i] += src->aborts[i];
	for (unsigned i = 0; i < WL_MAX_TYPES; i++)
		dst->committed_by_type[i] += src->committed_by_type[i];
	dst->integrity_errors += src->integrity_errors;
	dst->not_found += src->not_found;
	dst->routed += src->routed;
	dst->served += src->served;
	dst->route_lost += src->route_lost;
}

#define LOAD_CHUNK 4096

int wl_load_range(const struct wl *wl, struct remora_worker *w, uint64_t begin, uint64_t end,
		  void (*progress)(void *arg, uint64_t done), void *arg)
{
	for (uint64_t at = begin; at < end;) {
		uint64_t stop = end - at > LOAD_CHUNK ? at + LOAD_CHUNK : end;
		int rc = wl->desc->load(wl, w, at, stop);

		if (rc)
			return rc;
		at = stop;
		if (progress)
			progress(arg, at - begin);
	}
	return remora_db_load_flush(w);
}

int wl_on_worker(struct remora_worker *w, void (*fn)(void *arg), void *arg)
{
	(void)w;
	fn(arg);
	return 0;
}

static uint64_t mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

int wl_fetch_retry(struct remora_worker *w, unsigned tx_flags,
		   int (*stage)(struct remora_tx *tx, void *arg), void *arg, unsigned timeout_ms)
{
	uint64_t deadline = mono_ms() + timeout_ms;

	for (;;) {
		struct remora_tx *tx;
		int rc = remora_tx_begin(w, tx_flags, &tx);

		if (rc)
			return rc;
		rc = stage(tx, arg);
		if (!rc)
			rc = remora_tx_fetch(tx);
		if (!rc)
			rc = remora_tx_commit(tx);
		else
			remora_tx_abort(tx);
		if (rc != -REMORA_EABORT)
			return rc;
		if (mono_ms() > deadline)
			return -ETIMEDOUT;
		sched_yield();
	}
}

struct fetch_keys {
	uint32_t table;
	const uint64_t *keys;
	unsigned n;
	void *vals;
	uint32_t vsize;
	bool *found;
	enum remora_access mode;
};

static int stage_keys(struct remora_tx *tx, void *arg)
{
	const struct fetch_keys *f = arg;
	int rc = 0;

	for (unsigned i = 0; !rc && i < f->n; i++)
		rc = remora_tx_stage(tx, f->table, f->keys[i], f->mode,
				     (uint8_t *)f->vals + (size_t)i * f->vsize, &f->found[i]);
	return rc;
}

static int fetch_keys(struct remora_worker *w, uint32_t table, const uint64_t *keys, unsigned n,
		      void *vals, uint32_t vsize, bool *found, unsigned timeout_ms,
		      enum remora_access mode)
{
	struct fetch_keys f = { table, keys, n, vals, vsize, found, mode };

	return wl_fetch_retry(w, mode == REMORA_RD ? REMORA_TX_READ_ONLY : 0, stage_keys, &f,
			      timeout_ms);
}

int wl_read_keys(struct remora_worker *w, uint32_t table, const uint64_t *keys, unsigned n,
		 void *vals, uint32_t vsize, bool *found, unsigned timeout_ms)
{
	return fetch_keys(w, table, keys, n, vals, vsize, found, timeout_ms, REMORA_RD);
}

int wl_probe_locks(struct remora_worker *w, uint32_t table, const uint64_t *keys, unsigned n,
		   void *vals, uint32_t vsize, bool *found, unsigned timeout_ms)
{
	return fetch_keys(w, table, keys, n, vals, vsize, found, timeout_ms, REMORA_RW);
}

const char *wl_lock_note(const struct remora_worker *w, char *buf, size_t len)
{
	if (len < 3 || remora_worker_last_lock(w, buf + 2, len - 2)) {
		if (len)
			buf[0] = '\0';
		return buf;
	}
	memcpy(buf, "; ", 2);
	return buf;
}

int wl_leaked_lock_msg(const struct remora_worker *w, uint64_t first, unsigned span, char *msg,
		       size_t msglen)
{
	char note[WL_LOCK_NOTE_LEN];

	snprintf(msg, msglen, "a record among keys %" PRIu64 "..%" PRIu64 " stays locked after "
		 "every compute node exited (a leaked lock)%s", first, first + span - 1,
		 wl_lock_note(w, note, sizeof(note)));
	return 1;
}

int wl_read_back(struct remora_worker *w, void (*fn)(void *arg), void *arg, const int *scan_rc,
		 const uint64_t *locked_key, unsigned span, char *msg, size_t msglen)
{
	int rc = wl_on_worker(w, fn, arg);

	if (!rc)
		rc = *scan_rc;
	if (rc == -ETIMEDOUT)
		return wl_leaked_lock_msg(w, *locked_key, span, msg, msglen);
	if (rc)
		snprintf(msg, msglen, "reading the store back failed: %s", remora_strerror(rc));
	return rc;
}

/* The registry's own copy of a knob name (it outlives argv parsing), or NULL. */
static const char *knob_name(const char *arg, size_t len)
{
	for (const char *const *k = wl_all_knob_names(); *k; k++)
		if (strlen(*k) == len && strncmp(*k, arg, len) == 0)
			return *k;
	return NULL;
}

int wl_args_arg(struct wl_args *a, const char *cmd, int argc, char **argv, int *i)
{
	const char *arg = argv[*i], *name, *val;
	size_t len;

	if (strncmp(arg, "--", 2) != 0)
		return 0;
	len = strcspn(arg + 2, "=");
	name = knob_name(arg + 2, len);
	if (!name)
		return 0;
	if (arg[2 + len] == '=') {
		val = arg + 3 + len;
	} else if (*i + 1 < argc) {
		val = argv[++*i];
	} else {
		fprintf(stderr, "remora %s: --%s: missing value\n", cmd, name);
		return 2;
	}
	++*i;
	if (wl_args_set(a, name, val)) {
		fprintf(stderr, "remora %s: too many workload options\n", cmd);
		return 2;
	}
	return 1;
}
