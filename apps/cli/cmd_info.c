/* SPDX-License-Identifier: MIT */
/*
 * `remora info`: what this binary can do and how it is configured: backends and their
 * capabilities, cost-model profiles, jobs, and every parameter with its effective value and
 * where that value came from.
 */
#include <stdio.h>
#include <string.h>

#include <remora/params.h>
#include <remora/transport.h>

#include "cli.h"
#include "cmd.h"
#include "job.h"
#include "mutate/mutate.h"
#include "remora_config.h"
#include "transport/cost.h" /* the profile table */
#include "txn/protocol.h"     /* the protocol registry */

struct info_opts {
	bool only_params, markdown, mutations;
};

static const struct cli_opt info_opt_table[] = {
	CLI_OPT_FLAG("--params", struct info_opts, only_params,
		     "only the parameters, with type, allowed values and help"),
	CLI_OPT_FLAG("--params-md", struct info_opts, markdown,
		     "the parameter table of docs/config.md (markdown)"),
	CLI_OPT_FLAG("--mutations", struct info_opts, mutations,
		     "the negative-control switches (REMORA_MUTATE; tests only)"),
	{ 0 },
};

static const struct cli_cmd info_cmd = {
	.name = "info",
	.usage = "usage: remora info [--config FILE] [--<param> VALUE...]\n"
		 "                   [--params|--params-md|--mutations]\n"
		 "Prints the built-in backends with their capabilities, the protocols with what "
		 "each\n"
		 "needs, the cost-model profiles, the jobs, and every parameter with its effective\n"
		 "value and its origin\n"
		 "(default, FILE:LINE, env REMORA_<NAME> or flag --<name>).\n",
	.opts = info_opt_table,
	.params = true,
};

static const char *gran_name(uint32_t g)
{
	switch (g) {
	case REMORA_PERSIST_BYTE:
		return "byte";
	case REMORA_PERSIST_CACHE_LINE:
		return "cache line";
	case REMORA_PERSIST_PAGE:
		return "page";
	default:
		return "none";
	}
}

static void print_backends(void)
{
	static const struct {
		uint32_t bit;
		const char *name;
	} flags[] = {
		{ REMORA_CAP_COHERENT_ATOMICS, "coherent-atomics" },
		{ REMORA_CAP_MSG, "messages" },
		{ REMORA_CAP_FENCING, "fencing" },
		{ REMORA_CAP_PERSIST, "persist" },
		{ REMORA_CAP_NATIVE_MCAS, "native-mcas" },
		{ REMORA_CAP_DEVICE_BOUNDS, "device-bounds" },
	};
	const char *const *names = remora_backend_names();

	printf("backends:\n");
	for (unsigned b = 0; names[b]; b++) {
		struct remora_caps caps = { .size = sizeof(caps) };
		int rc = remora_backend_caps(names[b], &caps);

		if (rc) {
			printf("  %-6s (capabilities unavailable: %s)\n", names[b],
			       remora_strerror(rc));
			continue;
		}
		printf("  %-6s verbs:", names[b]);
		for (unsigned op = 0; op < REMORA_OP__COUNT; op++) {
			if (!(caps.ops & (1u << op)))
				continue;
			printf(" %s%s", remora_op_name((enum remora_op)op),
			       caps.emulated_ops & (1u << op) ? " (emulated)" : "");
		}
		printf("\n  %-6s flags:", "");
		for (unsigned f = 0; f < sizeof(flags) / sizeof(flags[0]); f++)
			if (caps.flags & flags[f].bit)
				printf(" %s", flags[f].name);
		printf("\n  %-6s persistence: %s; max batch %u, inline %u B, message %u B, "
		       "outstanding %u\n",
		       "", gran_name(caps.persist_gran), caps.max_batch, caps.max_inline,
		       caps.max_msg, caps.max_outstanding);
	}
}

