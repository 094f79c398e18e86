/* SPDX-License-Identifier: MIT */
/* Utilization of a measured phase and its bottleneck; see utilization.h. */
#include "utilization.h"

#include <errno.h>
#include <inttypes.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static const char *const class_names[REMORA_COST_CLASSES] = {"reads", "writes", "atomics"};
static const char *const class_keys[REMORA_COST_CLASSES] = {"read", "write", "atomic"};

const char *ut_class_name(unsigned c) { return c < REMORA_COST_CLASSES ? class_names[c] : "?"; }

static uint64_t process_cpu_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* The host's CPU time, busy and total, in jiffies: the first line of /proc/stat. */
static void host_cpu(uint64_t *busy, uint64_t *total)
{
	unsigned long long v[8] = {0};
	FILE *f = fopen("/proc/stat", "r");

	*busy = *total = 0;
	if (!f)
		return;
	if (fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3],
		   &v[4], &v[5], &v[6], &v[7]) == 8) {
		for (unsigned i = 0; i < 8; i++)
			*total += v[i];
		*busy = *total - v[3] - v[4]; /* all but idle and iowait */
	}
	fclose(f);
}

void ut_snap(struct remora_transport *tp, struct ut_snap *s)
{
	memset(s, 0, sizeof(*s));
	s->cost = tp && remora_transport_cost_stats(tp, &s->st) == 0;
	s->cpu_ns = process_cpu_ns();
	host_cpu(&s->host_busy, &s->host_total);
}

static uint64_t diff(uint64_t b, uint64_t a) { return b > a ? b - a : 0; }

void ut_window(const struct ut_snap *a, const struct ut_snap *b, struct ut_window *w)
{
	memset(w, 0, sizeof(*w));
	w->n = 1;
	w->cpu_s = (double)diff(b->cpu_ns, a->cpu_ns) / 1e9;
	w->scale = b->st.mn_scale ? b->st.mn_scale : 1;
	if (a->host_total && b->host_total > a->host_total) {
		w->host_busy = (double)diff(b->host_busy, a->host_busy);
		w->host_total = (double)(b->host_total - a->host_total);
	}
	if (!a->cost || !b->cost)
		return;
	w->cost_s = (double)diff(b->st.now_ns, a->st.now_ns) / 1e9;
	memcpy(w->svc_ns, b->st.svc_ns, sizeof(w->svc_ns));
	w->msg_svc_ns = b->st.msg_svc_ns;
	for (unsigned n = 0; n < REMORA_MAX_MN; n++)
		for (unsigned c = 0; c < REMORA_COST_CLASSES; c++)
			w->mn_busy_ns[n][c] = diff(b->st.mn_busy_ns[n][c], a->st.mn_busy_ns[n][c]);
	for (unsigned n = 0; n < REMORA_MAX_CN; n++)
		w->cn_msg_busy_ns[n] = diff(b->st.cn_msg_busy_ns[n], a->st.cn_msg_busy_ns[n]);
}

void ut_merge(struct ut_window *dst, const struct ut_window *src)
{
	if (!src->n)
		return;
	if (!dst->n || !dst->cost_s) {
		memcpy(dst->svc_ns, src->svc_ns, sizeof(dst->svc_ns));
		dst->msg_svc_ns = src->msg_svc_ns;
	}
	if (!dst->scale)
		dst->scale = src->scale;
	dst->n += src->n;
	dst->cost_s += src->cost_s;
	dst->cpu_s += src->cpu_s;
	dst->host_busy += src->host_busy;
	dst->host_total += src->host_total;
	for (unsigned n = 0; n < REMORA_MAX_MN; n++)
		for (unsigned c = 0; c < REMORA_COST_CLASSES; c++)
			dst->mn_busy_ns[n][c] += src->mn_busy_ns[n][c];
	for (unsigned n = 0; n < REMORA_MAX_CN; n++)
		dst->cn_msg_busy_ns[n] += src->cn_msg_busy_ns[n];
}

