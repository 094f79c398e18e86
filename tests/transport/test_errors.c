/* SPDX-License-Identifier: MIT */
/*
 * Conformance: error reporting. remora_strerror() names every code; an unknown backend, a bad
 * profile or atomics mode, and a pool file of another magic are refused with the documented
 * code and a one-line reason, and a refused pool file is left byte for byte as it was.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tutil.h"

static struct tu_ctx c;

TestSuite(errors, .fini = tu_fini, .timeout = TU_TIMEOUT);

/* A fallback name: starts with "unknown" or just prints the number back. */
static bool says_unknown(const char *s, int code)
{
	char num[16];

	snprintf(num, sizeof(num), "%d", code);
	return strncasecmp(s, "unknown", 7) == 0 || strstr(s, num) != NULL;
}

Test(errors, strerror_names_every_code)
{
	const char *names[REMORA_ELAST - REMORA_EBASE];

	for (int code = REMORA_EBASE; code < REMORA_ELAST; code++) {
		const char *s = remora_strerror(-code);

		cr_assert_not_null(s, "remora_strerror(-%#x) is NULL", code);
		cr_assert_gt(strlen(s), 3, "remora_strerror(-%#x) = \"%s\"", code, s);
		cr_assert_not(says_unknown(s, -code), "remora_strerror(-%#x) = \"%s\"", code, s);
		names[code - REMORA_EBASE] = s;
		for (int j = REMORA_EBASE; j < code; j++)
			cr_assert_str_neq(s, names[j - REMORA_EBASE],
					  "codes %#x and %#x share the name \"%s\"", j, code, s);
	}
	cr_assert_not_null(remora_strerror(0));
	cr_assert_not_null(remora_strerror(REMORA_INPROGRESS));
	cr_assert_str_neq(remora_strerror(0), remora_strerror(REMORA_INPROGRESS));
	cr_assert_not(says_unknown(remora_strerror(-EAGAIN), -EAGAIN));
	cr_assert_not(says_unknown(remora_strerror(-EMSGSIZE), -EMSGSIZE));
	cr_assert_str_neq(remora_strerror(-EAGAIN), remora_strerror(-REMORA_EABORT));
	/* Something outside every range is named as such, never NULL. */
	cr_assert_not_null(remora_strerror(-(REMORA_EBASE + 255)));
	cr_assert_not_null(remora_strerror(-123456789));
	cr_assert_not_null(remora_strerror(77));
}

static int open_with(const char *backend, const char *profile, const char *atomics,
		     const char *cluster, struct remora_transport **tp)
{
	struct remora_transport_cfg cfg;

	tu_cfg(&cfg, -1);
	cfg.backend = backend;
	cfg.profile = profile;
	cfg.atomics = atomics;
	if (cluster)
		cfg.cluster = cluster;
	return remora_transport_open(&cfg, tp);
}

