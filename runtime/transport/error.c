/* SPDX-License-Identifier: MIT */
/* Error names and messages: remora_strerror(), the transport's message, remora_last_error(). */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "core.h"

static const char *const project_names[REMORA_ELAST - REMORA_EBASE] = {
	[REMORA_EABORT - REMORA_EBASE] = "transaction aborted",
	[REMORA_EFENCED - REMORA_EBASE] = "compute node fenced",
	[REMORA_EBADKEY - REMORA_EBASE] = "key does not name a registered region",
	[REMORA_EBOUNDS - REMORA_EBASE] = "access outside the registered region",
	[REMORA_EALIGN - REMORA_EBASE] = "atomic verb not 8-byte aligned",
	[REMORA_ENOBACKEND - REMORA_EBASE] = "backend unknown or not built in",
	[REMORA_ELAYOUT - REMORA_EBASE] = "pool has another magic or layout version",
	[REMORA_ECONFIG - REMORA_EBASE] = "invalid configuration value",
	[REMORA_ENODE - REMORA_EBASE] = "node unknown or not attached",
	[REMORA_EPOISONED - REMORA_EBASE] = "transaction poisoned: only abort is allowed",
	[REMORA_ENOTFOUND - REMORA_EBASE] = "key not found",
	[REMORA_EEXIST - REMORA_EBASE] = "key already exists",
	[REMORA_EFULL - REMORA_EBASE] = "structure full",
	[REMORA_EPROTO - REMORA_EBASE] = "malformed message or reply",
};

REMORA_API const char *remora_strerror(int code)
{
	static __thread char buf[64];

	if (code == 0)
		return "success";
	if (code == REMORA_INPROGRESS)
		return "in progress";
	if (code < 0 && -code >= REMORA_EBASE && -code < REMORA_ELAST)
		return project_names[-code - REMORA_EBASE];
	if (code < 0 && -code < REMORA_EBASE) {
		/* strerrordesc_np is static, thread-safe and needs no buffer (glibc >= 2.32). */
		const char *s = strerrordesc_np(-code);

		if (s)
			return s;
	}
	snprintf(buf, sizeof(buf), "unknown code %d", code);
	return buf;
}

static __thread char last_error[256];

REMORA_API const char *remora_last_error(void)
{
	return last_error;
}

int rt_last_error(int code, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(last_error, sizeof(last_error), fmt, ap);
	va_end(ap);
	return code;
}

static int vset_error(struct remora_transport *tp, int code, const char *fmt, va_list ap)
{
	pthread_mutex_lock(&tp->lock);
	vsnprintf(tp->errmsg, sizeof(tp->errmsg), fmt, ap);
	pthread_mutex_unlock(&tp->lock);
	return code;
}

int rt_error(struct remora_transport *tp, int code, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vset_error(tp, code, fmt, ap);
	va_end(ap);
	return code;
}

REMORA_API int remora_backend_error(struct remora_transport *tp, int code, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vset_error(tp, code, fmt, ap);
	va_end(ap);
	return code;
}

REMORA_API const char *remora_transport_errmsg(const struct remora_transport *tp)
{
	return tp->errmsg;
}
