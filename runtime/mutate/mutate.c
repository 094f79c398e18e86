/* SPDX-License-Identifier: MIT */
/* The one table of negative-control mutations (mutate.h). */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <remora/error.h>

#include "config/env.h"
#include "mutate/mutate.h"

static const struct mut_def defs[MUT__COUNT] = {
#define MUT_DEF_(id, name, layer, what) [MUT_##id] = { name, MUT_##layer, what },
	MUT_TABLE(MUT_DEF_)
#undef MUT_DEF_
};

static const char *const layer_names[] = {
	[MUT_TXN] = "txn", [MUT_CLUSTER] = "cluster", [MUT_CLI] = "cli",
	[MUT_TRANSPORT] = "transport", [MUT_RPC] = "rpc", [MUT_PMEM] = "pmem",
	[MUT_LOCK] = "lock", [MUT_PROTO] = "proto",
};

const struct mut_def *mut_def(enum mut_id id)
{
	return (unsigned)id < MUT__COUNT ? &defs[id] : NULL;
}

const char *mut_layer_name(enum mut_layer layer)
{
	size_t n = sizeof(layer_names) / sizeof(layer_names[0]);

	return (unsigned)layer < n ? layer_names[layer] : "?";
}

bool mut_layer_from_env(enum mut_layer layer)
{
	return layer == MUT_TXN || layer == MUT_PROTO || layer == MUT_CLUSTER || layer == MUT_CLI;
}

/* The id named by the first len bytes of s, or -1. */
static int find(const char *s, size_t len)
{
	for (unsigned i = 0; i < MUT__COUNT; i++)
		if (strlen(defs[i].name) == len && strncmp(defs[i].name, s, len) == 0)
			return (int)i;
	return -1;
}

int mut_set(uint64_t *mask, enum mut_layer layer, const char *name)
{
	int id;

	if (!mask || !name)
		return -EINVAL;
	if (strcmp(name, "none") == 0) {
		*mask = 0;
		return 0;
	}
	id = find(name, strlen(name));
	if (id < 0 || defs[id].layer != layer)
		return -EINVAL;
	*mask |= UINT64_C(1) << mut_bit((enum mut_id)id);
	return 0;
}

/* One token of a comma list into *mask; -REMORA_ECONFIG with a line in err. */
static int parse_one(const char *p, size_t len, enum mut_layer layer, uint64_t *mask, char *err,
		     size_t errlen)
{
	int id;

	if (len == 4 && strncmp(p, "none", 4) == 0) {
		*mask = 0;
		return 0;
	}
	id = find(p, len);
	if (id < 0) {
		snprintf(err, errlen,
			 "REMORA_MUTATE: unknown mutation '%.*s' (`remora info --mutations` lists them)",
			 (int)(len > 40 ? 40 : len), p);
		return -REMORA_ECONFIG;
	}
	if (!mut_layer_from_env(defs[id].layer)) {
		snprintf(err, errlen,
			 "REMORA_MUTATE: '%s' is a %s switch that only tests set, through its API",
			 defs[id].name, mut_layer_name(defs[id].layer));
		return -REMORA_ECONFIG;
	}
	if (defs[id].layer == layer)
		*mask |= UINT64_C(1) << mut_bit((enum mut_id)id);
	return 0;
}

int mut_parse(const char *list, enum mut_layer layer, uint64_t *mask, char *err, size_t errlen)
{
	const char *p = list;

	*mask = 0;
	while (p && *p) {
		size_t len = strcspn(p, ",");
		int rc = len ? parse_one(p, len, layer, mask, err, errlen) : 0;

		if (rc)
			return rc;
		p += len;
		if (*p == ',')
			p++;
	}
	return 0;
}

int mut_from_env(enum mut_layer layer, uint64_t *mask, char *err, size_t errlen)
{
	return mut_parse(cfg_knob(CFG_KNOB_MUTATE), layer, mask, err, errlen);
}

void mut_names(enum mut_layer layer, uint64_t mask, char *buf, size_t size)
{
	size_t used = 0;

	if (size)
		buf[0] = '\0';
	for (unsigned i = 0; i < MUT__COUNT && used < size; i++) {
		if (defs[i].layer != layer || !mut_on(mask, (enum mut_id)i))
			continue;
		int n = snprintf(buf + used, size - used, "%s%s", used ? "," : "", defs[i].name);

		if (n < 0)
			break;
		used += (size_t)n;
	}
}
