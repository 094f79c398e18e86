/* SPDX-License-Identifier: MIT */
/* Sampled CPU time by layer; see prof.h. */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/syscall.h>

#include "prof.h"

_Thread_local uint8_t prof_cur __attribute__((tls_model("initial-exec")));

static _Thread_local uint64_t samples[PROF__COUNT] __attribute__((tls_model("initial-exec")));
static _Thread_local uint64_t period __attribute__((tls_model("initial-exec")));
static _Thread_local timer_t timer __attribute__((tls_model("initial-exec")));
static _Thread_local int timer_on __attribute__((tls_model("initial-exec")));

static pthread_once_t handler_once = PTHREAD_ONCE_INIT;
static int handler_rc;

/* Signal context: touches only this thread's counters. */
static void on_sample(int sig, siginfo_t *si, void *uc)
{
	unsigned layer = __atomic_load_n(&prof_cur, __ATOMIC_RELAXED);

	(void)sig;
	(void)uc;
	if (si->si_code != SI_TIMER || !timer_on)
		return;
	/* An expiry the kernel merged (overrun) is CPU time all the same. */
	samples[layer < PROF__COUNT ? layer : PROF_WORKLOAD] += 1 + (uint64_t)si->si_overrun;
}

static void install_handler(void)
{
	struct sigaction sa;

	memset(&sa, 0, sizeof(sa));
	sa.sa_sigaction = on_sample;
	sa.sa_flags = SA_SIGINFO | SA_RESTART;
	sigemptyset(&sa.sa_mask);
	handler_rc = sigaction(SIGPROF, &sa, NULL) < 0 ? -errno : 0;
}

int prof_thread_start(uint64_t period_ns)
{
	struct sigevent sev;
	struct itimerspec its;

	if (period_ns == 0)
		return -EINVAL;
	pthread_once(&handler_once, install_handler);
	if (handler_rc)
		return handler_rc;
	if (timer_on)
		prof_thread_stop();
	memset(samples, 0, sizeof(samples));
	period = period_ns;
	memset(&sev, 0, sizeof(sev));
	sev.sigev_notify = SIGEV_THREAD_ID;
	sev.sigev_signo = SIGPROF;
	sev._sigev_un._tid = (pid_t)syscall(SYS_gettid);
	if (timer_create(CLOCK_THREAD_CPUTIME_ID, &sev, &timer) < 0)
		return -errno;
	its.it_interval.tv_sec = (time_t)(period_ns / 1000000000u);
	its.it_interval.tv_nsec = (long)(period_ns % 1000000000u);
	its.it_value = its.it_interval;
	timer_on = 1;
	if (timer_settime(timer, 0, &its, NULL) < 0) {
		int rc = -errno;

		timer_on = 0;
		timer_delete(timer);
		return rc;
	}
	return 0;
}

void prof_thread_read(struct prof_counts *out)
{
	for (unsigned l = 0; l < PROF__COUNT; l++)
		out->samples[l] = __atomic_load_n(&samples[l], __ATOMIC_RELAXED);
	out->period_ns = period;
}

void prof_thread_stop(void)
{
	if (!timer_on)
		return;
	timer_on = 0;
	timer_delete(timer);
}

void prof_counts_diff(const struct prof_counts *a, const struct prof_counts *b,
		      struct prof_counts *dst)
{
	for (unsigned l = 0; l < PROF__COUNT; l++)
		dst->samples[l] = a->samples[l] - b->samples[l];
	dst->period_ns = a->period_ns ? a->period_ns : b->period_ns;
}

const char *prof_layer_name(enum prof_layer layer)
{
	static const char *const names[PROF__COUNT] = {
		[PROF_WORKLOAD] = "workload",   [PROF_INDEX] = "index",
		[PROF_PROTOCOL] = "protocol",   [PROF_TRANSPORT] = "transport",
		[PROF_SCHED] = "scheduler",
	};

	return (unsigned)layer < PROF__COUNT ? names[layer] : "?";
}
