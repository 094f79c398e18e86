/* SPDX-License-Identifier: MIT */
/* The process environment, read in one place (env.h). */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/env.h"

static const char *const knob_var[CFG_KNOB__COUNT] = {
	[CFG_KNOB_BIN] = "REMORA_BIN",
	[CFG_KNOB_CONFIG] = "REMORA_CONFIG",
	[CFG_KNOB_RESULT_FD] = "REMORA_RESULT_FD",
	[CFG_KNOB_GO_FD] = "REMORA_GO_FD",
	[CFG_KNOB_DIE_AT] = "REMORA_DIE_AT",
	[CFG_KNOB_DIE_AT_VERB] = "REMORA_DIE_AT_VERB",
	[CFG_KNOB_MUTATE] = "REMORA_MUTATE",
	[CFG_KNOB_ADDR_CACHE] = "REMORA_ADDR_CACHE",
	[CFG_KNOB_OOCC] = "REMORA_OOCC",
	[CFG_KNOB_MOTOR_TS] = "REMORA_MOTOR_TS",
	[CFG_KNOB_CVT_CELLS] = "REMORA_CVT_CELLS",
	[CFG_KNOB_CVT_DELTA] = "REMORA_CVT_DELTA",
	[CFG_KNOB_LOSE_COMPLETION] = "REMORA_LOSE_COMPLETION",
	[CFG_KNOB_LOTUS_SLOW] = "REMORA_LOTUS_SLOW",
};

const char *cfg_knob(enum cfg_knob k)
{
	const char *v = (unsigned)k < CFG_KNOB__COUNT ? getenv(knob_var[k]) : NULL;

	return v && v[0] ? v : NULL;
}

const char *cfg_knob_var(enum cfg_knob k)
{
	return (unsigned)k < CFG_KNOB__COUNT ? knob_var[k] : "";
}

bool cfg_knob_is(const char *suffix, size_t len)
{
	for (unsigned k = 0; k < CFG_KNOB__COUNT; k++)
		if (strlen(knob_var[k] + 7) == len && strncmp(knob_var[k] + 7, suffix, len) == 0)
			return true;
	return false;
}

const char *cfg_param_env(enum remora_param_id id)
{
	return cfg_param_env_or(id, NULL);
}

bool cfg_param_env_var(enum remora_param_id id, char *buf, size_t len)
{
	const struct remora_param_def *d = remora_param_def(id);
	size_t i;

	if (!d || len < 8)
		return false;
	memcpy(buf, "REMORA_", 7);
	for (i = 0; d->name[i] && 7 + i + 1 < len; i++)
		buf[7 + i] = (char)toupper((unsigned char)d->name[i]);
	buf[7 + i] = '\0';
	return true;
}

const char *cfg_param_env_or(enum remora_param_id id, const char *fallback)
{
	const struct remora_param_def *d = remora_param_def(id);
	char var[96];
	const char *v;

	if (!cfg_param_env_var(id, var, sizeof(var)))
		return NULL;
	v = getenv(var);
	return v && v[0] ? v : fallback ? fallback : d->def;
}