Test(errors, unknown_backend_lists_builtins)
{
	struct remora_transport *sentinel = (struct remora_transport *)(uintptr_t)0x5e71;
	struct remora_transport *tp = sentinel;
	const char *const *names = remora_backend_names();
	struct remora_caps caps = { .size = sizeof(caps) };
	const char *msg;
	int rc;

	cr_assert_not_null(names);
	cr_assert_not_null(names[0], "no backend is built in");
	rc = open_with("nosuch", NULL, NULL, NULL, &tp);
	cr_assert_eq(rc, -REMORA_ENOBACKEND, "backend \"nosuch\": %d (%s)", rc,
		     remora_strerror(rc));
	cr_assert_eq(tp, sentinel, "*out written on failure");
	msg = remora_last_error();
	cr_assert_not_null(msg);
	cr_assert_null(strchr(msg, '\n'), "the reason is one line: \"%s\"", msg);
	cr_assert_not_null(strstr(msg, "nosuch"), "the reason does not name the input: \"%s\"",
			   msg);
	for (unsigned i = 0; names[i]; i++)
		cr_assert_not_null(strstr(msg, names[i]), "\"%s\" does not list backend %s", msg,
				   names[i]);

	/* The same through $REMORA_BACKEND. */
	setenv("REMORA_BACKEND", "nosuch2", 1);
	rc = open_with(NULL, NULL, NULL, NULL, &tp);
	cr_assert_eq(rc, -REMORA_ENOBACKEND, "$REMORA_BACKEND=nosuch2: %d", rc);
	cr_assert_not_null(strstr(remora_last_error(), "nosuch2"));

	cr_assert_eq(remora_backend_caps("nosuch", &caps), -REMORA_ENOBACKEND);
	for (unsigned i = 0; names[i]; i++) {
		memset(&caps, 0, sizeof(caps));
		caps.size = sizeof(caps);
		rc = remora_backend_caps(names[i], &caps);
		cr_assert_eq(rc, 0, "remora_backend_caps(%s) = %d", names[i], rc);
		cr_assert_neq(caps.ops & (1u << REMORA_OP_READ), 0, "%s cannot READ", names[i]);
		cr_assert_eq(caps.emulated_ops & ~caps.ops, 0, "%s emulates verbs it lacks",
			     names[i]);
	}
}

Test(errors, bad_profile_atomics_and_cluster_are_config_errors)
{
	struct remora_transport *tp = NULL;
	int rc;

	rc = open_with(NULL, "warp9", NULL, NULL, &tp);
	cr_assert_eq(rc, -REMORA_ECONFIG, "profile warp9: %d (%s)", rc, remora_strerror(rc));
	cr_assert_null(tp);
	cr_assert_not_null(strstr(remora_last_error(), "warp9"), "reason: \"%s\"",
			   remora_last_error());
	rc = open_with(NULL, NULL, "sometimes", NULL, &tp);
	cr_assert_eq(rc, -REMORA_ECONFIG, "atomics \"sometimes\": %d (%s)", rc,
		     remora_strerror(rc));
	rc = open_with(NULL, NULL, NULL, "../etc", &tp);
	cr_assert_eq(rc, -REMORA_ECONFIG, "cluster \"../etc\": %d (%s)", rc, remora_strerror(rc));
	rc = open_with(NULL, NULL, NULL, "", &tp);
	cr_assert_eq(rc, -REMORA_ECONFIG, "empty cluster: %d (%s)", rc, remora_strerror(rc));
	cr_assert_null(tp);
}

/* ---- pool files of another magic ------------------------------------------------------- */

static uint8_t *slurp(const char *path, size_t *len)
{
	struct stat st;
	uint8_t *buf;
	int fd = open(path, O_RDONLY);

	cr_assert_geq(fd, 0, "%s: %s", path, strerror(errno));
	cr_assert_eq(fstat(fd, &st), 0);
	*len = (size_t)st.st_size;
	buf = malloc(*len + 1);
	cr_assert_not_null(buf);
	cr_assert_eq(read(fd, buf, *len), (ssize_t)*len);
	close(fd);
	return buf;
}

static void spit(const char *path, const uint8_t *buf, size_t len)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);

	cr_assert_geq(fd, 0, "%s: %s", path, strerror(errno));
	cr_assert_eq(write(fd, buf, len), (ssize_t)len);
	close(fd);
}

/* Creates pool `node`, learns its file from the locator, closes it and keeps the file. */
static void pool_file(uint16_t node, char *path, size_t size)
{
	struct remora_pool_spec spec = { .size = sizeof(spec), .node = node, .bytes = 65536,
					 .flags = REMORA_POOL_CREATE | REMORA_POOL_EXCL };
	struct remora_node_desc d;
	struct remora_pool *pool;
	struct stat st;
	int rc;

	rc = remora_pool_open(c.tp, &spec, &pool);
	cr_assert_eq(rc, 0, "pool_open = %d (%s)", rc, remora_strerror(rc));
	rc = remora_pool_describe(pool, &d);
	cr_assert_eq(rc, 0);
	remora_pool_close(pool, false);
	if (stat(d.locator, &st) || !S_ISREG(st.st_mode))
		tu_skip("backend %s: locator \"%s\" is not a pool file", tu_backend(), d.locator);
	snprintf(path, size, "%s", d.locator);
}

