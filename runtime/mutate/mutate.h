/* SPDX-License-Identifier: MIT */
/*
 * The one table of negative-control mutations. Each switches a known bug back in so that a test
 * can prove its check catches that bug (docs/engine.md, "Mutation switches"). Every layer's
 * switches are named here, once; a layer keeps a 64-bit mask of its own switches (bit
 * mut_bit(id)) and asks mut_on(). Two ways to set them:
 *   - ENV layers (txn, cluster, cli) read $REMORA_MUTATE, a comma list, when a db or cluster
 *     endpoint opens. Each takes its own names and accepts the other layers' names silently.
 *   - API layers (transport, rpc, pmem, lock) are set by tests through the layer's own call
 *     (rt_transport_mutate, rpc_mutate, rpmem_mutate), never from the environment: their
 *     switches would silently weaken a production process.
 * "none" clears every switch of the layer that reads it.
 */
#ifndef REMORA_MUTATE_H
#define REMORA_MUTATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum mut_layer {
	MUT_TXN,
	MUT_CLUSTER,
	MUT_CLI,
	MUT_TRANSPORT,
	MUT_RPC,
	MUT_PMEM,
	MUT_LOCK,
	MUT_PROTO,
};

/*
 * X(ID, "name", LAYER, "what it breaks"), one list per layer: a layer numbers its switches
 * from 0, so each layer has the 64 bits of its mask to itself (asserted below).
 */
#define MUT_TXN_TABLE(X) \
X(COMPLICIT_ABORT,   "complicit_abort",   TXN, "abort unlocks locks whose CAS failed too") \
X(MISSING_ACTIONS,   "missing_actions",   TXN, "inserts are not undo-logged") \
X(COVERT_LOCKS,      "covert_locks",      TXN, "validation reads versions, not locks") \
X(RELAXED_LOCKS,     "relaxed_locks",     TXN, "write locks taken after validation") \
X(LOST_DECISION,     "lost_decision",     TXN, "log before validation, kept valid on abort") \
X(LOG_WITHOUT_LOCK, "log_without_lock", TXN, \
  "log written with the lock CASes, before they land") \
X(SKIP_VALIDATION,   "skip_validation",   TXN, "no validation at all") \
X(EARLY_UNLOCK,      "early_unlock",      TXN, "unlock before the commit writes land") \
X(NO_LOG_PERSIST, "no_log_persist", TXN, \
  "log WRITEs not DURABLE (pmem: lost at power loss)") \
X(NO_COMMIT_PERSIST, "no_commit_persist", TXN, "commit WRITEs not DURABLE") \
X(NO_LOCK_CAS, "no_lock_cas", TXN, \
  "lock CAS not sent, taken as won (LOTUS figs 2-3; unsafe)") \
X(UNLOCK_AFTER_LOG, "unlock_after_log", TXN, \
  "a commit failing once its log may have landed unlocks") \
X(STALE_CAS_OLD, "stale_cas_old", TXN, \
  "lock CAS result not reset: a failed verb looks won") \
X(UNLOCK_FAILS_COMMIT, "unlock_fails_commit", TXN, \
  "a refused unlock post reports a landed commit failed") \
X(OCC_FORGETS_UNLOCK, "occ_forgets_unlock", TXN, \
  "ford/pandora: a commit's unlocks skip every lock of 1 transaction in 1024 (a leak)") \
X(UNLOCK_FAILURE_IGNORED, "unlock_failure_ignored", TXN, \
  "a fire-and-forget unlock that fails is forgotten: its lock stays under a live id") \
X(UNKNOWN_CAS_KEPT, "unknown_cas_kept", TXN, \
  "a failed batch leaves its lock CASes without a result as they are (pandora: not released if ours)") \
X(PILL_NO_INCARNATION, "pill_no_incarnation", TXN, "the PILL lock word drops the incarnation") \
X(UNPUBLISHED_FAILURE, "unpublished_failure", TXN, "online recovery never publishes failed ids") \
X(ONLINE_NO_LOCK_PROOF, "online_no_lock_proof", TXN, \
  "online recovery decides from images alone, not from the held locks") \
X(RECOVER_UNFENCED, "recover_unfenced", TXN, \
  "online recovery claims dead nodes not yet fenced on every memory node") \
X(CLAIM_DONE_FIRST, "claim_done_first", TXN, \
  "the online claim is marked done before its recovery ran") \
