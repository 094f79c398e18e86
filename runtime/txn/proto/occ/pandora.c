/* SPDX-License-Identifier: MIT */
/*
 * Pandora (Dananjaya et al., EDBT'25): FORD made recoverable.
 *   - PILL lock words: owner coordinator id in bits 15:0, the owner's tx sequence in 47:16;
 *     0 = free. A failed CAS returns the owner; an owner in the failed-ids bitset is stray and
 *     its lock is taken over with one more CAS; a live owner aborts us. Reads treat stray
 *     locks as free and abort on live ones.
 *   - every write lock is held before validation starts (lock-all-before-validate)
 *   - validation READs {lock, version} (16 B) and aborts on a changed version or a live lock
 *   - logging variant A: after validation succeeds, the whole write set (updates, inserts,
 *     deletes, old images) in ONE WRITE to each of the coordinator's f+1 log servers
 *   - commit WRITEs to every replica; only when all acked does commit return and unlock
 *   - abort unlocks only acquired locks
 * The digest's gaps and how we resolved them: docs/engine.md, "Pandora decisions".
 */
#include "occ.h"

static const struct occ_policy pandora_policy = {
	.name = "pandora",
	.pill = true,
	.read_locks = true,
	.validate_locks = true,
	.log_after_validate = true,
	.log_inserts = true,
	.log_servers = true,
};

static int pandora_db_init(struct remora_db *db)
{
	return occ_db_init(db, &pandora_policy);
}

const struct txn_proto_ops txn_proto_pandora = OCC_PROTO_OPS("pandora", pandora_db_init,
								    occ_recover_online);

/*
 * The PILL ablation: Pandora with FORD's lock word (1). Everything else is Pandora's (locks
 * before validation, reads and validation abort on locks, log after validation, f+1 log
 * servers); what goes is the owner id in the lock word, the failed-ids checks and with them
 * online recovery (a dead node's locks name nobody). For measuring PILL's cost only.
 */
static const struct occ_policy pandora_nopill_policy = {
	.name = "pandora_nopill",
	.pill = false,
	.read_locks = true,
	.validate_locks = true,
	.log_after_validate = true,
	.log_inserts = true,
	.log_servers = true,
};

static int pandora_nopill_db_init(struct remora_db *db)
{
	return occ_db_init(db, &pandora_nopill_policy);
}

const struct txn_proto_ops txn_proto_pandora_nopill =
	OCC_PROTO_OPS("pandora_nopill", pandora_nopill_db_init, NULL);