static int reopen(uint16_t node, uint32_t flags)
{
	struct remora_pool_spec spec = { .size = sizeof(spec), .node = node, .bytes = 65536,
					 .flags = flags };
	struct remora_pool *pool = NULL;
	int rc = remora_pool_open(c.tp, &spec, &pool);

	if (rc == 0)
		remora_pool_close(pool, false);
	return rc;
}

static void assert_same_file(const char *path, const uint8_t *want, size_t len, const char *what)
{
	size_t got_len;
	uint8_t *got = slurp(path, &got_len);

	cr_assert_eq(got_len, len, "%s: file size %zu, was %zu", what, got_len, len);
	cr_assert_eq(memcmp(got, want, len), 0, "%s: the refused file was modified", what);
	free(got);
}

Test(errors, garbage_pool_file_is_refused_and_untouched)
{
	static const uint32_t flag_sets[] = { 0, REMORA_POOL_CREATE,
					      REMORA_POOL_CREATE | REMORA_POOL_UNLINK_ON_CLOSE };
	char path[512];
	uint8_t *buf;
	size_t len;
	uint64_t seed = 0x6a;
	int rc;

	c.tp = tu_transport(-1);
	tu_current_set(&c);
	pool_file(0, path, sizeof(path));
	buf = slurp(path, &len);
	for (size_t i = 0; i < len; i++)
		buf[i] = (uint8_t)tu_rand64(&seed);
	spit(path, buf, len);
	for (unsigned k = 0; k < sizeof(flag_sets) / sizeof(flag_sets[0]); k++) {
		rc = reopen(0, flag_sets[k]);
		cr_assert_eq(rc, -REMORA_ELAYOUT, "garbage pool, flags %#x: %d (%s)", flag_sets[k],
			     rc, remora_strerror(rc));
		cr_assert_null(strchr(remora_transport_errmsg(c.tp), '\n'));
		assert_same_file(path, buf, len, "full-size garbage");
	}
	rc = reopen(0, REMORA_POOL_CREATE | REMORA_POOL_EXCL);
	cr_assert_eq(rc, -EEXIST, "CREATE|EXCL over an existing file: %d (%s)", rc,
		     remora_strerror(rc));
	assert_same_file(path, buf, len, "CREATE|EXCL");

	/* A short file of text. */
	spit(path, (const uint8_t *)"hello, not a pool\n", 18);
	rc = reopen(0, REMORA_POOL_CREATE);
	cr_assert_eq(rc, -REMORA_ELAYOUT, "18-byte text file: %d (%s)", rc, remora_strerror(rc));
	assert_same_file(path, (const uint8_t *)"hello, not a pool\n", 18, "short file");
	free(buf);
	unlink(path);
}

Test(errors, pool_file_of_another_node_is_refused)
{
	char p0[512], p1[512];
	uint8_t *buf;
	size_t len;
	int rc;

	c.tp = tu_transport(-1);
	tu_current_set(&c);
	pool_file(1, p1, sizeof(p1));
	pool_file(0, p0, sizeof(p0));
	cr_assert_str_neq(p0, p1);
	cr_assert_eq(rename(p1, p0), 0, "rename: %s", strerror(errno));
	buf = slurp(p0, &len);
	rc = reopen(0, 0);
	cr_assert_eq(rc, -REMORA_ELAYOUT, "node 1's pool opened as node 0: %d (%s)", rc,
		     remora_strerror(rc));
	assert_same_file(p0, buf, len, "another node's pool");
	free(buf);
	unlink(p0);
}