X(IDS_BY_CN, "ids_by_cn", TXN, \
  "PILL coordinator ids follow the compute-node id: a restarted node reuses them") \
X(RECYCLE_WITH_STRAYS, "recycle_with_strays", TXN, \
  "the id recycler frees failed ids without releasing their stray locks") \
X(OWN_LOCK_STRAY, "own_lock_stray", TXN, \
  "a lock of this process whose id is in the local failed set is stolen") \
X(STRANDED_CLEAN_CLOSE, "stranded_clean_close", TXN, \
  "a db with a stranded coordinator closes as if clean (uncounts its open)") \
X(OOCC_RV_GT_WW, "oocc_rv_gt_ww", TXN, "oocc: writers wait ww/8 < rv that readers trust") \
X(OOCC_NO_LEASE_WAIT, "oocc_no_lease_wait", TXN, "oocc: commit WRITEs without the lease wait") \
X(SKIP_TORN_CHECK, "skip_torn_check", TXN, "motor: a torn CVT READ is used as it is") \
X(DELTA_SKIP, "delta_skip", TXN, "motor deltas: an older version rebuilt without one delta") \
X(SKIP_FCW, "skip_first_committer_wins", TXN, "motor SI: no first-committer-wins check") \
X(RECLAIM_VISIBLE, "reclaim_visible", TXN, \
  "motor: a snapshot whose version was reclaimed reads the next newer one") \
X(GC_NO_HORIZON, "gc_no_horizon", TXN, \
  "motor: writers reclaim the oldest version without the cluster's GC horizon") \
X(OOCC_MANAGER_LOCAL, "oocc_manager_local", TXN, \
  "oocc: the lease manager of several compute nodes changes its own node's word only") \
X(OOCC_START_SYNCED, "oocc_start_synced", TXN, \
  "oocc: a node of a cluster-wide lease manager trusts its own word before a round reached it") \
X(OOCC_RV_AT_BEGIN, "oocc_rv_at_begin", TXN, \
  "oocc: a reader trusts the rv of begin, not the one at its first READ") \
X(OOCC_ABORT_KEEPS_LOG, "oocc_abort_keeps_log", TXN, \
  "oocc: an abort after the redo log went out unlocks without invalidating the log") \
X(OOCC_OTHER_NOT_PROOF, "oocc_other_not_proof", TXN, \
  "oocc recovery: a logged record a later transaction overwrote does not prove the commit") \
X(REDO_TRUSTS_VERSION, "redo_trusts_version", TXN, \
  "motor recovery: a replica's cell counts by its timestamp, torn or headerless") \
X(MOTOR_ONLINE_KEEPS_LOCKS, "motor_online_keeps_locks", TXN, \
  "motor online recovery leaves the dead node's lock words held") \
X(RECYCLE_CLAIM_FOREVER, "recycle_claim_forever", TXN, \
  "the id recycler's claim never lapses: one that died holding it stops recycling") \
X(COMMIT_NO_HEADER, "commit_no_header", TXN, \
  "motor: a commit into a CVT without versions leaves its header as the placeholder left it") \
X(FORMAT_KEEPS_TAIL, "format_keeps_tail", TXN, \
  "format leaves a protocol's state past the layout (declock's lock table) as it was") \
X(MNF_NO_BARRIER, "mnf_no_barrier", TXN, \
  "memory-node failover: the new placement is taken without every compute node's ack") \
X(MNF_NO_RESOLVE, "mnf_no_resolve", TXN, \
  "memory-node failover: a commit cut by the dead node is reported committed as it is") \
X(CTL_NO_MIRROR, "ctl_no_mirror", TXN, \
  "control words (allocation cursors, incarnation) are changed on the acting control node only: a successor of node 0 hands out record slots again") \
X(MNF_RECOVER_READS_DEAD, "mnf_recover_reads_dead", TXN, \
  "online recovery after a failover reads the failed-over node's log slots too, and fails") \
X(FORWARD_PARTIAL, "forward_partial", TXN, \
  "online recovery keeps a commit once some of its writes landed, not only all of them") \
X(RECOVER_PAPER_RULE, "recover_paper_rule", TXN, \
  "occ recovery: a copy whose version is not the logged old one counts as written by the log")

/* The protocol plug-ins' own switches (lotus, crest, declock): a layer of their own, since
 * the engine's filled its 64 bits. Read through txn_db_mut(), which picks the mask. */
