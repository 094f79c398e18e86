/* SPDX-License-Identifier: MIT */
/*
 * Power-failure simulation for the crash test, preloaded (LD_PRELOAD) into every memory- and
 * compute-node process of a pmem cluster whose pools are regular files.
 *
 * A killed process loses nothing of a MAP_SHARED file mapping, so on regular files a lost
 * persist point is invisible. This library keeps, next to each pool file P, a "medium" file
 * P.medium: the bytes that reached persistence. libpmem2 persists a pool mapped at page
 * granularity with msync() over the page range; every msync of a pool mapping here copies
 * that range, as it is in memory at that moment, into P.medium (that is exactly what msync
 * guarantees to have written back). After every process was killed, the test copies
 * P.medium over P: whatever was written but never persisted is gone, as after a power
 * failure that drops every dirty page. (A real power failure may also keep some of those
 * writes; dropping all of them is one allowed outcome, and the harshest for a missing
 * persist point.)
 *
 * Only pools whose P.medium exists are mirrored (the test creates it from a cleanly closed
 * pool); everything else passes through. Nothing here runs on the test's data path other
 * than in the simulated cluster.
 */
#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#define MEDIUM_MAPS 32

struct medium_map {
	uintptr_t start, end;
	uint64_t file_off;
	int fd; /* the medium file, open for writing */
};

static struct medium_map maps[MEDIUM_MAPS];
static unsigned nmaps;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

static bool is_pool(const char *path)
{
	const char *base = strrchr(path, '/');

	base = base ? base + 1 : path;
	return !strncmp(base, "remora-", 7) && strstr(base, "-mn") && !strchr(base, '.');
}

static void forget_all(void)
{
	for (unsigned i = 0; i < nmaps; i++)
		close(maps[i].fd);
	nmaps = 0;
}

/* Re-reads /proc/self/maps: every mapping of a pool file that has a medium. */
static void refresh(void)
{
	FILE *f = fopen("/proc/self/maps", "re");
	char line[1024];

	forget_all();
	if (!f)
		return;
	while (nmaps < MEDIUM_MAPS && fgets(line, sizeof(line), f)) {
		unsigned long start, end, off, inode;
		char perms[8], dev[16], path[900], medium[960];
		int fd;

		path[0] = '\0';
		if (sscanf(line, "%lx-%lx %7s %lx %15s %lu %899s", &start, &end, perms, &off, dev,
			   &inode, path) < 7 || !is_pool(path) || perms[3] != 's')
			continue;
		snprintf(medium, sizeof(medium), "%s.medium", path);
		fd = open(medium, O_WRONLY | O_CLOEXEC);
		if (fd < 0)
			continue;
		maps[nmaps++] = (struct medium_map){ .start = start, .end = end, .file_off = off,
						     .fd = fd };
	}
	fclose(f);
}

static const struct medium_map *find(uintptr_t a)
{
	for (unsigned i = 0; i < nmaps; i++)
		if (a >= maps[i].start && a < maps[i].end)
			return &maps[i];
	return NULL;
}

/* Copies [a, a+len) of a pool mapping into its medium. */
static void mirror(uintptr_t a, size_t len)
{
	const struct medium_map *m;

	pthread_mutex_lock(&lock);
	m = find(a);
	if (!m) {
		refresh();
		m = find(a);
	}
	while (m && len) {
		size_t k = a + len <= m->end ? len : m->end - a;

		if (pwrite(m->fd, (const void *)a, k, (off_t)(m->file_off + (a - m->start))) !=
		    (ssize_t)k)
			fprintf(stderr, "medium: short write to a medium file\n");
		a += k;
		len -= k;
		m = len ? find(a) : NULL;
	}
	pthread_mutex_unlock(&lock);
}

static int (*real_msync)(void *, size_t, int);
static int (*real_munmap)(void *, size_t);

/* Resolved before main(): munmap may run inside dlsym's own allocations otherwise. */
__attribute__((constructor)) static void medium_init(void)
{
	real_msync = (int (*)(void *, size_t, int))dlsym(RTLD_NEXT, "msync");
	real_munmap = (int (*)(void *, size_t))dlsym(RTLD_NEXT, "munmap");
}

__attribute__((visibility("default"))) int msync(void *addr, size_t len, int flags)
{
	int rc = real_msync ? real_msync(addr, len, flags) :
			      (int)syscall(SYS_msync, addr, len, flags);

	if (rc == 0)
		mirror((uintptr_t)addr, len);
	return rc;
}

__attribute__((visibility("default"))) int munmap(void *addr, size_t len)
{
	if (!real_munmap)
		return (int)syscall(SYS_munmap, addr, len);
	pthread_mutex_lock(&lock);
	forget_all(); /* the address range may be reused for another file */
	pthread_mutex_unlock(&lock);
	return real_munmap(addr, len);
}
