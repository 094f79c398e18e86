/* SPDX-License-Identifier: MIT */
/*
 * NIC cost profiles: data, with where each number comes from. svc_ns = 1e9 / (verbs per second
 * one memory node serves in that class), rounded to whole ns; 0 means no rate limit.
 * rtt_ns is the unloaded round trip of a small verb; msg_svc_ns = 1e9 / (small messages one
 * compute node's NIC sends per second). See docs/transport.md for the discussion.
 */
#include "cost.h"

#include <string.h>

static const struct rt_cost_profile profiles[] = {
	{
		/* Raw speed of the emulated pool: the layer is off. */
		.name = "none",
		.rtt_ns = 0,
		.svc_ns = { 0, 0, 0 },
		.summary = "no NIC model (raw shared-memory speed)",
	},
	{
		/*
		 * A CXL 2.0 memory pool behind a switch. Load-to-use latency of directly attached
		 * CXL memory is ~70-90 ns above local DRAM and a switch adds a few hundred ns
		 * (Pond, ASPLOS'23; "Demystifying CXL memory", MICRO'23): we use 300 ns. A CXL
		 * device serves tens of GB/s, i.e. hundreds of Mops of 64-byte lines, far beyond
		 * what the CNs of one host can issue: no rate limit. Cross-host atomics: see the
		 * `atomics` option (native | refuse | arbiter).
		 */
		.name = "cxl",
		.rtt_ns = 300,
		.svc_ns = { 0, 0, 0 },
		.summary = "CXL pool: 300 ns RTT, no rate limit",
	},
	{
		/*
		 * ConnectX-3, 56 Gb FDR InfiniBand, the testbed of FaRM, DrTM, FORD-era and LOTUS
		 * papers. RTT ~2 us for small READs (Kalia et al., "Design guidelines for high
		 * performance RDMA systems", ATC'16; HERD, SIGCOMM'14). Inbound 8-byte READ/WRITE
		 * ~35 Mops per NIC (ATC'16; LOTUS measures 35 Mops WRITE). 8-byte CAS/FAA ~2.5
		 * Mops per NIC (LOTUS; ATC'16 reports ~2.7 Mops for contended atomics, the PCIe
		 * read-modify-write bound): 29 ns and 400 ns per verb.
		 */
		.name = "cx3",
		.rtt_ns = 2000,
		.svc_ns = { 29, 29, 400 },
		/*
		 * Small SENDs: ~10 M messages/s per ConnectX-3 NIC (HERD and FaSST, OSDI'16,
		 * report RPC rates of that order per CX3 port): 100 ns per message.
		 */
		.msg_svc_ns = 100,
		.summary = "ConnectX-3: 2 us RTT, 35 Mops READ/WRITE, 2.5 Mops atomics per MN, 10 M msg/s per CN",
	},
	{
		/*
		 * ConnectX-4, 100 Gb EDR InfiniBand (DecLock's testbed). Small READ RTT ~2 us
		 * like its predecessors. DecLock's Fig. 3 saturates one memory-node NIC at 1.61 M
		 * CASLock acquisitions per second, each at least one CAS and one release atomic:
		 * ~3.3 M atomics/s, 300 ns. READ/WRITE: ~50 Mops of small verbs per NIC, between
		 * ConnectX-3's 35 and ConnectX-6's 100: 20 ns. Messages: ~25 M/s per NIC, 40 ns.
		 * The READ and message rates are judgement calls; the atomic rate is DecLock's.
		 */
		.name = "cx4",
		.rtt_ns = 2000,
		.svc_ns = { 20, 20, 300 },
		.msg_svc_ns = 40,
		.summary = "ConnectX-4: 2 us RTT, 50 Mops READ/WRITE, 3.3 Mops atomics per MN, 25 M msg/s per CN",
	},
	{
		/*
		 * ConnectX-5, 100 Gb InfiniBand (CREST's testbed; Motor's is close). Small READ RTT
		 * ~1.8 us through a switch. Between cx4 and cx6 in every rate: ~65 Mops READ/WRITE
		 * (15 ns), ~6.7 Mops atomics on host memory (150 ns), ~33 M msg/s (30 ns). Judgement
		 * calls: CREST's bottleneck is contention on hot rows, not a NIC rate.
		 */
		.name = "cx5",
		.rtt_ns = 1800,
		.svc_ns = { 15, 15, 150 },
		.msg_svc_ns = 30,
		.summary = "ConnectX-5: 1.8 us RTT, 65 Mops READ/WRITE, 6.7 Mops atomics per MN, 33 M msg/s per CN",
	},
	{
		/*
		 * ConnectX-6, 100-200 Gb InfiniBand (OOCC, Pandora testbeds; Motor/CREST use the
		 * close ConnectX-5). Small READ RTT ~1.5 us back to back plus switch: 1.6 us.
		 * Message rate is ~200 M msg/s per adapter by the data sheet; READs of tens of
		 * bytes reach ~100 Mops in perftest with many QPs: 10 ns. Atomics: ~50-70 Mops on
		 * distinct addresses, but a few Mops when they hit one word (the NIC serializes
		 * them); lock traffic of OCC protocols mixes both, so we take 10 Mops: 100 ns.
		 * This atomics number is a judgement call; results under cx6 say so by label.
		 */
		.name = "cx6",
		.rtt_ns = 1600,
		.svc_ns = { 10, 10, 100 },
		/* Small SENDs: ~50 M messages/s per NIC (a judgement call below the data sheet's
		 * 200 M, since one side posts them all): 20 ns. */
		.msg_svc_ns = 20,
		.summary = "ConnectX-6: 1.6 us RTT, 100 Mops READ/WRITE, 10 Mops atomics per MN, 50 M msg/s per CN",
	},
};

const struct rt_cost_profile *rt_cost_profile_find(const char *name)
{
	for (unsigned i = 0; i < sizeof(profiles) / sizeof(profiles[0]); i++)
		if (strcmp(profiles[i].name, name) == 0)
			return &profiles[i];
	return NULL;
}

const struct rt_cost_profile *rt_cost_profiles(unsigned *n)
{
	*n = sizeof(profiles) / sizeof(profiles[0]);
	return profiles;
}