#define MUT_PROTO_TABLE(X) \
X(LOTUS_NO_VT_CACHE, "lotus_no_vt_cache", PROTO, \
  "lotus: locked READs never use the VT cache (the ablation)") \
X(LOTUS_VT_NO_DROP, "lotus_vt_no_drop", PROTO, \
  "lotus: a W lock granted to another compute node leaves the owner's cached image") \
X(LOTUS_UNLOCK_WAITS, "lotus_unlock_waits", PROTO, \
  "lotus: an unlock of remote locks waits for the owner's reply (the waited unlock, for the ablation)") \
X(DL_NO_REVALIDATE, "dl_no_revalidate", PROTO, \
  "declock: locks given back for ordering are taken again without READing again") \
X(DL_NO_RIDE, "dl_no_ride", PROTO, \
  "declock: no speculative READ rides on the acquisition (records are READ after the grant)") \
X(DL_RIDE_TRUSTED, "dl_ride_trusted", PROTO, \
  "declock: a speculative READ counts even when its acquisition waited (stale images)") \
X(CREST_LOCK_BITS_ONLY, "crest_lock_bits_only", PROTO, \
  "crest: validation checks lock bits, not epochs (the prototype's gap 12)") \
X(CREST_UNLOCK_FIRST, "crest_unlock_first", PROTO, "crest: unlock before the data WRITEs") \
X(CREST_UNLOCK_ALL, "crest_unlock_all", PROTO, "crest: unlock clears every lock bit, not ours") \
X(CREST_SKIP_SNAPSHOT, "crest_skip_snapshot", PROTO, \
  "crest: fetch takes torn cells, locked read cells and EN mismatches as they are") \
X(LOTUS_FINDMATCH_RACE, "lotus_findmatch_race", PROTO, \
  "lotus: no rescan after a lock-table grant (R and W of one key both granted)") \
X(LOTUS_READ_BEFORE_LOCK, "lotus_read_before_lock", PROTO, \
  "lotus: CVT READs go out before the phase's locks are granted") \
X(LOTUS_SKIP_INVISIBLE, "lotus_skip_invisible", PROTO, \
  "lotus: an unlocked reader skips INVISIBLE cells instead of waiting") \
X(LOTUS_EARLY_UNLOCK, "lotus_early_unlock", PROTO, \
  "lotus: locks released before the visible WRITE") \
X(LOTUS_GC_UNMARKED, "lotus_gc_unmarked", PROTO, \
  "lotus: a snapshot reader takes a reclaimed cell for a never-used one (reads absent)") \
X(LOTUS_NO_BUCKET_LOCK, "lotus_no_bucket_lock", PROTO, \
  "lotus: an insert publishes its index slot by WRITE without its bucket's lock") \
X(LOTUS_RESHARD_NO_DRAIN, "lotus_reshard_no_drain", PROTO, \
  "lotus: a shard is handed over while locks of it are still held here") \
X(LOTUS_ONLINE_KEEPS_HOLDS, "lotus_online_keeps_holds", PROTO, \
  "lotus: survivors keep a recovered dead node's coordinators' holds in their lock tables") \
X(CREST_LOG_FETCHED_EPOCH, "crest_log_fetched_epoch", PROTO, \
  "crest: the log's cell version takes the fetched epoch + 1, not the written image's") \
X(LOTUS_DONE_KEEPS_HOLDS, "lotus_done_keeps_holds", PROTO, \
  "lotus: a finished coordinator's remote holds outlive it (its DONE drops nothing)") \
X(LOTUS_ABORT_NO_YIELD, "lotus_abort_no_yield", PROTO, \
  "lotus: a lock-conflict abort returns without yielding (a retry loop starves the holder)") \
X(CREST_NO_CASCADE, "crest_no_cascade", PROTO, \
  "crest: a transaction that read a local version whose writer aborted commits anyway") \
X(CREST_LOCAL_NO_LOCK, "crest_local_no_lock", PROTO, \
  "crest: local writers of one record are admitted without the local lock (both read one version)") \
X(CREST_NO_PIN, "crest_no_pin", PROTO, \
  "crest: a coordinator's next commit overwrites its log before its last versions were written back") \
X(CREST_CACHE_NO_LOCK, "crest_cache_no_lock", PROTO, \
  "crest: the workers of a compute node share its record cache without its lock") \
X(CREST_TRUST_APPLYING, "crest_trust_applying", PROTO, \
  "crest: validation trusts a hold whose write-back (and unlock) is already out") \
