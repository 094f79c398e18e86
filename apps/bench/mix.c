// SPDX-License-Identifier: MIT
#include "mix.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static void list_names(const char *const *names, unsigned n, char *buf, size_t len)
{
	buf[0] = '\0';
	for (unsigned i = 0; i < n; i++) {
		if (i)
			strncat(buf, ", ", len - strlen(buf) - 1);
		strncat(buf, names[i], len - strlen(buf) - 1);
	}
}

/* One "Name=pct" or "pct" item of length len; *type is the named type or -1. */
static int parse_item(struct wl *wl, const char *knob, const char *s, size_t len,
		      const char *const *names, unsigned n, int *type, unsigned *pct)
{
	const char *sep = memchr(s, '=', len);
	const char *num = s;
	char *end;
	unsigned long v;

	if (!sep)
		sep = memchr(s, ':', len);
	*type = -1;
	if (sep) {
		size_t nlen = (size_t)(sep - s);
		char list[256];

		for (unsigned i = 0; i < n; i++)
			if (strlen(names[i]) == nlen && strncasecmp(names[i], s, nlen) == 0)
				*type = (int)i;
		if (*type < 0) {
			list_names(names, n, list, sizeof(list));
			return wl_fail(wl, "--%s: unknown transaction '%.*s' (%s has %s)", knob,
				       (int)nlen, s, wl->desc->name, list);
		}
		num = sep + 1;
	}
	if (num == s + len || !isdigit((unsigned char)*num))
		return wl_fail(wl, "--%s: '%.*s' is not a percentage", knob, (int)len, s);
	v = strtoul(num, &end, 10);
	if (end != s + len || v > 100)
		return wl_fail(wl, "--%s: '%.*s' is not a percentage (0..100)", knob, (int)len, s);
	*pct = (unsigned)v;
	return 0;
}

int wl_mix_parse(struct wl *wl, const char *knob, const char *const *names, unsigned n,
		 unsigned *cum)
{
	const char *s = wl_knob_str(wl, knob);
	unsigned pct[WL_MAX_TYPES] = { 0 }, total = 0, items = 0;
	bool named = false, positional = false, seen[WL_MAX_TYPES] = { false };

	if (!s || !*s)
		return wl_fail(wl, "--%s: empty mix", knob);
	for (const char *at = s;; items++) {
		size_t len = strcspn(at, ",");
		unsigned v = 0;
		int type, rc;

		rc = parse_item(wl, knob, at, len, names, n, &type, &v);
		if (rc)
			return rc;
		if (type < 0) {
			positional = true;
			type = (int)items;
			if (items >= n)
				return wl_fail(wl, "--%s: more than %u percentages (%s has %u "
					       "transactions)", knob, n, wl->desc->name, n);
		} else {
			named = true;
		}
		if (named && positional)
			return wl_fail(wl, "--%s: give either %u percentages or Name=percent "
				       "items, not both", knob, n);
		if (seen[type])
			return wl_fail(wl, "--%s: %s is given twice", knob, names[type]);
		seen[type] = true;
		pct[type] = v;
		total += v;
		if (at[len] == '\0')
			break;
		at += len + 1;
	}
	if (positional && items + 1 != n)
		return wl_fail(wl, "--%s: %u percentages given, %s has %u transactions", knob,
			       items + 1, wl->desc->name, n);
	if (total != 100)
		return wl_fail(wl, "--%s: percentages sum to %u, not 100", knob, total);
	total = 0;
	for (unsigned i = 0; i < n; i++) {
		total += pct[i];
		cum[i] = total;
	}
	return 0;
}
