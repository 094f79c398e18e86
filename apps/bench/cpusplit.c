// SPDX-License-Identifier: MIT
#include "cpusplit.h"

#include <errno.h>
#include <inttypes.h>
#include <string.h>
#include <sys/mman.h>

bool cs_thread_start(void)
{
	return prof_thread_start(CS_PERIOD_NS) == 0;
}

void cs_thread_stop(void)
{
	prof_thread_stop();
}

void cs_snap(struct cs_snap *s)
{
	s->cpu_ns = bu_thread_cpu_ns();
	prof_thread_read(&s->prof);
}

void cs_add(struct cs_window *w, const struct cs_snap *a, const struct cs_snap *b)
{
	struct prof_counts d;

	w->cpu_ns += b->cpu_ns - a->cpu_ns;
	prof_counts_diff(&b->prof, &a->prof, &d);
	for (unsigned l = 0; l < PROF__COUNT; l++)
		w->samples[l] += d.samples[l];
	if (d.period_ns)
		w->period_ns = d.period_ns;
}

void cs_merge(struct cs_window *dst, const struct cs_window *src)
{
	dst->cpu_ns += src->cpu_ns;
	for (unsigned l = 0; l < PROF__COUNT; l++)
		dst->samples[l] += src->samples[l];
	if (src->period_ns)
		dst->period_ns = src->period_ns;
}

void cs_line(FILE *f, const struct cs_window *w)
{
	fprintf(f, "\"cpu\":{\"ns\":%" PRIu64 ",\"period_ns\":%" PRIu64 ",\"samples\":[", w->cpu_ns,
		w->period_ns);
	for (unsigned l = 0; l < PROF__COUNT; l++)
		fprintf(f, "%s%" PRIu64, l ? "," : "", w->samples[l]);
	fprintf(f, "]}");
}

int cs_parse(json_t *o, struct cs_window *w)
{
	json_t *a;

	memset(w, 0, sizeof(*w));
	if (!o)
		return 0;
	a = json_object_get(o, "samples");
	if (!json_is_object(o) || !json_is_array(a))
		return -EPROTO;
	w->cpu_ns = (uint64_t)json_integer_value(json_object_get(o, "ns"));
	w->period_ns = (uint64_t)json_integer_value(json_object_get(o, "period_ns"));
	for (unsigned l = 0; l < PROF__COUNT && l < json_array_size(a); l++)
		w->samples[l] = (uint64_t)json_integer_value(json_array_get(a, l));
	return 0;
}

/* ---- the raw cost of one verb on this host --------------------------------------------- */

#define RAW_MAX_BYTES (UINT64_C(1) << 30)
#define RAW_CHUNK 4096u
/*
 * Rounds of one trial per verb class, RAW_TRIAL_NS of CPU each; a class's cost is the fastest
 * of its trials. On a shared VM one 20 ms measurement of random READs over 64 MiB came out
 * anywhere from 67 to 127 ns from one run to the next, in spells that last seconds (the
 * neighbours' memory traffic, the host's page management), and the ratio's denominator with
 * it, while the engine, whose hot records stay in the CPU's caches, barely noticed. Noise only
 * adds time, so the minimum is the host's undisturbed cost; taking turns gives each class its
 * chance outside a spell. The ratio errs against the engine, never for it.
 */
#define RAW_ROUNDS 9u
#define RAW_TRIAL_NS 4000000u

/* The same loop as `remora verbs --raw`: independent random accesses, one at a time. */
static void raw_chunk(unsigned op, uint8_t *base, uint64_t nslots, uint64_t stride, uint32_t len,
		      struct bu_rng *rng, uint8_t *local, uint64_t *sink)
{
	for (unsigned i = 0; i < RAW_CHUNK; i++) {
		uint8_t *p = base + bu_rng_below(rng, nslots) * stride;
		uint64_t *w = (uint64_t *)(void *)p, cur;

		switch (op) {
		case REMORA_OP_READ:
			memcpy(local, p, len);
			break;
		case REMORA_OP_WRITE:
			memcpy(p, local, len);
			break;
		case REMORA_OP_CAS:
			cur = 0;
			__atomic_compare_exchange_n(w, &cur, 0, false, __ATOMIC_SEQ_CST,
						    __ATOMIC_SEQ_CST);
			*sink += cur;
			break;
		case REMORA_OP_FAA:
			*sink += __atomic_fetch_add(w, 1, __ATOMIC_SEQ_CST);
			break;
		default: /* masked-CAS: a CAS loop */
			cur = __atomic_load_n(w, __ATOMIC_RELAXED);
			while (!__atomic_compare_exchange_n(w, &cur, cur ^ 1, false,
							    __ATOMIC_SEQ_CST, __ATOMIC_RELAXED))
				;
			*sink += cur;
			break;
		}
		__asm__ volatile("" : : "r"(local) : "memory"); /* keep the copies */
	}
}

/* One trial: ns per verb over at least RAW_TRIAL_NS of CPU; 0 when the class cannot run. */
static double raw_trial(unsigned op, uint8_t *base, uint64_t bytes, uint32_t len,
			struct bu_rng *rng)
{
	uint64_t stride = op <= REMORA_OP_WRITE ? ((uint64_t)len + 7) & ~UINT64_C(7) : 8;
	uint64_t nslots = bytes / (stride ? stride : 8), sink = 0, n = 0, t0, t;
	uint8_t local[4096];