X(CREST_EXCUSE_LATE_HOLD, "crest_excuse_late_hold", PROTO, \
  "crest: validation excuses a lock bit on a cell the node held only after the READ went out")

#define MUT_CLUSTER_TABLE(X) \
X(NO_MSG_PEERS,      "no_msg_peers",      CLUSTER, "JOIN carries no message locator") \
X(SKIP_AUTH,         "skip_auth",         CLUSTER, "memory node serves without authentication") \
X(NO_IDLE_TIMEOUT,   "no_idle_timeout",   CLUSTER, "memory node never closes idle connections") \
X(NO_EVICT,          "no_evict",          CLUSTER, "memory node: a full table refuses newcomers") \
X(NO_LOG_LIMIT,      "no_log_limit",      CLUSTER, "memory node logs every refused peer")

#define MUT_CLI_TABLE(X) \
X(CLI_HELP_DRIFT, "cli_help_drift", CLI, \
  "the parser forgets the last option that --help lists")

#define MUT_TRANSPORT_TABLE(X) \
X(SKIP_BOUNDS_CHECK, "skip_bounds_check", TRANSPORT, "verbs leaving their region take effect") \
X(SKIP_FENCE_CHECK,  "skip_fence_check",  TRANSPORT, "a fenced compute node's verbs are applied") \
X(SKIP_ATOMIC_COST,  "skip_atomic_cost",  TRANSPORT, "the cost model charges nothing for atomics") \
X(KEEP_STALE_MESSAGES, "keep_stale_messages", TRANSPORT, \
  "a compute node reopening a message segment whose users all crashed keeps their messages")

#define MUT_RPC_TABLE(X) \
X(REPLY_TO_SLOT0,    "reply_to_slot0",    RPC, "replies are matched against call slot 0") \
X(NO_TIMEOUT,        "no_timeout",        RPC, "call deadlines never expire") \
X(BATCH_FIRST_ONLY,  "batch_first_only",  RPC, "a batch sends only its first request") \
X(SKIP_FRAME_CHECK, "skip_frame_check", RPC, \
  "frame headers are not checked against the message")

#define MUT_PMEM_TABLE(X) \
X(SKIP_PERSIST,      "skip_persist",      PMEM, "a DURABLE verb is neither persisted nor counted") \
X(COUNT_WITHOUT_PERSIST, "count_without_persist", PMEM, "a DURABLE verb is counted, not persisted")

#define MUT_LOCK_TABLE(X) \
X(WAITER_POLLS, "waiter_polls", LOCK, "declock: a waiter READs the lock header while it waits") \
X(RELEASE_NO_REFETCH, "release_no_refetch", LOCK, \
  "declock: a release trusts its first queue READ (a late entry counts as a holder)") \
X(STALE_EPOCH_GRANT, "stale_epoch_grant", LOCK, "declock: a grant of an older reset epoch is accepted") \
X(READER_IGNORES_WCNT, "reader_ignores_wcnt", LOCK, \
  "declock: a reader takes the lock at once even behind a writer") \
X(GRANT_OUT_OF_ORDER, "grant_out_of_order", LOCK, \
  "declock: an X release grants the last writer it sees, not the next") \
X(LOCAL_IGNORES_REMOTE, "local_ignores_remote", LOCK, \
  "declock-tf/pf: a local hand-off ignores an earlier remote waiter") \
X(REUSE_IS_OVERFLOW, "reuse_is_overflow", LOCK, \
  "declock: a reader's release takes a place reused after the head passed it for an overwrite") \
X(EARLY_GRANT_ABANDONS_PLACE, "early_grant_abandons_place", LOCK, \
  "declock: a grant that came before the entry makes the acquirer leave its place stranded") \
X(GRANT_IGNORES_PLACE, "grant_ignores_place", LOCK, \
  "declock: a waiter takes a grant that names another place of its lock") \
X(RESET_WAITS_FOR_DEAD, "reset_waits_for_dead", LOCK, \
  "declock: a reset waits for every node's answer, a node declared down included (a hang)") \
X(RIDE_ALWAYS_VALID, "ride_always_valid", LOCK, \
  "verbs that rode an acquisition count as read at the grant even after a wait")

#define MUT_TABLE(X) \
	MUT_TXN_TABLE(X) \
	MUT_PROTO_TABLE(X) \
	MUT_CLUSTER_TABLE(X) \
	MUT_CLI_TABLE(X) \
	MUT_TRANSPORT_TABLE(X) \
	MUT_RPC_TABLE(X) \
	MUT_PMEM_TABLE(X) \
	MUT_LOCK_TABLE(X)

