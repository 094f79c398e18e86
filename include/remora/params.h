/* SPDX-License-Identifier: MIT */
/*
 * The one parameter table: every knob of a remora cluster, with its type, default, allowed
 * values and help line. Each value is read from, in increasing precedence:
 *
 *     default  <  config file (INI)  <  environment REMORA_<NAME>  <  flag --<name>
 *
 * and remembers where it came from ("default", "cluster.ini:12", "env REMORA_POOL_SIZE",
 * "flag --pool-size"), so `remora info` can say why a value is what it is.
 *
 * Adding a parameter is one line in REMORA_PARAM_TABLE below:
 *     X(ID, "name", TYPE, "default", allowed, "help")
 *   TYPE     STR | INT | SIZE (bytes, K/M/G/T suffixes, powers of 1024) | BOOL | ENUM
 *   allowed  ENUM: "a|b|c"; INT and SIZE: "min..max" (either side may be empty); else NULL
 * The value is then read with remora_params_int(p, REMORA_P_ID) (or _str, _bool, _size),
 * documented by `remora info --params-md` (docs/config.md is checked against it by a test),
 * settable in the [cluster] section, as REMORA_NAME and as --name.
 *
 * The config file also names the nodes: [mn.N] host= port= (control-plane address of memory
 * node N) and [cn.N] host= (where compute node N runs). See docs/config.md.
 */
#ifndef REMORA_PARAMS_H
#define REMORA_PARAMS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <remora/error.h>
#include <remora/transport.h>