	if (!nslots || len > sizeof(local))
		return 0;
	memset(local, 0xa5, sizeof(local));
	t0 = bu_thread_cpu_ns();
	do {
		raw_chunk(op, base, nslots, stride, len, rng, local, &sink);
		n += RAW_CHUNK;
		t = bu_thread_cpu_ns() - t0;
	} while (t < RAW_TRIAL_NS);
	__asm__ volatile("" : : "r"(sink));
	return (double)t / (double)n;
}

/* Raw ns per verb of each class used; the buffer is faulted in first. */
static void raw_costs(const double verbs[REMORA_OP__COUNT], const double bytes[REMORA_OP__COUNT],
		      uint64_t pool_bytes, struct cs_report *r)
{
	uint64_t len = pool_bytes < RAW_MAX_BYTES ? pool_bytes : RAW_MAX_BYTES;
	double trials[REMORA_OP__COUNT][RAW_ROUNDS];
	struct bu_rng rng[REMORA_OP__COUNT];
	uint8_t *base;

	if (len < 4096)
		len = 4096;
	base = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (base == MAP_FAILED)
		return;
	memset(base, 0, len);
	r->raw_bytes = len;
	for (unsigned op = 0; op < REMORA_OP__COUNT; op++)
		bu_rng_seed(&rng[op], 0x5eed + op);
	for (unsigned k = 0; k < RAW_ROUNDS; k++)
		for (unsigned op = 0; op < REMORA_OP__COUNT; op++) {
			uint32_t l = op <= REMORA_OP_WRITE ? (uint32_t)(bytes[op] + 0.5) : 8;

			trials[op][k] = verbs[op] > 0 ? raw_trial(op, base, len, l ? l : 8,
								  &rng[op]) : 0;
		}
	for (unsigned op = 0; op < REMORA_OP__COUNT; op++) {
		r->raw_ns[op] = trials[op][0];
		for (unsigned k = 1; k < RAW_ROUNDS; k++)
			if (trials[op][k] < r->raw_ns[op])
				r->raw_ns[op] = trials[op][k];
		r->raw_per_txn += verbs[op] * r->raw_ns[op];
	}
	munmap(base, len);
}

void cs_report(const struct cs_window *w, uint64_t committed,
	       const double verbs_per_txn[REMORA_OP__COUNT],
	       const double bytes_per_verb[REMORA_OP__COUNT], uint64_t pool_bytes,
	       struct cs_report *r)
{
	uint64_t total = 0;

	memset(r, 0, sizeof(*r));
	if (!w->cpu_ns || !committed)
		return;
	r->have = true;
	r->ns_per_txn = (double)w->cpu_ns / (double)committed;
	for (unsigned l = 0; l < PROF__COUNT; l++)
		total += w->samples[l];
	r->samples = total;
	for (unsigned l = 0; total && l < PROF__COUNT; l++)
		r->layer_ns[l] = r->ns_per_txn * (double)w->samples[l] / (double)total;
	raw_costs(verbs_per_txn, bytes_per_verb, pool_bytes, r);
	if (r->raw_per_txn > 0)
		r->ratio = r->ns_per_txn / r->raw_per_txn;
}

void cs_print(FILE *f, const struct cs_report *r)
{
	if (!r->have)
		return;
	fprintf(f, "  cpu/txn        %.0f ns of worker CPU per committed transaction; raw verbs %.0f "
		"ns (x%.2f)\n", r->ns_per_txn, r->raw_per_txn, r->ratio);
	if (!r->samples) {
		fprintf(f, "  cpu split      (not sampled on this host)\n");
		return;
	}
	fprintf(f, "  cpu split     ");
	for (unsigned l = 0; l < PROF__COUNT; l++)
		fprintf(f, " %s %.0f", prof_layer_name((enum prof_layer)l), r->layer_ns[l]);
	fprintf(f, " ns  (%" PRIu64 " samples)\n", r->samples);
}

void cs_json(struct bu_json *j, const struct cs_report *r)
{
	static const char *const op_names[REMORA_OP__COUNT] = { "read", "write", "cas", "faa",
								"mcas" };

	if (!r->have)
		return;
	bu_json_obj_begin(j, "cpu_per_txn");
	bu_json_f64(j, "ns", r->ns_per_txn);
	bu_json_obj_begin(j, "split_ns");
	for (unsigned l = 0; l < PROF__COUNT; l++)
		bu_json_f64(j, prof_layer_name((enum prof_layer)l), r->layer_ns[l]);
	bu_json_obj_end(j);
	bu_json_u64(j, "samples", r->samples);
	bu_json_obj_begin(j, "raw_ns_per_verb");
	for (unsigned op = 0; op < REMORA_OP__COUNT; op++)
		if (r->raw_ns[op] > 0)
			bu_json_f64(j, op_names[op], r->raw_ns[op]);
	bu_json_obj_end(j);
	bu_json_u64(j, "raw_bytes", r->raw_bytes);
	bu_json_f64(j, "raw_verbs_ns", r->raw_per_txn);
	bu_json_f64(j, "ratio", r->ratio);
	bu_json_obj_end(j);
}