enum mut_id {
#define MUT_ID_(id, name, layer, what) MUT_##id,
	MUT_TABLE(MUT_ID_)
#undef MUT_ID_
	MUT__COUNT
};

struct mut_def {
	const char *name;
	enum mut_layer layer;
	const char *what;
};

const struct mut_def *mut_def(enum mut_id id);

/* "txn", "cluster", ...: the layer's name, for messages and listings. */
const char *mut_layer_name(enum mut_layer layer);

/* Whether $REMORA_MUTATE reaches the layer's switches (else only its test API sets them). */
bool mut_layer_from_env(enum mut_layer layer);

/* Each switch's bit in its layer's mask: its place in its layer's list. */
#define MUT_BIT_(id, name, layer, what) MUT_BIT_##id,
enum { MUT_TXN_TABLE(MUT_BIT_) MUT_TXN__N };
enum { MUT_CLUSTER_TABLE(MUT_BIT_) MUT_CLUSTER__N };
enum { MUT_CLI_TABLE(MUT_BIT_) MUT_CLI__N };
enum { MUT_TRANSPORT_TABLE(MUT_BIT_) MUT_TRANSPORT__N };
enum { MUT_RPC_TABLE(MUT_BIT_) MUT_RPC__N };
enum { MUT_PMEM_TABLE(MUT_BIT_) MUT_PMEM__N };
enum { MUT_LOCK_TABLE(MUT_BIT_) MUT_LOCK__N };
enum { MUT_PROTO_TABLE(MUT_BIT_) MUT_PROTO__N };
#undef MUT_BIT_
_Static_assert(MUT_TXN__N <= 64, "a layer's mask is 64 bits");
_Static_assert(MUT_CLUSTER__N <= 64, "a layer's mask is 64 bits");
_Static_assert(MUT_CLI__N <= 64, "a layer's mask is 64 bits");
_Static_assert(MUT_TRANSPORT__N <= 64, "a layer's mask is 64 bits");
_Static_assert(MUT_RPC__N <= 64, "a layer's mask is 64 bits");
_Static_assert(MUT_PMEM__N <= 64, "a layer's mask is 64 bits");
_Static_assert(MUT_LOCK__N <= 64, "a layer's mask is 64 bits");
_Static_assert(MUT_PROTO__N <= 64, "a layer's mask is 64 bits");

static inline unsigned mut_bit(enum mut_id id)
{
	switch (id) {
#define MUT_CASE_(id, name, layer, what) \
	case MUT_##id:                    \
		return MUT_BIT_##id;
		MUT_TABLE(MUT_CASE_)
#undef MUT_CASE_
	default:
		return 64;
	}
}

/* The layer of switch id (constant-folded for a constant id). */
static inline enum mut_layer mut_layer_of(enum mut_id id)
{
	switch (id) {
#define MUT_LCASE_(id, name, layer, what) \
	case MUT_##id:                     \
		return MUT_##layer;
		MUT_TABLE(MUT_LCASE_)
#undef MUT_LCASE_
	default:
		return MUT_TXN;
	}
}

/* Whether switch id is set in mask, a mask of id's own layer. */
static inline bool mut_on(uint64_t mask, enum mut_id id)
{
	unsigned bit = mut_bit(id);

	return bit < 64 && ((mask >> bit) & 1u);
}

/*
 * Sets the switch `name` of `layer` in *mask ("none" clears the mask). 0, or -EINVAL (unknown
 * name, or a name of another layer); for tests and the API layers' setters.
 */
int mut_set(uint64_t *mask, enum mut_layer layer, const char *name);

/*
 * Parses a comma list (NULL or "" = nothing) into the switches of `layer`. Names of other ENV
 * layers are skipped; an unknown name, or one of an API layer, is -REMORA_ECONFIG with a line
 * in err that says why.
 */
int mut_parse(const char *list, enum mut_layer layer, uint64_t *mask, char *err, size_t errlen);

/* mut_parse of $REMORA_MUTATE. */
int mut_from_env(enum mut_layer layer, uint64_t *mask, char *err, size_t errlen);

/* Writes the names set in mask, a mask of layer, comma-separated ("" for none). */
void mut_names(enum mut_layer layer, uint64_t mask, char *buf, size_t size);

#endif