void ut_line(FILE *f, const struct ut_window *w)
{
	bool first = true;

	fprintf(f,
		"\"util\":{\"n\":%u,\"cost_s\":%.9f,\"cpu_s\":%.9f,\"host\":[%.0f,%.0f],"
		"\"scale\":%u,\"svc\":[%" PRIu64 ",%" PRIu64 ",%" PRIu64 "],\"msg_svc\":%" PRIu64
		",\"mn\":[",
		w->n, w->cost_s, w->cpu_s, w->host_busy, w->host_total, w->scale, w->svc_ns[0],
		w->svc_ns[1], w->svc_ns[2], w->msg_svc_ns);
	for (unsigned n = 0; n < REMORA_MAX_MN; n++)
		for (unsigned c = 0; c < REMORA_COST_CLASSES; c++) {
			if (!w->mn_busy_ns[n][c])
				continue;
			fprintf(f, "%s[%u,%u,%" PRIu64 "]", first ? "" : ",", n, c,
				w->mn_busy_ns[n][c]);
			first = false;
		}
	fprintf(f, "],\"msg\":[");
	first = true;
	for (unsigned n = 0; n < REMORA_MAX_CN; n++) {
		if (!w->cn_msg_busy_ns[n])
			continue;
		fprintf(f, "%s[%u,%" PRIu64 "]", first ? "" : ",", n, w->cn_msg_busy_ns[n]);
		first = false;
	}
	fprintf(f, "]}");
}

static uint64_t jidx(json_t *a, size_t i)
{
	return (uint64_t)json_integer_value(json_array_get(a, i));
}

int ut_parse(json_t *o, struct ut_window *w)
{
	size_t i;
	json_t *e;

	memset(w, 0, sizeof(*w));
	if (!o)
		return 0;
	if (!json_is_object(o))
		return -EPROTO;
	w->n = (unsigned)json_integer_value(json_object_get(o, "n"));
	w->cost_s = json_number_value(json_object_get(o, "cost_s"));
	w->cpu_s = json_number_value(json_object_get(o, "cpu_s"));
	w->host_busy = json_number_value(json_array_get(json_object_get(o, "host"), 0));
	w->host_total = json_number_value(json_array_get(json_object_get(o, "host"), 1));
	w->scale = (unsigned)json_integer_value(json_object_get(o, "scale"));
	for (unsigned c = 0; c < REMORA_COST_CLASSES; c++)
		w->svc_ns[c] = jidx(json_object_get(o, "svc"), c);
	w->msg_svc_ns = (uint64_t)json_integer_value(json_object_get(o, "msg_svc"));
	json_array_foreach(json_object_get(o, "mn"), i, e)
	{
		uint64_t n = jidx(e, 0), c = jidx(e, 1);

		if (n >= REMORA_MAX_MN || c >= REMORA_COST_CLASSES)
			return -EPROTO;
		w->mn_busy_ns[n][c] = jidx(e, 2);
	}
	json_array_foreach(json_object_get(o, "msg"), i, e)
	{
		uint64_t n = jidx(e, 0);

		if (n >= REMORA_MAX_CN)
			return -EPROTO;
		w->cn_msg_busy_ns[n] = jidx(e, 1);
	}
	return 0;
}

static void consider(struct ut_report *r, const char *what, double u)
{
	if (u > r->bottleneck_util || !r->bottleneck[0]) {
		memcpy(r->next, r->bottleneck, sizeof(r->next));
		r->next_util = r->bottleneck_util;
		snprintf(r->bottleneck, sizeof(r->bottleneck), "%s", what);
		r->bottleneck_util = u;
	} else if (u > r->next_util || !r->next[0]) {
		snprintf(r->next, sizeof(r->next), "%s", what);
		r->next_util = u;
	}
}

