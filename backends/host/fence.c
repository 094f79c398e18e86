/* SPDX-License-Identifier: MIT */
/* Permission-epoch fencing for backends whose pools are shared memory; protocol in backend.h. */
#include <errno.h>
#include <linux/membarrier.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "transport/core.h"
#include "transport/mutate.h"
#include "fence.h"

/* A zombie still answers kill(pid, 0), so read its state too; a dead CN never clears active. */
static bool pid_alive(pid_t pid)
{
	char path[64], buf[256], *p;
	FILE *f;
	size_t n;

	if (pid <= 0)
		return false;
	if (kill(pid, 0) < 0 && errno == ESRCH)
		return false;
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	f = fopen(path, "re");
	if (!f)
		return true; /* no procfs: trust kill() */
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = '\0';
	p = strrchr(buf, ')'); /* the command name may contain spaces and parentheses */
	return !(p && p[1] == ' ' && (p[2] == 'Z' || p[2] == 'X'));
}

static int membarrier(int cmd)
{
	return (int)syscall(__NR_membarrier, cmd, 0, 0);
}

static bool asym_enabled;
static bool asym_forbidden; /* tests: rt_transport_fence_mode(0) */
static pthread_once_t asym_once = PTHREAD_ONCE_INIT;

/* Registers this process once, so that fencers' GLOBAL_EXPEDITED barriers reach its threads. */
static void asym_register(void)
{
	int q = membarrier(MEMBARRIER_CMD_QUERY);

	asym_enabled = q > 0 && (q & MEMBARRIER_CMD_GLOBAL_EXPEDITED) &&
		       (q & MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED) &&
		       membarrier(MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED) == 0;
}

void rt_transport_fence_mode(int asym)
{
	__atomic_store_n(&asym_forbidden, !asym, __ATOMIC_RELAXED);
}

int rt_host_fence_slot_fence(struct rt_host_fence_slot *s)
{
	uint64_t e = __atomic_load_n(&s->epoch, __ATOMIC_SEQ_CST);
	unsigned spins = 0;
	int rc = 0;

	while (!__atomic_compare_exchange_n(&s->epoch, &e, (e + 1) | RT_HOST_FENCE_FENCED, false,
					    __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST))
		;
	if (__atomic_load_n(&s->asym, __ATOMIC_SEQ_CST) &&
	    membarrier(MEMBARRIER_CMD_GLOBAL_EXPEDITED) < 0 &&
	    membarrier(MEMBARRIER_CMD_GLOBAL) < 0)
		rc = -ENOSYS;
	while (rt_host_fence_slot_busy(s)) {
		if (++spins % 1024 == 0) {
			if (!pid_alive((pid_t)__atomic_load_n(&s->pid, __ATOMIC_RELAXED)))
				break;
			sched_yield();
		}
	}
	return rc;
}

void rt_host_fence_slot_reset(struct rt_host_fence_slot *s, bool same_boot)
{
	if (same_boot && __atomic_load_n(&s->pid, __ATOMIC_SEQ_CST))
		rt_host_fence_slot_fence(s); /* -ENOSYS: no membarrier; the epoch moves all the same */
	/* after a reboot, or left set by a process that died in a run */
	if (!same_boot || rt_host_fence_slot_busy(s)) {
		__atomic_store_n(&s->shared, 0, __ATOMIC_SEQ_CST);
		for (unsigned l = 0; l < RT_HOST_FENCE_LANES; l++)
			__atomic_store_n(&s->lane[l].active, 0, __ATOMIC_SEQ_CST);
	}
	__atomic_store_n(&s->pid, 0, __ATOMIC_SEQ_CST);
	__atomic_store_n(&s->epoch,
			 (__atomic_load_n(&s->epoch, __ATOMIC_SEQ_CST) & ~RT_HOST_FENCE_FENCED) + 1,
			 __ATOMIC_SEQ_CST);
}

int rt_host_fence_slot_join(struct rt_host_fence_slot *s, uint64_t *mine, bool *asym)
{
	uint64_t e = __atomic_load_n(&s->epoch, __ATOMIC_SEQ_CST);

	if (e & RT_HOST_FENCE_FENCED)
		return -REMORA_EFENCED;
	pthread_once(&asym_once, asym_register);
	*asym = asym_enabled && !__atomic_load_n(&asym_forbidden, __ATOMIC_RELAXED);
	__atomic_store_n(&s->pid, (uint64_t)getpid(), __ATOMIC_RELAXED);
	/* Once any attach used membarrier, the slot keeps saying so: fencers must call it. */
	if (*asym)
		__atomic_store_n(&s->asym, 1, __ATOMIC_SEQ_CST);
	*mine = e;
	return 0;
}