#ifdef __cplusplus
extern "C" {
#endif

/* clang-format off */
#define REMORA_PARAM_TABLE(X) \
X(CLUSTER,      "cluster",      STR,  "remora", NULL, \
  "cluster name; scopes pool files and mailboxes (remora-<cluster>-mn<N>)") \
X(BACKEND,      "backend",      ENUM, "shm",    "shm|rdma|pmem", \
  "transport backend") \
X(PROFILE,      "profile",      ENUM, "none",   "none|cxl|cx3|cx4|cx5|cx6", \
  "NIC cost model of the shm and pmem backends") \
X(MN_SCALE,     "mn_scale",     INT,  "1",      "1..1000000", \
  "scaled cluster: the cost profile's service rates divided by K, round trips kept") \
X(ATOMICS,      "atomics",      ENUM, "native", "native|refuse|arbiter", \
  "atomics on a cxl pool: CPU atomics, refused, or routed to one arbiter") \
X(DIR,          "dir",          STR,  "",       NULL, \
  "directory of pool files; empty: the backend's default (shm: /dev/shm)") \
X(POOL_SIZE,    "pool_size",    SIZE, "64M",    "4K..1T", \
  "usable bytes of each memory node's pool") \
X(MN,           "mn",           INT,  "1",      "1..32", \
  "memory nodes (a config file naming [mn.N] sections sets it)") \
X(CN,           "cn",           INT,  "1",      "1..64", \
  "compute-node processes (a config file naming [cn.N] sections sets it)") \
X(THREADS,      "threads",      INT,  "1",      "1..256", \
  "worker threads per compute node") \
X(COROS,        "coros",        INT,  "8",      "1..1024", \
  "coordinators (coroutines) per worker thread") \
X(PREFETCH_YIELD, "prefetch_yield", BOOL, "false", NULL, \
  "shm and pmem with profile none: a coordinator prefetches the pool lines of its verbs and yields before they run, hiding memory latency behind the other coordinators (pools far larger than the CPU caches)") \
X(INLINE_YIELD, "inline_yield", INT, "8", "1..1024", \
  "shm and pmem with profile none: a coordinator whose verbs complete as they are posted gives its turn to the others every this many verb calls (1: at every call, as when verbs complete later; more: fewer coroutine switches, each costing more than the turn is worth there)") \
X(HUGEPAGES,    "hugepages",    BOOL, "false",  NULL, \
  "back pools with huge pages where the backend can") \
X(NUMA_NODE,    "numa_node",    INT,  "-1",     "-1..1023", \
  "NUMA node pools are bound to; -1: no binding") \
X(PROTOCOL,     "protocol",     ENUM, "ford", \
  "ford|pandora|pandora_nopill|lotus|motor|declock|declock_tf|declock_pf|declock_cas|declock_dslr|oocc|oocc_lease|oocc_wu|oocc_unsafe|twopl|crest|crest_record", \
  "transaction protocol") \
X(UNLOCK,       "unlock",       ENUM, "auto",   "auto|write|cas", \
  "how transactions give lock words back: a WRITE of 0, or a CAS from their own word; auto: cas on backends whose atomics are not atomic against WRITEs (RDMA NICs)") \
X(ISOLATION,    "isolation",    ENUM, "sr",     "sr|si", \
  "isolation of MVCC protocols (motor, lotus): serializable or snapshot isolation") \
X(LOTUS_LOCK_TABLE, "lotus_lock_table", SIZE, "32M", "64..16G", \
  "lotus: bytes of each compute node's lock table (64-byte buckets of 8 slots)") \
X(LOTUS_VT_CACHE, "lotus_vt_cache", INT, "65536", "0..1048576", \
  "lotus: CVTs each compute node caches for the shards it owns (0: no VT cache)") \
X(LOTUS_RESHARD_MS, "lotus_reshard_ms", INT, "100", "0..60000", \
  "lotus: each compute node publishes its latency this often and hands its hottest shard to the fastest node after 3 intervals above 1.5x the average (0: no handovers; the shard directory and online recovery's takeover stay)") \
X(REPLICAS,     "replicas",     INT,  "3",      "1..32", \
  "copies of each record (1 primary + backups); at most mn; default: 3, or mn if fewer") \
X(TIMESTAMPS,   "timestamps",   ENUM, "clock",  "clock|counter", \
  "timestamp service: clock-based (no MN atomics) or an MN counter") \
X(MN_ADDRS,     "mn_addrs",     STR,  "",       NULL, \
  "control addresses of memory nodes 0..N-1, host:port,...; empty: the [mn.N] sections") \
X(HEARTBEAT_MS, "heartbeat_ms", INT,  "50",     "1..60000", \
  "a compute node renews its lease with every memory node this often") \
X(LEASE_MS,     "lease_ms",     INT,  "3000",   "2..3600000", \
  "a compute node not heard from for this long is declared dead and fenced") \
X(CONNECT_MS,   "connect_ms",   INT,  "5000",   "0..3600000", \
  "how long a compute node retries connecting to a memory node") \
X(KEY_FILE,     "key_file",     STR,  "",       NULL, \
  "the cluster's secret (mode 0600, made by its first memory node); empty: <dir>/remora-<cluster>-key") \
X(CTL_IDLE_MS,  "ctl_idle_ms",  INT,  "5000",   "100..3600000", \
  "a control connection not authenticated, or holding half a request, this long is closed") \
X(CTL_PEER_CONNS, "ctl_peer_conns", INT, "64",  "1..256", \
  "unauthenticated control connections one address may hold; a new one evicts its oldest") \
X(RUN_TIMEOUT,  "run_timeout",  INT,  "0",      "0..", \
  "remora run: seconds after which the whole cluster is killed; 0: no limit") \
X(KEEP_POOL,    "keep_pool",    BOOL, "false",  NULL, \
  "memory nodes leave their pool files behind when they exit") \
X(RDMA_DEVICE,  "rdma_device",  STR,  "",       NULL, \
  "rdma: RDMA device name; empty: the first device with an active port") \
X(RDMA_PORT,    "rdma_port",    STR,  "",       NULL, \
  "rdma: port number; empty: the first active port") \
X(RDMA_GID_INDEX, "rdma_gid_index", STR, "",    NULL, \
  "rdma: GID index; empty: a RoCE v2 GID with an IPv4-mapped address, else the first valid") \
X(RDMA_MTU,     "rdma_mtu",     STR,  "",       NULL, \
  "rdma: path MTU in bytes (256..4096); empty: the port's active MTU") \
X(RDMA_QP_TIMEOUT, "rdma_qp_timeout", STR, "",   NULL, \
  "rdma: ACK timeout exponent N (4.096 us x 2^N per try, 7 tries; 1..31); empty: 14 (67 ms); raise it on slow or emulated hosts") \
X(VERB_TIMEOUT_MS, "verb_timeout_ms", INT, "60000", "0..86400000", \
  "a channel with verbs in flight that completes none for this long is broken: they fail with -ETIMEDOUT, as does every later verb; 0: wait forever") \
X(ROUTE,        "route",        BOOL, "false",  NULL, \
  "lotus: a read-write transaction runs on the compute node that owns its first key's shard; coordinators hand it over by message (two-level load balancing)") \
X(FAILED_LOCKS, "failed_locks", ENUM, "abort",  "abort|stall", \
  "pandora: a lock of a dead compute node not recovered yet aborts the transaction, or stalls it until recovery") \
X(MEMBERSHIP,   "membership",   ENUM, "builtin", "builtin|zookeeper", \
  "who declares a compute node dead: the memory nodes (leases), or ZooKeeper (ephemeral znodes, session timeout lease_ms)") \
X(ZK_HOSTS,     "zk_hosts",     STR,  "127.0.0.1:2181", NULL, \
  "membership = zookeeper: the ZooKeeper servers, host:port,...") \
X(CREST_LOCALIZED, "crest_localized", BOOL, "true", NULL, \
  "crest: localized execution: the transactions of a compute node share one record cache, remote cell locks and uncommitted versions; false: each transaction locks and writes alone (the Fig. 15 ablation)") \
X(CREST_LOCAL_WRITERS, "crest_local_writers", INT, "8", "0..65535", \
  "crest: local writers admitted under one hold of a record's remote cell locks before the record must be written back and unlocked (gap 5); 0: no bound") \
X(CREST_NODE_CACHE, "crest_node_cache", BOOL, "true", NULL, \
  "crest: one record cache per compute node, shared by its workers under one lock (the paper's scope); false: one per worker, no lock (faster with more threads than cores, or a few very hot keys: docs/crest.md section 7E)")
/* clang-format on */

enum remora_param_id {
#define REMORA_PARAM_ID_(id, ...) REMORA_P_##id,
	REMORA_PARAM_TABLE(REMORA_PARAM_ID_)
#undef REMORA_PARAM_ID_
	REMORA_P__COUNT
};

enum remora_param_type {
	REMORA_PT_STR,
	REMORA_PT_INT,
	REMORA_PT_SIZE,
	REMORA_PT_BOOL,
	REMORA_PT_ENUM,
};

/* Where a value came from, in increasing precedence. */
enum remora_param_src {
	REMORA_SRC_DEFAULT,
	REMORA_SRC_FILE,
	REMORA_SRC_ENV,
	REMORA_SRC_FLAG,
};

struct remora_param_def {
	const char *name;
	enum remora_param_type type;
	const char *def;     /* default, as text */
	const char *allowed; /* "a|b|c", "min..max" or NULL */
	const char *help;
};

struct remora_params;

/* The table entry of parameter id (id < REMORA_P__COUNT), or NULL. */
REMORA_API const struct remora_param_def *remora_param_def(enum remora_param_id id);
/* Looks a parameter up by name ('-' and '_' are the same); its id or -REMORA_ENOTFOUND. */
REMORA_API int remora_param_find(const char *name);
REMORA_API const char *remora_param_type_name(enum remora_param_type t);

/* A set of values, every one at its default. Returns 0 or -ENOMEM. */
REMORA_API int remora_params_create(struct remora_params **out);
REMORA_API void remora_params_destroy(struct remora_params *p);

/*
 * Reads an INI config file: [cluster] (or no section) holds parameters, [mn.N] and [cn.N]
 * name nodes. Returns 0, -errno when the file cannot be read, or -REMORA_ECONFIG for an
 * unknown section or key, a duplicate key or a malformed value; remora_params_errmsg() then
 * holds one line such as "cluster.ini:12: unknown key 'pool_sizee' (did you mean 'pool_size'?)".
 * Only one config file may be loaded into a set of values.
 */
REMORA_API int remora_params_load_file(struct remora_params *p, const char *path);
/*
 * Applies REMORA_<NAME> variables of envp (NULL: the process environment). A REMORA_
 * variable that is not a parameter but spells almost like one is an error (a typo that would
 * otherwise be silently ignored). Returns 0 or -REMORA_ECONFIG.
 */
REMORA_API int remora_params_load_env(struct remora_params *p, char *const *envp);
/*
 * Sets parameter name to the text value from source src; where names the source for
 * messages ("--threads", "REMORA_THREADS", "cluster.ini:3"). A value from a source of lower
 * precedence than the current one is checked and then ignored. Returns 0, -REMORA_ENOTFOUND
 * for an unknown name, or -REMORA_ECONFIG for a malformed value.
 */
REMORA_API int remora_params_set(struct remora_params *p, const char *name, const char *value,
				 enum remora_param_src src, const char *where);
/*
 * Parses a command-line flag at argv[*i]: "--name=value", "--name value", and for booleans
 * "--name" and "--no-name". Returns 1 and advances *i past it when it is a parameter flag,
 * 0 (and *i untouched) when argv[*i] names no parameter, or -REMORA_ECONFIG for a bad value
 * or a missing argument.
 */
REMORA_API int remora_params_parse_flag(struct remora_params *p, int argc, char **argv, int *i);
/*
 * Checks the values against each other once every source is applied (node sections and
 * mn/cn counts agree, replicas <= mn, ...). Returns 0 or -REMORA_ECONFIG.
 */
REMORA_API int remora_params_check(struct remora_params *p);
/* The last error of p: one line naming its source. */
REMORA_API const char *remora_params_errmsg(const struct remora_params *p);

REMORA_API const char *remora_params_str(const struct remora_params *p, enum remora_param_id id);
/*
 * The backend parameters of p (every name a built backend declares, remora_backend_params())
 * that have a non-empty value, as remora_transport_cfg.backend_params takes them; *n gets the
 * count. Valid until p changes.
 */
REMORA_API const struct remora_kv *remora_params_backend(const struct remora_params *p,
							 uint32_t *n);
/* INT, SIZE (bytes), BOOL (0/1) and ENUM (index into allowed) values. */
REMORA_API int64_t remora_params_int(const struct remora_params *p, enum remora_param_id id);
REMORA_API uint64_t remora_params_size(const struct remora_params *p, enum remora_param_id id);
REMORA_API bool remora_params_bool(const struct remora_params *p, enum remora_param_id id);
REMORA_API enum remora_param_src remora_params_src(const struct remora_params *p,
						   enum remora_param_id id);
/* "default", "cluster.ini:12", "env REMORA_THREADS" or "flag --threads". */
REMORA_API const char *remora_params_origin(const struct remora_params *p, enum remora_param_id id);

/* ---- nodes ------------------------------------------------------------------------------ */

#define REMORA_HOST_MAX 64

struct remora_node_addr {
	char host[REMORA_HOST_MAX];
	uint16_t port; /* 0: not given (remora run and tests pick one) */
};

/* Memory nodes of the cluster (after remora_params_check: the mn parameter). */
REMORA_API unsigned remora_params_mn_count(const struct remora_params *p);
REMORA_API unsigned remora_params_cn_count(const struct remora_params *p);
/*
 * Control-plane address of memory node id: from mn_addrs, else from [mn.id], else
 * 127.0.0.1 port 0. Returns 0, or -REMORA_ENODE when id >= remora_params_mn_count().
 */
REMORA_API int remora_params_mn_addr(const struct remora_params *p, unsigned id,
				     struct remora_node_addr *out);
/* Host of compute node id ([cn.id] host=, default 127.0.0.1); 0 or -REMORA_ENODE. */
REMORA_API int remora_params_cn_addr(const struct remora_params *p, unsigned id,
				     struct remora_node_addr *out);
/* True when memory-node addresses came from mn_addrs or [mn.N] sections. */
REMORA_API bool remora_params_have_mn_addrs(const struct remora_params *p);

/* Writes the parameter table as the markdown table of docs/config.md. */
REMORA_API void remora_params_doc_table(FILE *f);

#ifdef __cplusplus
}
#endif
#endif
