// SPDX-License-Identifier: MIT
#include "bench_timeline.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "recovery/recovery.h"

#define BTL_BASE_MS 1000u /* the baseline: the survivors' mean over this long before the kill */
#define BTL_WINDOW_MS 20u /* back to 90%: the first window this long at 90% of the baseline */
/* Longest span the nodes' timelines may cover together: wider means clocks or lines that do
 * not line up (a missing tl_t0_ms next to wall-clock ones), not a run. */
#define BTL_MAX_SPAN_MS (6u * 3600u * 1000u)

void btl_line(FILE *f, const struct wlr_result *r)
{
	struct recovery_event ev;

	if (!r->tl)
		return;
	fprintf(f, ",\"tl_t0_ms\":%" PRIu64 ",\"tl\":[", r->tl_t0_ms);
	for (uint32_t i = 0; i < r->tl_len; i++)
		fprintf(f, "%s%u", i ? "," : "", r->tl[i]);
	fputc(']', f);
	if (recovery_last_event(&ev))
		fprintf(f, ",\"online\":{\"%s\":%u,\"here\":%s,\"seen_s\":%.6f,\"total_ms\":%.6f,"
			"\"logs_ms\":%.6f,\"logs\":%" PRIu64 "}", ev.mn ? "mn" : "cn",
			ev.cn, ev.here ? "true" : "false", ev.seen_s, ev.total_ms, ev.logs_ms, ev.logs);
}

/* Widens t to cover [t0, t0 + len) ms. */
static int btl_cover(struct btl *t, uint64_t t0, uint32_t len)
{
	uint64_t lo = t->ms ? (t0 < t->t0_ms ? t0 : t->t0_ms) : t0;
	uint64_t hi = t->ms ? t->t0_ms + t->len : t0 + len;
	uint64_t *ms;

	if (t0 + len > hi)
		hi = t0 + len;
	if (hi - lo > BTL_MAX_SPAN_MS)
		return -ERANGE;
	if (t->ms && lo == t->t0_ms && hi == t->t0_ms + t->len)
		return 0;
	ms = calloc(hi - lo, sizeof(*ms));
	if (!ms)
		return -ENOMEM;
	if (t->ms)
		memcpy(ms + (t->t0_ms - lo), t->ms, t->len * sizeof(*ms));
	free(t->ms);
	t->ms = ms;
	t->t0_ms = lo;
	t->len = (uint32_t)(hi - lo);
	return 0;
}

static void btl_event(struct btl *t, json_t *on)
{
	double seen = json_real_value(json_object_get(on, "seen_s"));

	if (!json_is_object(on))
		return;
	if (!t->have_event || seen < t->seen_s)
		t->seen_s = seen;
	t->have_event = true;
	if (json_is_true(json_object_get(on, "here"))) {
		t->recover_ms = json_real_value(json_object_get(on, "total_ms"));
		t->logs_ms = json_real_value(json_object_get(on, "logs_ms"));
		t->logs = (uint64_t)json_integer_value(json_object_get(on, "logs"));
	}
}

int btl_add(struct btl *t, const char *line)
{
	json_t *root = json_loads(line, 0, NULL), *tl = json_object_get(root, "tl");
	json_int_t t0 = json_integer_value(json_object_get(root, "tl_t0_ms"));
	size_t n = json_array_size(tl);
	int rc = 0;

	if (json_is_array(tl) && n) {
		/* no start time (0) or a span of n ms alone past the limit: nothing to align */
		rc = t0 <= 0 || n > BTL_MAX_SPAN_MS ? -ERANGE : btl_cover(t, (uint64_t)t0, (uint32_t)n);
		for (size_t i = 0; !rc && i < n; i++)
			t->ms[t0 - t->t0_ms + i] +=
				(uint64_t)json_integer_value(json_array_get(tl, i));
		btl_event(t, json_object_get(root, "online"));
	}
	json_decref(root);
	return rc;
}

void btl_free(struct btl *t)
{
	free(t->ms);
	memset(t, 0, sizeof(*t));
}

static double window_mean(const struct btl *t, uint32_t from, uint32_t n)
{
	uint64_t s = 0;

	for (uint32_t i = from; i < from + n && i < t->len; i++)
		s += t->ms[i];
	return n ? (double)s / n : 0;
}