void ut_report(const struct ut_window *w, double wall_s, unsigned workers, unsigned n_mn,
	       unsigned n_cn, struct ut_report *r)
{
	long online = sysconf(_SC_NPROCESSORS_ONLN);
	char what[64];

	memset(r, 0, sizeof(*r));
	r->scale = w->scale ? w->scale : 1;
	r->cores = workers;
	if (online > 0 && (unsigned long)online < r->cores)
		r->cores = (unsigned)online;
	if (!r->cores)
		r->cores = 1;
	r->cpu_s = w->cpu_s;
	r->cpu = wall_s > 0 ? w->cpu_s / (wall_s * r->cores) : 0;
	r->host_cpu = w->host_total > 0 ? w->host_busy / w->host_total : -1;
	r->cost = w->cost_s > 0;
	if (r->cost) {
		/* every window read the same cluster-wide counters: their average */
		for (unsigned n = 0; n < REMORA_MAX_MN; n++)
			for (unsigned c = 0; c < REMORA_COST_CLASSES; c++)
				r->mn[n][c] = (double)w->mn_busy_ns[n][c] / 1e9 / w->cost_s;
		for (unsigned n = 0; n < REMORA_MAX_CN; n++)
			r->cn_msg[n] = (double)w->cn_msg_busy_ns[n] / 1e9 / w->cost_s;
	}
	consider(r, "compute CPU", r->cpu);
	/* the host full of other processes' work: the compute side was starved, not slow */
	if (r->host_cpu >= 0.9 && r->host_cpu > r->cpu + 0.2)
		consider(r, "host CPU (shared with other processes)", r->host_cpu);
	for (unsigned n = 0; r->cost && n < n_mn && n < REMORA_MAX_MN; n++)
		for (unsigned c = 0; c < REMORA_COST_CLASSES; c++) {
			if (!w->svc_ns[c])
				continue; /* no rate limit: never the bottleneck */
			snprintf(what, sizeof(what), "memory node %u %s", n, class_names[c]);
			consider(r, what, r->mn[n][c]);
		}
	for (unsigned n = 0; r->cost && w->msg_svc_ns && n < n_cn && n < REMORA_MAX_CN; n++) {
		snprintf(what, sizeof(what), "compute node %u NIC sends", n);
		consider(r, what, r->cn_msg[n]);
	}
}

void ut_print(FILE *f, const struct ut_report *r, unsigned n_mn, unsigned n_cn)
{
	fprintf(f, "  utilization   ");
	for (unsigned n = 0; r->cost && n < n_mn && n < REMORA_MAX_MN; n++)
		fprintf(f, " MN%u read %.0f%% write %.0f%% atomic %.0f%%;", n, 100 * r->mn[n][0],
			100 * r->mn[n][1], 100 * r->mn[n][2]);
	if (r->cost) {
		double m = 0;

		for (unsigned n = 0; n < n_cn && n < REMORA_MAX_CN; n++)
			m = r->cn_msg[n] > m ? r->cn_msg[n] : m;
		fprintf(f, " CN NIC sends max %.0f%%;", 100 * m);
	} else {
		fprintf(f, " (no cost profile: memory nodes unmodelled)");
	}
	fprintf(f, " compute CPU %.0f%% of %u core%s", 100 * r->cpu, r->cores,
		r->cores == 1 ? "" : "s");
	if (r->host_cpu >= 0)
		fprintf(f, "; host CPU %.0f%% (all processes)", 100 * r->host_cpu);
	fputc('\n', f);
	fprintf(f, "  bottleneck     %s %.0f%%", r->bottleneck, 100 * r->bottleneck_util);
	if (r->next[0])
		fprintf(f, " (next: %s %.0f%%)", r->next, 100 * r->next_util);
	fputc('\n', f);
}

void ut_json(struct bu_json *j, const struct ut_report *r, unsigned n_mn, unsigned n_cn)
{
	bu_json_obj_begin(j, "utilization");
	bu_json_bool(j, "modelled", r->cost);
	bu_json_u64(j, "mn_scale", r->scale);
	bu_json_arr_begin(j, "mn");
	for (unsigned n = 0; r->cost && n < n_mn && n < REMORA_MAX_MN; n++) {
		bu_json_obj_begin(j, NULL);
		bu_json_u64(j, "node", n);
		for (unsigned c = 0; c < REMORA_COST_CLASSES; c++)
			bu_json_f64(j, class_keys[c], r->mn[n][c]);
		bu_json_obj_end(j);
	}
	bu_json_arr_end(j);
	bu_json_arr_begin(j, "cn_msg_send");
	for (unsigned n = 0; r->cost && n < n_cn && n < REMORA_MAX_CN; n++)
		bu_json_f64(j, NULL, r->cn_msg[n]);
	bu_json_arr_end(j);
	bu_json_f64(j, "cpu", r->cpu);
	bu_json_u64(j, "cpu_cores", r->cores);
	bu_json_f64(j, "cpu_seconds", r->cpu_s);
	if (r->host_cpu >= 0)
		bu_json_f64(j, "host_cpu", r->host_cpu);
	bu_json_obj_begin(j, "bottleneck");
	bu_json_str(j, "what", r->bottleneck);
	bu_json_f64(j, "utilization", r->bottleneck_util);
	bu_json_obj_end(j);
	bu_json_obj_end(j);
}
