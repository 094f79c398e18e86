/* SPDX-License-Identifier: MIT */
/* OOCC recovery after a whole-cluster crash: redo logs (docs/oocc.md, "Recovery"). */
#include <errno.h>
#include <stdio.h>

#include "oocc.h"

int oocc_recover_cluster(const struct remora_store *st, struct remora_chan *ch, uint32_t flags,
			 struct remora_recovery_report *rep, char *err, size_t errlen)
{
	(void)st, (void)ch, (void)flags, (void)rep;
	snprintf(err, errlen, "oocc: recovery is not built yet");
	return -REMORA_ECONFIG;
}
