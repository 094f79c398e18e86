/* SPDX-License-Identifier: MIT */
/*
 * `remora recover`: after a whole-cluster crash (every compute node and memory node died),
 * once the memory nodes run again on their pools (`remora mn --keep-pool`) and before any
 * compute node starts: rolls every in-flight transaction forward or back from the logs,
 * invalidates the logs and releases every lock (runtime/recovery, docs/recovery.md).
 * With --check it writes nothing and exits 1 when anything is left to recover.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include <remora/cluster.h>

#include "cli.h"
#include "cmd.h"
#include "recovery/recovery.h"

struct recover_opts {
	bool check;
};

static const struct cli_opt recover_opt_table[] = {
	CLI_OPT_FLAG("--check", struct recover_opts, check,
		     "write nothing; exit 1 when an undo image would be written, a lock\n"
		     "is held or a record fails its checksum (after a clean stop: exit\n"
		     "0; logs of finished transactions stay valid, harmlessly)"),
	{ 0 },
};

static const struct cli_cmd recover_cmd = {
	.name = "recover",
	.usage = "usage: remora recover [--config FILE] [--<param> VALUE...] [--check]\n"
		 "After a crash of the whole cluster: run once every memory node serves its pool "
		 "again\n"
		 "(remora mn --keep-pool ...) and before any compute node starts. Decides every "
		 "logged\n"
		 "transaction from the replicas (roll forward or back), invalidates the logs and\n"
		 "releases every lock. Running it again changes nothing.\n",
	.opts = recover_opt_table,
	.params = true,
};

static void print_report(const struct recovery_report *r, unsigned n_mn, bool check)
{
	const char *would = check ? "to be " : "";

	printf("remora recover: %" PRIu64 " log slots on %u memory nodes, %" PRIu64
	       " valid copies of %" PRIu64 " transactions (%" PRIu64 " malformed)\n",
	       r->log_slots, n_mn, r->log_copies, r->logs, r->logs_bad);
	printf("remora recover: %" PRIu64 " finished, %" PRIu64 " %srolled forward, %" PRIu64
	       " %srolled back (%" PRIu64 " undo images), %" PRIu64 " log headers %sinvalidated\n",
	       r->finished, r->forward, would, r->back, would, r->images_restored,
	       r->logs_invalidated, would);
	printf("remora recover: %" PRIu64 " records scanned, %" PRIu64 " locks held, %" PRIu64
	       " released, %" PRIu64 " records fail their checksum (and %" PRIu64
	       " unpublished ones)\n", r->records, r->locks, r->locks_released, r->torn,
	       r->torn_unpublished);
	printf("remora recover: %.3f ms (logs %.3f ms, locks %.3f ms)\n", r->ns_total / 1e6,
	       r->ns_logs / 1e6, r->ns_locks / 1e6);
}

int mn_pool_check(void *arg, struct remora_pool *pool, uint16_t id, char *err,
			 size_t errlen)
{
	void *base = remora_pool_base(pool);
	uint64_t bytes = remora_pool_bytes(pool);
	char why[300];
	int rc;

	if (*(const bool *)arg) {
		recovery_pool_erase(base, bytes);
		rc = remora_pool_persist(pool, 0, bytes < 4096 ? bytes : 4096);
		if (rc)
			snprintf(err, errlen, "mn %u: --format: persisting: %s", id,
				 remora_strerror(rc));
		return rc;
	}
	rc = recovery_pool_check(base, bytes, id, why, sizeof(why));
	if (rc < 0) {
		snprintf(err, errlen, "mn %u: %s (the pool is left as it is)", id, why);
		return rc;
	}
	if (rc == 0 && recovery_pool_mark(base, bytes)) {
		rc = remora_pool_persist(pool, 0, bytes < 16384 ? bytes : 16384);
		if (rc) {
			snprintf(err, errlen, "mn %u: persisting the recovery mark: %s", id,
				 remora_strerror(rc));
			return rc;
		}
		fprintf(stderr, "remora mn %u: the database was not closed cleanly (processes that "
			"opened it crashed): compute nodes are refused until `remora recover` "
			"runs\n", id);
	}
	return 0;
}

/* Recovery assumes no transaction is live: refuse while compute nodes are members. */
static int no_live_members(struct remora_cluster *cl)
{
	struct remora_cluster_view v;
	int rc = remora_cluster_view(cl, &v);

	if (rc) {
		fprintf(stderr, "remora recover: membership: %s\n", remora_cluster_errmsg(cl));
		return rc;
	}
	if (v.alive) {
		fprintf(stderr,
			"remora recover: compute nodes are members (bitmap %#" PRIx64 "): recovery "
			"is for a cluster restarted after a crash, before compute nodes join\n",
			v.alive);
		return -EBUSY;
	}
	return 0;
}

int cmd_recover(int argc, char **argv)
{
	struct recovery_report rep;
	struct recovery_cfg cfg = { .size = sizeof(cfg) };
	struct remora_cluster *cl;
	struct recover_opts o = { 0 };
	struct cli_params cp;
	char err[400];
	int i = 1, rc;

	rc = cli_start(&recover_cmd, &o, &cp, argc, argv, &i);
	if (rc != CLI_GO)
		return rc;
	if (o.check)
		cfg.flags |= REMORA_RECOVERY_CHECK;
	if (cli_params_finish(&cp))
		goto usage_error;
	rc = cli_join(&cp, -1, &cl, "join");
	if (rc) {
		cli_params_fini(&cp);
		return rc;
	}
	cfg.n_mn = (uint16_t)remora_cluster_n_mn(cl);
	rc = no_live_members(cl);
	if (!rc) {
		rc = recovery_run(remora_cluster_transport(cl), &cfg, &rep, err,
					 sizeof(err));
		if (rc)
			fprintf(stderr, "remora recover: %s\n", err);
		else
			print_report(&rep, cfg.n_mn, cfg.flags & REMORA_RECOVERY_CHECK);
	}
	remora_cluster_leave(cl);
	cli_params_fini(&cp);
	if (rc)
		return 1;
	/*
	 * Logs of finished, complete or aborted transactions (FORD leaves the log of a
	 * transaction that failed validation) are harmless: a clean stop leaves them.
	 */
	if ((cfg.flags & REMORA_RECOVERY_CHECK) &&
	    (rep.images_restored || rep.locks || rep.torn || rep.logs_bad || rep.marked ||
	     rep.live_opens)) {
		fprintf(stderr, "remora recover --check: %" PRIu64 " undo images to write, %" PRIu64
			" held locks, %" PRIu64 " records failing their checksum, %" PRIu64
			" malformed logs, %" PRIu64 " opens of crashed processes: run remora "
			"recover\n", rep.images_restored, rep.locks, rep.torn, rep.logs_bad,
			rep.marked + rep.live_opens);
		return 1;
	}
	return 0;

usage_error:
	cli_params_fini(&cp);
	return 2;
}
