/* SPDX-License-Identifier: MIT */
/* NUMA binding of pool memory: a core service for backends (backend.h). */
#include <errno.h>

#include <remora/backend.h>

#include "remora_config.h"

#if REMORA_HAVE_NUMA
#include <numa.h>
#endif

REMORA_API int remora_backend_bind_numa(struct remora_transport *tp, int numa_node, void *p,
					size_t len)
{
	if (numa_node < 0)
		return 0;
#if REMORA_HAVE_NUMA
	if (numa_available() < 0 || numa_node > numa_max_node())
		return remora_backend_error(tp, -REMORA_ECONFIG,
					    "NUMA node %d not available on this host", numa_node);
	numa_tonode_memory(p, len, numa_node);
	return 0;
#else
	(void)p, (void)len;
	return remora_backend_error(tp, -REMORA_ECONFIG,
				    "NUMA binding requested but remora was built without libnuma");
#endif
}
