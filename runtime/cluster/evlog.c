/* SPDX-License-Identifier: MIT */
#include "cluster/evlog.h"

#include <stdarg.h>

void evlog(FILE *out, const char *role, unsigned id, const char *fmt, ...)
{
	char line[384];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	fprintf(out, "remora %s %u: %s\n", role, id, line);
	fflush(out);
}
