/* SPDX-License-Identifier: MIT */
/*
 * remora error convention (one rule everywhere, as in liburing):
 *   0            done
 *   1            in progress (REMORA_INPROGRESS)
 *   -errno       failure, with the usual errno meaning
 *   -REMORA_E*   project outcomes, all inside one reserved range
 * -EAGAIN always means back-pressure: yield and try again.
 */
#ifndef REMORA_ERROR_H
#define REMORA_ERROR_H

#ifdef __cplusplus
extern "C" {
#endif

#if defined(REMORA_BUILDING) && defined(__GNUC__)
#define REMORA_API __attribute__((visibility("default")))
#else
#define REMORA_API
#endif

#define REMORA_INPROGRESS 1

/* Project codes live in [REMORA_EBASE, REMORA_EBASE + 255]; callers see them negated. */
#define REMORA_EBASE 0x4000

enum remora_errc {
	REMORA_EABORT = REMORA_EBASE, /* transaction aborted: a normal outcome, retry it */
	REMORA_EFENCED,               /* this compute node was fenced: its verbs have no effect */
	REMORA_EBADKEY,               /* remote key does not name a region registered on the node */
	REMORA_EBOUNDS,               /* remote access outside the registered region */
	REMORA_EALIGN,                /* atomic verb on an address that is not 8-byte aligned */
	REMORA_ENOBACKEND,            /* backend name unknown or not built in */
	REMORA_ELAYOUT,               /* pool has another magic or layout version */
	REMORA_ECONFIG,               /* configuration, flag or environment value is invalid */
	REMORA_ENODE,                 /* node id unknown or not attached */
	REMORA_EPOISONED,             /* transaction hit an internal error; only abort is allowed */
	REMORA_ENOTFOUND,             /* key not present */
	REMORA_EEXIST,                /* key already present */
	REMORA_EFULL,                 /* a fixed-size structure (bucket, log, pool) is full */
	REMORA_EPROTO,                /* malformed message or control-plane reply */
	REMORA_ELAST
};

/* Returns a static, human-readable name for any remora return code (0, 1, -errno or -REMORA_E*). */
REMORA_API const char *remora_strerror(int code);

#ifdef __cplusplus
}
#endif
#endif
