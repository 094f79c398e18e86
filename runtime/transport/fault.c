/* SPDX-License-Identifier: MIT */
/*
 * Fault injection: $REMORA_DIE_AT_VERB=N, $REMORA_DIE_AT=NAME[:K] and
 * $REMORA_LOSE_COMPLETION=N (the Nth completion the process's channels hand out is held back,
 * as if the device never produced it, until the verb deadline breaks the channel; the
 * deadline's tests and a command's one-line error on a lost completion). All are parsed at every
 * remora_transport_open() (an invalid value fails the open with a one-line reason) and, for
 * fault points, at the first remora_fault_point() of a process that opened no transport.
 * The verb counter is process-wide and restarts at 0 in a forked child.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config/env.h"
#include "core.h"
#include "direct.h"

uint64_t rt_die_at_verb;          /* 0: off */
static uint64_t verbs_posted;     /* verbs counted while rt_die_at_verb is on */
uint64_t rt_lose_completion;      /* 0: off */
static uint64_t completions_seen; /* counted while rt_lose_completion is on */

static char die_at_name[64];      /* "": off */
static uint64_t die_at_k;
static uint64_t die_at_hits;
static int fault_parsed;
int rt_fault_points_live = 1;     /* direct.h: !fault_parsed || die_at_name[0] */
static pthread_mutex_t fault_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;

static void reset_in_child(void)
{
	__atomic_store_n(&verbs_posted, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&completions_seen, 0, __ATOMIC_RELAXED);
	/* The child has one thread; the lock may have been held by another parent thread. */
	pthread_mutex_init(&fault_lock, NULL);
	die_at_hits = 0;
}

static void register_atfork(void)
{
	pthread_atfork(NULL, NULL, reset_in_child);
}

/* A positive decimal integer that fits in 63 bits; everything else is refused. */
static int parse_count(const char *s, uint64_t *out)
{
	char *end;
	unsigned long long v;

	if (!s[0] || s[0] == '-' || s[0] == '+')
		return -1;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno || *end || v == 0 || v > (unsigned long long)INT64_MAX)
		return -1;
	*out = v;
	return 0;
}

static int parse_die_at(const char *v, char *name, uint64_t *k)
{
	const char *colon = strchr(v, ':');
	size_t len = colon ? (size_t)(colon - v) : strlen(v);

	if (len == 0 || len >= sizeof(die_at_name))
		return -1;
	memcpy(name, v, len);
	name[len] = '\0';
	*k = 1;
	if (colon && parse_count(colon + 1, k))
		return -1;
	return 0;
}

int rt_fault_init(void)
{
	const char *verb = cfg_knob(CFG_KNOB_DIE_AT_VERB);
	const char *at = cfg_knob(CFG_KNOB_DIE_AT);
	const char *lose = cfg_knob(CFG_KNOB_LOSE_COMPLETION);
	uint64_t n = 0, k = 1, l = 0;
	char name[sizeof(die_at_name)] = "";

	pthread_once(&atfork_once, register_atfork);
	if (verb && verb[0] && parse_count(verb, &n))
		return rt_last_error(-REMORA_ECONFIG,
				     "REMORA_DIE_AT_VERB='%s': expected a positive integer", verb);
	if (lose && parse_count(lose, &l))
		return rt_last_error(-REMORA_ECONFIG,
				     "REMORA_LOSE_COMPLETION='%s': expected a positive integer", lose);
	if (at && at[0] && parse_die_at(at, name, &k))
		return rt_last_error(-REMORA_ECONFIG,
				     "REMORA_DIE_AT='%s': expected NAME or NAME:K (K a positive "
				     "integer, NAME under 64 characters)", at);
	pthread_mutex_lock(&fault_lock);
	__atomic_store_n(&rt_die_at_verb, n, __ATOMIC_RELAXED);
	__atomic_store_n(&rt_lose_completion, l, __ATOMIC_RELAXED);
	rt_exec_slow_set(RT_SLOW_DIE_AT_VERB, n != 0);
	rt_exec_slow_set(RT_SLOW_LOSE_COMPLETION, l != 0);
	memcpy(die_at_name, name, sizeof(name));
	die_at_k = k;
	__atomic_store_n(&fault_parsed, 1, __ATOMIC_RELEASE);
	__atomic_store_n(&rt_fault_points_live, name[0] != '\0', __ATOMIC_RELAXED);
	pthread_mutex_unlock(&fault_lock);
	return 0;
}

uint64_t rt_fault_verbs(unsigned n)
{
	return __atomic_fetch_add(&verbs_posted, n, __ATOMIC_RELAXED);
}

bool rt_fault_lose(void)
{
	return __atomic_add_fetch(&completions_seen, 1, __ATOMIC_RELAXED) ==
	       __atomic_load_n(&rt_lose_completion, __ATOMIC_RELAXED);
}

void rt_fault_die(void)
{
	kill(getpid(), SIGKILL);
	for (;;)
		pause();
}

REMORA_API void remora_fault_point(const char *name)
{
	bool die;

	if (!__atomic_load_n(&fault_parsed, __ATOMIC_ACQUIRE))
		rt_fault_init(); /* an invalid value here just leaves fault points off */
	if (!__atomic_load_n(&rt_fault_points_live, __ATOMIC_RELAXED))
		return;
	pthread_mutex_lock(&fault_lock);
	die = strcmp(name, die_at_name) == 0 && ++die_at_hits == die_at_k;
	pthread_mutex_unlock(&fault_lock);
	if (die)
		rt_fault_die();
}