void btl_figures(const struct btl *t, double kill_s, struct btl_figures *f)
{
	uint32_t k, end = t->len;

	while (end && !t->ms[end - 1])
		end--; /* the run is over: the slack after it is no drop */
	*f = (struct btl_figures){ .kill_ms = -1, .detect_ms = -1, .recovered_ms = -1,
				   .back90_ms = -1, .min_per_ms = -1 };
	if (!t->ms || kill_s <= 0 || kill_s * 1000 < (double)t->t0_ms ||
	    kill_s * 1000 >= (double)(t->t0_ms + t->len))
		return;
	f->kill_ms = kill_s * 1000 - (double)t->t0_ms;
	k = (uint32_t)f->kill_ms;
	f->base_per_ms = window_mean(t, k > BTL_BASE_MS ? k - BTL_BASE_MS : 0,
				     k > BTL_BASE_MS ? BTL_BASE_MS : k);
	/* An event before the kill is an earlier one's (--kill mnI@T --kill cnJ@T2: the
	 * failover's), not this kill's recovery. */
	if (t->have_event && t->seen_s >= kill_s) {
		f->detect_ms = t->seen_s * 1000 - kill_s * 1000;
		if (t->recover_ms > 0)
			f->recovered_ms = f->detect_ms + t->recover_ms;
	}
	for (uint32_t i = f->detect_ms >= 0 ? k + (uint32_t)f->detect_ms : end; i < end; i++)
		f->after += t->ms[i];
	for (uint32_t i = k; i + BTL_WINDOW_MS <= end; i++) {
		double m = window_mean(t, i, BTL_WINDOW_MS);

		if (f->min_per_ms < 0 || m < f->min_per_ms)
			f->min_per_ms = m;
		if (f->back90_ms < 0 && i > k + BTL_WINDOW_MS && f->detect_ms >= 0 &&
		    i >= k + (uint32_t)f->detect_ms && m >= 0.9 * f->base_per_ms)
			f->back90_ms = (double)(i + BTL_WINDOW_MS) - f->kill_ms;
	}
}

void btl_print(FILE *f, const struct btl *t, double kill_s)
{
	struct btl_figures g;

	if (!t->ms)
		return;
	btl_figures(t, kill_s, &g);
	if (g.kill_ms < 0) {
		fprintf(f, "  timeline       %u ms of per-ms commits (no kill in it)\n", t->len);
		return;
	}
	fprintf(f, "  kill           at %.0f ms; survivors before it %.1f txn/ms; lowest 20 ms "
		"window after it %.1f txn/ms\n", g.kill_ms, g.base_per_ms, g.min_per_ms);
	if (g.detect_ms < 0)
		fprintf(f, "  recovery       none seen after the kill\n");
	else
		fprintf(f, "  recovery       detected %.1f ms after the kill; recovered %.1f ms "
			"after (%" PRIu64 " logs, %.3f ms); back to 90%% at %.0f ms; %" PRIu64
			" committed since the detection\n", g.detect_ms, g.recovered_ms, t->logs,
			t->recover_ms, g.back90_ms, g.after);
}

void btl_json(struct bu_json *j, const struct btl *t, double kill_s)
{
	struct btl_figures g;

	if (!t->ms)
		return;
	btl_figures(t, kill_s, &g);
	bu_json_obj_begin(j, "timeline");
	bu_json_u64(j, "t0_ms", t->t0_ms);
	bu_json_f64(j, "kill_ms", g.kill_ms);
	bu_json_f64(j, "base_txn_per_ms", g.base_per_ms);
	bu_json_f64(j, "min_txn_per_ms", g.min_per_ms);
	bu_json_f64(j, "detect_ms", g.detect_ms);
	bu_json_f64(j, "recovered_ms", g.recovered_ms);
	bu_json_f64(j, "recovery_ms", t->recover_ms);
	bu_json_f64(j, "recovery_logs_ms", t->logs_ms);
	bu_json_u64(j, "recovery_logs", t->logs);
	bu_json_f64(j, "back90_ms", g.back90_ms);
	bu_json_u64(j, "committed_after_detect", g.after);
	bu_json_arr_begin(j, "txn_per_ms");
	for (uint32_t i = 0; i < t->len; i++)
		bu_json_u64(j, NULL, t->ms[i]);
	bu_json_arr_end(j);
	bu_json_obj_end(j);
}
