/* SPDX-License-Identifier: MIT */
#include "senv.h"

#include <errno.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int senv_rm(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
	(void)sb, (void)flag, (void)ftw;
	return remove(p);
}

static int senv_fail(struct senv *e, const char *what, int rc)
{
	fprintf(stderr, "%s: %s: %s\n", e->name, what, remora_strerror(rc));
	return 1;
}

static int senv_pools(struct senv *e, uint64_t bytes)
{
	int rc;

	for (unsigned m = 0; m < e->nmn; m++) {
		struct remora_pool_spec spec = { .size = sizeof(spec), .node = (uint16_t)m,
						 .bytes = bytes,
						 .flags = REMORA_POOL_CREATE | REMORA_POOL_EXCL };

		rc = remora_pool_open(e->tp, &spec, &e->pools[m]);
		if (rc)
			return senv_fail(e, "pool", rc);
	}
	for (unsigned m = 0; m < e->nmn; m++) {
		struct remora_node_desc d;
		uint32_t key;

		rc = remora_pool_reg(e->pools[m], 0, bytes, &key);
		if (!rc)
			rc = remora_pool_describe(e->pools[m], &d);
		if (!rc)
			rc = remora_transport_attach(e->tp, &d);
		if (rc)
			return senv_fail(e, "attach", rc);
	}
	return 0;
}

int senv_open(struct senv *e, const char *name, char tag, unsigned nmn, uint64_t pool_bytes)
{
	const char *tmp = getenv("TMPDIR");
	int rc;

	memset(e, 0, sizeof(*e));
	e->name = name;
	e->nmn = nmn < SENV_MAX_MN ? nmn : SENV_MAX_MN;
	e->cfg = (struct remora_transport_cfg){ .size = sizeof(e->cfg), .self_cn = 0,
						.numa_node = -1 };
	snprintf(e->dir, sizeof(e->dir), "%s/remora-%c-XXXXXX", tmp && *tmp ? tmp : "/tmp", tag);
	if (!mkdtemp(e->dir)) {
		fprintf(stderr, "%s: skipped: mkdtemp: %s\n", name, strerror(errno));
		return 77;
	}
	snprintf(e->cluster, sizeof(e->cluster), "%c%ld", tag, (long)getpid());
	e->cfg.cluster = e->cluster;
	e->cfg.dir = e->dir;
	rc = remora_transport_open(&e->cfg, &e->tp);
	if (rc) {
		fprintf(stderr, "%s: skipped: %s\n", name, remora_last_error());
		nftw(e->dir, senv_rm, 8, FTW_DEPTH | FTW_PHYS);
		return 77;
	}
	rc = senv_pools(e, pool_bytes);
	if (rc)
		senv_close(e);
	return rc;
}

void senv_close(struct senv *e)
{
	for (unsigned m = 0; m < e->nmn; m++)
		if (e->pools[m])
			remora_pool_close(e->pools[m], true);
	remora_transport_close(e->tp);
	remora_transport_cleanup(&e->cfg);
	nftw(e->dir, senv_rm, 8, FTW_DEPTH | FTW_PHYS);
}
