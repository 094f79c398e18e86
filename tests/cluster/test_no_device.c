/* SPDX-License-Identifier: MIT */
/*
 * The rdma backend on a machine where it finds no device: the first commands a user runs
 * (remora verbs, remora mn) exit 1 with one line that says what was looked for and how to use
 * shm instead, and leave nothing behind. Two situations, two fixes, two messages:
 *  - the kernel has no RDMA device at all (any host without an RNIC or soft-RoCE);
 *  - the kernel has devices that no userspace provider drives (ibverbs-providers missing). The
 *    test makes it wherever devices exist, such as the soft-RoCE guest of scripts/rdma-vm/: in
 *    a mount namespace of its own (root only), an empty directory hides libibverbs' provider
 *    configuration (PROVIDER_CONF), so that no provider loads in the commands it starts.
 * Skipped when the rdma backend is not built, and where devices exist but the test is not root.
 */
#include <dirent.h>
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "cutil.h"

TestSuite(no_device, .timeout = 120);

static char cluster[48];
static char empty_dir[64];

static void cleanup_dir(void)
{
	if (empty_dir[0])
		rmdir(empty_dir);
}

#define SYSFS_CLASS "/sys/class/infiniband" /* the kernel's RDMA devices */

/*
 * Calls f on the name of each RDMA device the kernel has (none when it has no RDMA support at
 * all) and returns how many there are; f may be NULL.
 */
static unsigned each_kernel_device(void (*f)(const char *name, const char *err), const char *err)
{
	DIR *d = opendir(SYSFS_CLASS);
	struct dirent *e;
	unsigned n = 0;

	if (!d)
		return 0;
	while ((e = readdir(d))) {
		if (e->d_name[0] == '.')
			continue;
		n++;
		if (f)
			f(e->d_name, err);
	}
	closedir(d);
	return n;
}

static void assert_named(const char *name, const char *err)
{
	cr_assert(strstr(err, name), "does not name the kernel's device %s: %s", name, err);
}

/* Where Debian's libibverbs reads which providers to load (compiled in, no variable). */
#define PROVIDER_CONF "/etc/libibverbs.d"

/*
 * Hides every provider from libibverbs in the children this test starts: this test process
 * (criterion forks one per test) moves to a mount namespace of its own, where an empty
 * directory covers PROVIDER_CONF. Nothing outside the process sees it.
 */
static void no_providers(void)
{
	if (geteuid() != 0)
		cr_skip_test("this kernel has RDMA devices; hiding their providers needs root");
	snprintf(empty_dir, sizeof(empty_dir), "/tmp/remora-noprov-XXXXXX");
	cr_assert_not_null(mkdtemp(empty_dir), "mkdtemp: %s", strerror(errno));
	cr_assert_eq(unshare(CLONE_NEWNS), 0, "unshare: %s", strerror(errno));
	cr_assert_eq(mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL), 0, "private /: %s",
		     strerror(errno));
	cr_assert_eq(mount(empty_dir, PROVIDER_CONF, NULL, MS_BIND, NULL), 0, "bind over %s: %s",
		     PROVIDER_CONF, strerror(errno));
}

/* Runs argv; asserts exit 1 and one line of stderr starting with prefix, returned in p. */
static void run_refused(struct cu_proc *p, const char *const *argv, const char *prefix)
{
	int rc = cu_run(p, argv, 60000);
	const char *nl;

	if (strstr(p->err, "unknown backend 'rdma'"))
		cr_skip_test("the rdma backend is not built: %s", p->err);
	cr_assert_eq(rc, 1, "%s %s: exit %d, want 1; stderr: %s", argv[0], argv[1], rc, p->err);
	nl = strchr(p->err, '\n');
	cr_assert(nl && nl[1] == '\0', "not one line on stderr: '%s'", p->err);
	cr_assert(strncmp(p->err, prefix, strlen(prefix)) == 0, "'%s' does not start with '%s'",
		  p->err, prefix);
	cr_assert(strstr(p->err, "use REMORA_BACKEND=shm"), "no way out to shm: %s", p->err);
}

/* What the message must say: the devices and their missing provider, or that there is none. */
static void assert_says_why(const char *err, unsigned ndev)
{
	if (ndev == 0) {
		cr_assert(strstr(err, "no RDMA device found"), "%s", err);
		cr_assert(strstr(err, SYSFS_CLASS), "does not say where it looked: %s", err);
		cr_assert(strstr(err, "rdma link add"), "no hint at soft-RoCE: %s", err);
		return;
	}
	cr_assert(strstr(err, "no RDMA device usable"), "%s", err);
	each_kernel_device(assert_named, err);
	cr_assert(strstr(err, "ibverbs-providers"), "does not say what to install: %s", err);
}

Test(no_device, verbs_says_what_was_looked_for_and_how_to_use_shm, .fini = cleanup_dir)
{
	const char *const argv[] = { "remora", "verbs", "--backend", "rdma", "--op", "read",
				     "--iters", "10", NULL };
	struct cu_proc p;
	unsigned ndev = each_kernel_device(NULL, NULL);

	cu_bin();
	if (ndev)
		no_providers();
	run_refused(&p, argv, "remora verbs: backend rdma: ");
	assert_says_why(p.err, ndev);
	cu_free(&p);
}

Test(no_device, memory_node_refuses_to_start_and_leaves_nothing, .fini = cleanup_dir)
{
	struct cu_proc p;
	unsigned ndev = each_kernel_device(NULL, NULL);
	const char *const argv[] = { "remora", "mn",	  "--id",	 "0",	    "--backend",
				     "rdma",   "--cluster", cu_name("nodev", cluster, sizeof(cluster)),
				     NULL };

	cu_bin();
	if (ndev)
		no_providers();
	run_refused(&p, argv, "remora mn: mn 0: backend rdma: ");
	assert_says_why(p.err, ndev);
	cr_assert_eq(cu_leftovers(cluster), 0, "files of cluster %s left in /dev/shm", cluster);
	cu_free(&p);
}
