/* SPDX-License-Identifier: MIT */
/*
 * Recovery entry points: the whole-cluster recovery hands the opened database to the recover
 * op of a protocol built for its record codec (the log body and the rules that decide a log
 * are the protocol's: runtime/txn/proto/<name>/), and the memory node's check of its own pool.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "recovery.h"
#include "store/store.h"
#include "txn/protocol.h"

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* The first built protocol of codec with a whole-cluster recover op (they share the log). */
static const struct remora_proto_ops *recovering_proto(uint32_t codec)
{
	for (unsigned i = 0; remora_proto_registry[i]; i++) {
		const struct remora_proto_ops *p = remora_proto_registry[i];

		if (p->codec == codec && p->size > offsetof(struct remora_proto_ops, recover) &&
		    p->recover)
			return p;
	}
	return NULL;
}

/*
 * The database is clean again: reads the open counts and recovery marks of every node (they
 * are reported), then, unless checking, zeroes both, durably. After the protocol's recovery no
 * log is live and no lock held, and recovery runs only while no compute node is a member, so
 * no open is live either. The words are the store's, whatever the protocol.
 */
static int clear_marks(struct remora_store *st, struct remora_chan *ch, bool check,
		       struct remora_recovery_report *rep, char *err, size_t errlen)
{
	const uint64_t off = REMORA_STORE_CONTROL_OFF +
			     offsetof(struct remora_store_control, live_opens);
	static const uint64_t zero[2];
	uint64_t w[REMORA_MAX_MN][2];
	struct remora_wr wrs[REMORA_MAX_MN];
	unsigned n = 0;
	int rc;

	for (uint16_t m = 0; m < st->n_mn; m++)
		wrs[m] = remora_store_wr_read(st, m, off, w[m], sizeof(w[m]));
	rc = remora_store_exec(ch, wrs, st->n_mn);
	for (uint16_t m = 0; m < st->n_mn && !rc; m++) {
		rep->live_opens += w[m][0];
		rep->marked += w[m][1];
		if (!check && (w[m][0] || w[m][1]))
			wrs[n++] = remora_store_wr_write(st, m, off, zero, sizeof(zero),
							 REMORA_WR_DURABLE);
	}
	if (!rc)
		rc = remora_store_exec(ch, wrs, n);
	if (rc && err && errlen)
		snprintf(err, errlen, "recover: clearing the recovery marks: %s",
			 remora_strerror(rc));
	return rc;
}

int remora_recovery_run(struct remora_transport *tp,
				   const struct remora_recovery_cfg *cfg,
				   struct remora_recovery_report *rep, char *err, size_t errlen)
{
	const struct remora_proto_ops *p;
	struct remora_store *st;
	struct remora_chan *ch;
	uint64_t t0 = now_ns();
	int rc;

	if (!tp || !cfg || cfg->size < sizeof(*cfg) || !rep) {
		if (err && errlen)
			snprintf(err, errlen, "recover: missing transport or configuration");
		return -EINVAL;
	}
	memset(rep, 0, sizeof(*rep));
	st = calloc(1, sizeof(*st));
	if (!st)
		return -ENOMEM;
	rc = remora_chan_open(tp, &ch);
	if (rc) {
		free(st);
		if (err && errlen)
			snprintf(err, errlen, "recover: cannot open a channel: %s",
				 remora_strerror(rc));
		return rc;
	}
	/* REMORA_CODEC_NONE: whichever codec the database was formatted with. */
	rc = remora_store_open(st, tp, ch, cfg->n_mn, 0, REMORA_CODEC_NONE, err, errlen);
	p = rc ? NULL : recovering_proto(st->sb.codec);
	if (p) {
		rc = p->recover(st, ch, cfg->flags, rep, err, errlen);
		if (!rc)
			rc = clear_marks(st, ch, cfg->flags & REMORA_RECOVERY_CHECK, rep, err, errlen);
	} else if (!rc) {
		rc = -REMORA_ECONFIG;
		if (err && errlen)
			snprintf(err, errlen,
				 "recover: no protocol of this build recovers the %s record codec",
				 st->codec->name);
	}
	rep->ns_total = now_ns() - t0;
	remora_chan_close(ch);
	free(st);
	return rc;
}

/* ---- the memory node's own check ------------------------------------------------------- */

static int pool_err(char *err, size_t len, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static int pool_err(char *err, size_t len, const char *fmt, ...)
{
	va_list ap;

	if (err && len) {
		va_start(ap, fmt);
		vsnprintf(err, len, fmt, ap);
		va_end(ap);
	}
	return -REMORA_ELAYOUT;
}

int remora_recovery_pool_check(const void *base, uint64_t bytes, uint16_t node,
					  char *err, size_t errlen)
{
	const unsigned char *p = base;
	struct remora_store_sb sb;
	bool zero = true;

	if (bytes < REMORA_STORE_SB_BYTES)
		return 1; /* too small to hold any database: a format will say so */
	for (size_t i = 0; i < REMORA_STORE_SB_BYTES && zero; i++)
		zero = p[i] == 0;
	if (zero)
		return 1;
	memcpy(&sb, p, sizeof(sb));
	if (sb.magic != REMORA_STORE_MAGIC)
		return pool_err(err, errlen,
				"the pool holds no remora database (magic %#llx); "
				"start with --format to erase it",
				(unsigned long long)sb.magic);
	if (sb.layout_version != REMORA_STORE_LAYOUT_VERSION || sb.sb_bytes != sizeof(sb))
		return pool_err(err, errlen,
				"the database has layout version %u, this build reads version %u",
				sb.layout_version, REMORA_STORE_LAYOUT_VERSION);
	if (sb.csum != remora_store_csum(REMORA_STORE_SB_CSUM_SEED, &sb,
					 offsetof(struct remora_store_sb, csum)))
		return pool_err(err, errlen,
				"the database superblock fails its checksum (corrupt)");
	if (sb.node != node)
		return pool_err(err, errlen, "the database was formatted as memory node %u, not %u",
				sb.node, node);
	if (sb.layout_bytes > bytes || sb.log_off + sb.log_bytes > sb.layout_bytes ||
	    sb.data_off + sb.data_bytes > sb.layout_bytes)
		return pool_err(err, errlen,
				"the database needs %llu bytes but the pool has %llu",
				(unsigned long long)sb.layout_bytes, (unsigned long long)bytes);
	return 0;
}

void remora_recovery_pool_erase(void *base, uint64_t bytes)
{
	memset(base, 0, bytes < REMORA_STORE_SB_BYTES ? bytes : REMORA_STORE_SB_BYTES);
}

uint64_t remora_recovery_pool_mark(void *base, uint64_t bytes)
{
	struct remora_store_control *c;

	if (bytes < REMORA_STORE_CONTROL_OFF + sizeof(*c))
		return 0;
	c = (struct remora_store_control *)(void *)((char *)base + REMORA_STORE_CONTROL_OFF);
	if (!c->live_opens)
		return 0;
	c->needs_recovery += c->live_opens;
	c->live_opens = 0;
	return c->needs_recovery;
}