/* Each built protocol, its record codec, what it needs, and the backends that offer that. */
static void print_protocols(void)
{
	const char *const *names = remora_backend_names();

	printf("protocols:\n");
	for (unsigned i = 0; txn_proto_registry[i]; i++) {
		const struct txn_proto_ops *p = txn_proto_registry[i];
		const struct codec_ops *codec = codec_get(p->codec);
		char needs[64], err[160];
		unsigned runs = 0;

		txn_proto_flags_str(p->flags, needs, sizeof(needs));
		printf("  %-8s codec %s, needs: %s; runs on:", p->name,
		       codec ? codec->name : "?", needs);
		for (unsigned b = 0; names[b]; b++) {
			struct remora_caps caps = { .size = sizeof(caps) };

			if (remora_backend_caps(names[b], &caps) == 0 &&
			    txn_proto_check(p, &caps, true, err, sizeof(err)) == 0)
				printf("%s %s", runs++ ? "," : "", names[b]);
		}
		printf("%s\n", runs ? "" : " none");
	}
}

static void print_profiles(void)
{
	unsigned n = 0;
	const struct rt_cost_profile *p = rt_cost_profiles(&n);

	printf("cost-model profiles (parameter profile):\n");
	for (unsigned i = 0; i < n; i++)
		printf("  %-6s %s\n", p[i].name, p[i].summary ? p[i].summary : "");
}

static void print_params(const struct remora_params *p, bool details)
{
	printf("parameters (value, origin):\n");
	for (unsigned i = 0; i < REMORA_P__COUNT; i++) {
		const struct remora_param_def *d = remora_param_def((enum remora_param_id)i);
		const char *v = remora_params_str(p, (enum remora_param_id)i);
		char shown[96];

		snprintf(shown, sizeof(shown), "%s", *v ? v : "\"\"");
		printf("  %-13s %-22s %s\n", d->name, shown,
		       remora_params_origin(p, (enum remora_param_id)i));
		if (details)
			printf("  %-13s %s%s%s%s; %s\n", "", remora_param_type_name(d->type),
			       d->allowed ? " " : "", d->allowed ? d->allowed : "",
			       d->type == REMORA_PT_BOOL ? " true|false" : "", d->help);
	}
	if (remora_params_have_mn_addrs(p)) {
		printf("memory nodes:\n");
		for (unsigned i = 0; i < remora_params_mn_count(p); i++) {
			struct remora_node_addr a;

			remora_params_mn_addr(p, i, &a);
			printf("  mn.%-3u %s:%u\n", i, a.host, a.port);
		}
	}
}

/* The one mutation table (runtime/mutate): name, layer, how it is set, what it breaks. */
static void print_mutations(void)
{
	printf("mutations (negative controls for tests; REMORA_MUTATE=a,b sets the env ones):\n");
	for (unsigned i = 0; i < MUT__COUNT; i++) {
		const struct mut_def *d = mut_def((enum mut_id)i);
		printf("  %-24s %-9s %-4s %s\n", d->name, mut_layer_name(d->layer),
		       mut_layer_from_env(d->layer) ? "env" : "api", d->what);
	}
}

int cmd_info(int argc, char **argv)
{
	struct info_opts o = { 0 };
	struct cli_params cp;
	int i = 1, rc;

	rc = cli_start(&info_cmd, &o, &cp, argc, argv, &i);
	if (rc != CLI_GO)
		return rc;
	if (o.markdown || o.mutations) {
		if (o.markdown)
			remora_params_doc_table(stdout);
		else
			print_mutations();
		cli_params_fini(&cp);
		return 0;
	}
	if (cli_params_finish(&cp)) {
		cli_params_fini(&cp);
		return 2;
	}
	if (!o.only_params) {
		printf("remora %s\n", REMORA_VERSION);
		print_backends();
		print_protocols();
		print_profiles();
		printf("jobs (remora run, remora cn):\n");
		job_list(stdout, "  ");
	}
	print_params(cp.p, o.only_params);
	cli_params_fini(&cp);
	return 0;
}
