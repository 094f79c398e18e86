/* SPDX-License-Identifier: MIT */
/*
 * The process environment, read in one place. Library code asks here instead of calling
 * getenv(): parameters (REMORA_<PARAM>, the table in <remora/params.h>) for callers that open a
 * transport or db without a parameter set, and knobs, the REMORA_ variables that are not
 * parameters (test and tool switches, listed with their meaning in env.c).
 */
#ifndef REMORA_CONFIG_ENV_H
#define REMORA_CONFIG_ENV_H

#include <remora/params.h>

enum cfg_knob {
	CFG_KNOB_BIN,         /* the remora binary that tests run */
	CFG_KNOB_CONFIG,      /* the config file remora's commands load */
	CFG_KNOB_RESULT_FD,   /* job processes: where results go */
	CFG_KNOB_GO_FD,       /* job processes: the start signal */
	CFG_KNOB_DIE_AT,      /* fault injection: die at a named point */
	CFG_KNOB_DIE_AT_VERB, /* fault injection: die at the Nth verb */
	CFG_KNOB_MUTATE,      /* negative-control mutations (runtime/mutate) */
	CFG_KNOB_ADDR_CACHE,  /* address cache entries per db (0 = off) */
	CFG_KNOB_OOCC,        /* oocc's lease settings (docs/oocc.md) */
	CFG_KNOB_MOTOR_TS,    /* motor: "clock" for the clock timestamps (docs/motor.md) */
	CFG_KNOB_CVT_CELLS,   /* motor: version cells per CVT of tables formatted now (2..8) */
	CFG_KNOB_CVT_DELTA,   /* motor: "1": older versions as deltas (tables formatted now) */
	CFG_KNOB_LOSE_COMPLETION, /* fault injection: hold back the Nth completion */
	CFG_KNOB_LOTUS_SLOW,  /* fault injection: microseconds of busy time per lotus txn */
	CFG_KNOB__COUNT
};

/* The knob's value, or NULL when unset or empty. */
const char *cfg_knob(enum cfg_knob k);

/* The knob's variable name ("REMORA_MUTATE"), for error messages. */
const char *cfg_knob_var(enum cfg_knob k);

/* True when "REMORA_<suffix>" (suffix of length len) names a knob, not a parameter. */
bool cfg_knob_is(const char *suffix, size_t len);

/* The environment variable of parameter id, "REMORA_<NAME>", into buf (len >= 64 fits every
 * name); false for an unknown id. */
bool cfg_param_env_var(enum remora_param_id id, char *buf, size_t len);
/* $REMORA_<NAME> of parameter id when set and not empty, else the table's default. */
const char *cfg_param_env(enum remora_param_id id);
/* The same with fallback (when not NULL) before the default: the environment overrides it. */
const char *cfg_param_env_or(enum remora_param_id id, const char *fallback);

#endif
