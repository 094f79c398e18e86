/* SPDX-License-Identifier: MIT */
/*
 * The plain stress programs' cluster (no criterion): a transport in a fresh temporary
 * directory with nmn shm pools, registered and attached, removed again at the end.
 */
#ifndef REMORA_TESTS_SENV_H
#define REMORA_TESTS_SENV_H

#include <stdint.h>

#include <remora/transport.h>

#define SENV_MAX_MN 4

struct senv {
	const char *name; /* the program, for its messages */
	struct remora_transport_cfg cfg;
	struct remora_transport *tp;
	struct remora_pool *pools[SENV_MAX_MN];
	unsigned nmn;
	char dir[512], cluster[32];
};

/*
 * Opens the cluster (tag: a letter that tells this program's cluster names apart). Returns 0,
 * 77 when it cannot run here (skip), or 1 after a line on stderr; on non-zero nothing is left.
 */
int senv_open(struct senv *e, const char *name, char tag, unsigned nmn, uint64_t pool_bytes);
void senv_close(struct senv *e);

#endif
