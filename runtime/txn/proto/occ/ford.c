/* SPDX-License-Identifier: MIT */
/*
 * FORD (Zhang et al., FAST'22) as Pandora's digest describes it (section 3.1):
 *   execution   reads: READ; writes: CAS(lock 0 -> 1) + READ in one doorbell batch
 *   undo log    old images of updated and deleted records (inserts are skipped, as in FORD)
 *               written to every memory node holding a replica, in the validation round trip
 *   validation  READ of each read record's 8-byte version
 *   commit      WRITE of the whole record to every replica, then WRITE lock = 0 (async)
 *   abort       WRITE lock = 0 on the locks this transaction acquired
 *
 * Kept as FORD on purpose: validation does not look at locks (Pandora's "Covert Locks" bug),
 * a valid log may survive an abort ("Lost Decision"), inserts are not logged ("Missing
 * Actions"). One deviation: abort releases only acquired locks (FORD's "Complicit Abort" is
 * switched back in by REMORA_MUTATE=complicit_abort), because with lock value 1 that bug lets
 * two writers both win, which would make FORD unusable as a baseline.
 */
#include "occ.h"

static const struct occ_policy ford_policy = {
	.name = "ford",
	.pill = false,
	.validate_locks = false,
	.log_after_validate = false,
	.log_inserts = false,
	.log_servers = false,
};

static int ford_db_init(struct remora_db *db)
{
	return occ_db_init(db, &ford_policy);
}

const struct txn_proto_ops txn_proto_ford = OCC_PROTO_OPS("ford", ford_db_init);
