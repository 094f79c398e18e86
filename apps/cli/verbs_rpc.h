/* SPDX-License-Identifier: MIT */
/* `remora verbs --op rpc` (verbs_rpc.c): RPC round trip beside a READ round trip. */
#ifndef REMORA_APPS_VERBS_RPC_H
#define REMORA_APPS_VERBS_RPC_H

struct verbs_rpc_opts {
	const char *backend; /* NULL: $REMORA_BACKEND, else shm */
	const char *profile; /* NULL: $REMORA_PROFILE, else none */
	double duration;     /* measured seconds per row */
	double warmup;       /* unmeasured seconds before each row */
};

/* Prints the table; 0, or 1 on a run-time failure (one line on stderr). */
int verbs_rpc(const struct verbs_rpc_opts *o);

#endif
