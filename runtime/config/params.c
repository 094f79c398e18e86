/* SPDX-License-Identifier: MIT */
/*
 * The parameter table and its sources (default < config file < environment < flag).
 * The INI syntax is parsed by inih; this file adds line numbers, types, precedence and
 * one-line errors that name their source.
 */
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <ini.h>

#include <remora/params.h>
#include <remora/transport.h>

#include "config/env.h"

#define WHERE_MAX 160

static const struct remora_param_def param_defs[] = {
#define PARAM_DEF_(id, name, type, def, allowed, help) \
	{ name, REMORA_PT_##type, def, allowed, help },
	REMORA_PARAM_TABLE(PARAM_DEF_)
#undef PARAM_DEF_
};
_Static_assert(sizeof(param_defs) / sizeof(param_defs[0]) == REMORA_P__COUNT,
	       "one definition per parameter id");

struct param_val {
	char *str; /* as given, trimmed; owned */
	int64_t num;
	enum remora_param_src src;
	char where[2 * WHERE_MAX];  /* for error messages: "--threads", "REMORA_X", "f.ini:3" */
	char origin[2 * WHERE_MAX]; /* for people: "flag --threads", "env REMORA_X", "f.ini:3" */
};

struct node_slot {
	bool defined;
	struct remora_node_addr addr;
	char where[WHERE_MAX]; /* "f.ini:7", the section's line */
	unsigned host_line, port_line;
};

struct remora_params {
	struct param_val v[REMORA_P__COUNT];
	struct node_slot mn[REMORA_MAX_MN];
	struct node_slot cn[REMORA_MAX_CN];
	struct remora_node_addr mn_addrs[REMORA_MAX_MN];
	unsigned n_mn_addrs;
	struct remora_kv backend_kv[REMORA_P__COUNT]; /* remora_params_backend(), kept by assign() */
	uint32_t n_backend_kv;
	bool file_loaded;
	char file[WHERE_MAX];
	char errmsg[384];
};

static int fail(struct remora_params *p, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static int fail(struct remora_params *p, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(p->errmsg, sizeof(p->errmsg), fmt, ap);
	va_end(ap);
	return -REMORA_ECONFIG;
}

/* ---- table lookups ---------------------------------------------------------------------- */

const struct remora_param_def *remora_param_def(enum remora_param_id id)
{
	if ((unsigned)id >= REMORA_P__COUNT)
		return NULL;
	return &param_defs[id];
}

const char *remora_param_type_name(enum remora_param_type t)
{
	switch (t) {
	case REMORA_PT_STR:
		return "string";
	case REMORA_PT_INT:
		return "int";
	case REMORA_PT_SIZE:
		return "size";
	case REMORA_PT_BOOL:
		return "bool";
	case REMORA_PT_ENUM:
		return "enum";
	}
	return "?";
}

/* Compares a user-written name with a table name; '-' and '_' match each other. */
static bool name_eq(const char *user, size_t ulen, const char *name)
{
	size_t i;

	for (i = 0; i < ulen; i++) {
		char c = user[i] == '-' ? '_' : (char)tolower((unsigned char)user[i]);

		if (name[i] == '\0' || c != name[i])
			return false;
	}
	return name[i] == '\0';
}

static int find_n(const char *name, size_t len)
{
	for (unsigned i = 0; i < REMORA_P__COUNT; i++)
		if (name_eq(name, len, param_defs[i].name))
			return (int)i;
	return -REMORA_ENOTFOUND;
}

int remora_param_find(const char *name)
{
	return find_n(name, strlen(name));
}

/* Levenshtein distance of two short names (case-insensitive, '-' == '_'), capped at 9. */
static unsigned edit_distance(const char *a, const char *b)
{
	size_t la = strlen(a), lb = strlen(b);
	unsigned row[64], prev_diag;

	if (la >= 63 || lb >= 63)
		return 9;
	for (size_t j = 0; j <= lb; j++)
		row[j] = (unsigned)j;
	for (size_t i = 1; i <= la; i++) {
		char ca = a[i - 1] == '-' ? '_' : (char)tolower((unsigned char)a[i - 1]);

		prev_diag = row[0];
		row[0] = (unsigned)i;
		for (size_t j = 1; j <= lb; j++) {
			char cb = b[j - 1] == '-' ? '_' : (char)tolower((unsigned char)b[j - 1]);
			unsigned best = prev_diag + (ca == cb ? 0 : 1);

			if (row[j] + 1 < best)
				best = row[j] + 1;
			if (row[j - 1] + 1 < best)
				best = row[j - 1] + 1;
			prev_diag = row[j];
			row[j] = best;
		}
	}
	return row[lb] > 9 ? 9 : row[lb];
}

/* The parameter a misspelt name most likely meant, or NULL when none is close. */
static const char *did_you_mean(const char *name)
{
	const char *best = NULL;
	unsigned best_d = 99;

	for (unsigned i = 0; i < REMORA_P__COUNT; i++) {
		const char *cand = param_defs[i].name;
		unsigned d = edit_distance(name, cand);
		unsigned limit = strlen(cand) > 4 ? 2 : 1;

		if (d <= limit && d < best_d) {
			best = cand;
			best_d = d;
		}
	}
	return best;
}

/* ---- value parsing ---------------------------------------------------------------------- */

static bool parse_i64(const char *s, int64_t *out)
{
	char *end;
	long long v;

	if (*s == '\0')
		return false;
	errno = 0;
	v = strtoll(s, &end, 10);
	if (errno || *end != '\0')
		return false;
	*out = v;
	return true;
}

/* "64M", "4k", "1GiB", "4096": bytes, powers of 1024. */
static bool parse_size(const char *s, int64_t *out)
{
	char *end;
	unsigned long long v;
	unsigned shift = 0;

	if (!isdigit((unsigned char)*s))
		return false;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno)
		return false;
	switch (toupper((unsigned char)*end)) {
	case '\0':
		break;
	case 'K':
		shift = 10;
		break;
	case 'M':
		shift = 20;
		break;
	case 'G':
		shift = 30;
		break;
	case 'T':
		shift = 40;
		break;
	default:
		return false;
	}
	if (*end) {
		end++;
		if (toupper((unsigned char)*end) == 'I' && toupper((unsigned char)end[1]) == 'B')
			end += 2;
		else if (toupper((unsigned char)*end) == 'B')
			end++;
	}
	if (*end != '\0')
		return false;
	if (v > (unsigned long long)(INT64_MAX >> shift))
		return false;
	*out = (int64_t)(v << shift);
	return true;
}

static bool parse_bool(const char *s, int64_t *out)
{
	static const char *const yes[] = { "true", "yes", "on", "1", NULL };
	static const char *const no[] = { "false", "no", "off", "0", NULL };

	for (unsigned i = 0; yes[i]; i++) {
		if (strcasecmp(s, yes[i]) == 0) {
			*out = 1;
			return true;
		}
		if (strcasecmp(s, no[i]) == 0) {
			*out = 0;
			return true;
		}
	}
	return false;
}

/* Index of s among "a|b|c", or -1. */
static int enum_index(const char *allowed, const char *s)
{
	size_t len = strlen(s);
	int idx = 0;

	for (const char *a = allowed; *a; idx++) {
		const char *bar = strchr(a, '|');
		size_t alen = bar ? (size_t)(bar - a) : strlen(a);

		if (alen == len && strncasecmp(a, s, len) == 0)
			return idx;
		if (!bar)
			break;
		a = bar + 1;
	}
	return -1;
}

/* Bounds of "min..max" (a side may be empty). */
static void range_of(const struct remora_param_def *d, int64_t *lo, int64_t *hi)
{
	const char *dots;

	*lo = INT64_MIN;
	*hi = INT64_MAX;
	if (!d->allowed)
		return;
	dots = strstr(d->allowed, "..");
	if (!dots)
		return;
	if (dots != d->allowed) {
		char buf[32];
		size_t n = (size_t)(dots - d->allowed);

		if (n >= sizeof(buf))
			n = sizeof(buf) - 1;
		memcpy(buf, d->allowed, n);
		buf[n] = '\0';
		if (!(d->type == REMORA_PT_SIZE ? parse_size(buf, lo) : parse_i64(buf, lo)))
			*lo = INT64_MIN;
	}
	if (dots[2] &&
	    !(d->type == REMORA_PT_SIZE ? parse_size(dots + 2, hi) : parse_i64(dots + 2, hi)))
		*hi = INT64_MAX;
}

/* "host:port" -> addr; port must be 1..65535. */
static bool parse_hostport(const char *s, size_t len, struct remora_node_addr *a)
{
	const char *colon = memrchr(s, ':', len);
	char port[8];
	int64_t v;
	size_t hlen, plen;

	if (!colon)
		return false;
	hlen = (size_t)(colon - s);
	plen = len - hlen - 1;
	if (hlen == 0 || hlen >= sizeof(a->host) || plen == 0 || plen >= sizeof(port))
		return false;
	memcpy(port, colon + 1, plen);
	port[plen] = '\0';
	if (!parse_i64(port, &v) || v < 1 || v > 65535)
		return false;
	memcpy(a->host, s, hlen);
	a->host[hlen] = '\0';
	a->port = (uint16_t)v;
	return true;
}

static int parse_mn_addrs(struct remora_params *p, const char *s, const char *prefix)
{
	struct remora_node_addr addrs[REMORA_MAX_MN];
	unsigned n = 0;

	while (*s) {
		const char *comma = strchr(s, ',');
		size_t len = comma ? (size_t)(comma - s) : strlen(s);

		if (n == REMORA_MAX_MN)
			return fail(p, "%smore than %d memory nodes", prefix, REMORA_MAX_MN);
		if (!parse_hostport(s, len, &addrs[n]))
			return fail(p, "%s'%.*s' is not host:port (port 1..65535)", prefix,
				    (int)len, s);
		n++;
		s += len;
		if (*s == ',')
			s++;
	}
	memcpy(p->mn_addrs, addrs, sizeof(addrs[0]) * n);
	p->n_mn_addrs = n;
	return 0;
}

/* Checks text against d's type and bounds; *num gets the parsed value. */
static int parse_value(struct remora_params *p, const struct remora_param_def *d, const char *val,
		       const char *prefix, int64_t *num)
{
	int64_t lo, hi;

	*num = 0;
	switch (d->type) {
	case REMORA_PT_STR:
		return 0;
	case REMORA_PT_BOOL:
		if (!parse_bool(val, num))
			return fail(p, "%s'%s' is not a boolean (true/false, yes/no, on/off, 1/0)",
				    prefix, val);
		return 0;
	case REMORA_PT_ENUM: {
		int idx = enum_index(d->allowed, val);

		if (idx < 0)
			return fail(p, "%s'%s' is not one of %s", prefix, val, d->allowed);
		*num = idx;
		return 0;
	}
	case REMORA_PT_INT:
		if (!parse_i64(val, num))
			return fail(p, "%s'%s' is not an integer", prefix, val);
		break;
	case REMORA_PT_SIZE:
		if (!parse_size(val, num))
			return fail(p, "%s'%s' is not a size (bytes, or with K/M/G/T: 64M, 1G)",
				    prefix, val);
		break;
	}
	range_of(d, &lo, &hi);
	if (*num < lo || *num > hi)
		return fail(p, "%s'%s' is out of range %s", prefix, val, d->allowed);
	return 0;
}

/* ---- the set of values ------------------------------------------------------------------ */

static bool is_backend_param(const char *name)
{
	for (const char *const *b = remora_backend_names(); *b; b++)
		for (const char *const *n = remora_backend_params(*b); n && *n; n++)
			if (strcmp(*n, name) == 0)
				return true;
	return false;
}

/* Rebuilds the list remora_params_backend() returns: values changed, or pointers moved. */
static void sync_backend_kv(struct remora_params *p)
{
	p->n_backend_kv = 0;
	for (unsigned i = 0; i < REMORA_P__COUNT; i++)
		if (p->v[i].str && *p->v[i].str && is_backend_param(param_defs[i].name))
			p->backend_kv[p->n_backend_kv++] =
				(struct remora_kv){ param_defs[i].name, p->v[i].str };
}

const struct remora_kv *remora_params_backend(const struct remora_params *p, uint32_t *n)
{
	*n = p->n_backend_kv;
	return p->backend_kv;
}

static int assign(struct remora_params *p, enum remora_param_id id, const char *val, int64_t num,
		  enum remora_param_src src, const char *where, const char *origin)
{
	struct param_val *v = &p->v[id];
	char *copy = strdup(val);

	if (!copy)
		return -ENOMEM;
	free(v->str);
	v->str = copy;
	v->num = num;
	v->src = src;
	snprintf(v->where, sizeof(v->where), "%s", where);
	snprintf(v->origin, sizeof(v->origin), "%s", origin);
	sync_backend_kv(p);
	return 0;
}

int remora_params_create(struct remora_params **out)
{
	struct remora_params *p = calloc(1, sizeof(*p));
	int err;

	if (!p)
		return -ENOMEM;
	for (unsigned i = 0; i < REMORA_P__COUNT; i++) {
		int64_t num;

		/* A default that does not parse is a table bug; the table test catches it. */
		parse_value(p, &param_defs[i], param_defs[i].def, "", &num);
		err = assign(p, (enum remora_param_id)i, param_defs[i].def, num, REMORA_SRC_DEFAULT,
			     "default", "default");
		if (err) {
			remora_params_destroy(p);
			return err;
		}
	}
	p->errmsg[0] = '\0';
	*out = p;
	return 0;
}

void remora_params_destroy(struct remora_params *p)
{
	if (!p)
		return;
	for (unsigned i = 0; i < REMORA_P__COUNT; i++)
		free(p->v[i].str);
	free(p);
}

static const char *origin_prefix(enum remora_param_src src)
{
	switch (src) {
	case REMORA_SRC_ENV:
		return "env ";
	case REMORA_SRC_FLAG:
		return "flag ";
	default:
		return "";
	}
}

static int set_id(struct remora_params *p, enum remora_param_id id, const char *value,
		  enum remora_param_src src, const char *where)
{
	const struct remora_param_def *d = &param_defs[id];
	char prefix[WHERE_MAX + 40], origin[WHERE_MAX + 8];
	int64_t num;
	int err;

	/* A file line does not name its key; env variables and flags do. */
	if (src == REMORA_SRC_FILE)
		snprintf(prefix, sizeof(prefix), "%s: %s: ", where, d->name);
	else
		snprintf(prefix, sizeof(prefix), "%s: ", where);
	err = parse_value(p, d, value, prefix, &num);
	if (err)
		return err;
	if (src < p->v[id].src)
		return 0;
	if (id == REMORA_P_MN_ADDRS) {
		err = parse_mn_addrs(p, value, prefix);
		if (err)
			return err;
	}
	snprintf(origin, sizeof(origin), "%s%s", origin_prefix(src), where);
	return assign(p, id, value, num, src, where, origin);
}

int remora_params_set(struct remora_params *p, const char *name, const char *value,
		      enum remora_param_src src, const char *where)
{
	int id = remora_param_find(name);

	if (id < 0) {
		const char *guess = did_you_mean(name);

		if (guess)
			fail(p, "%s: unknown parameter '%s' (did you mean '%s'?)", where, name,
			     guess);
		else
			fail(p, "%s: unknown parameter '%s'", where, name);
		return -REMORA_ENOTFOUND;
	}
	return set_id(p, (enum remora_param_id)id, value, src, where);
}

const char *remora_params_errmsg(const struct remora_params *p)
{
	return p->errmsg;
}

const char *remora_params_str(const struct remora_params *p, enum remora_param_id id)
{
	return (unsigned)id < REMORA_P__COUNT ? p->v[id].str : "";
}

int64_t remora_params_int(const struct remora_params *p, enum remora_param_id id)
{
	return (unsigned)id < REMORA_P__COUNT ? p->v[id].num : 0;
}

uint64_t remora_params_size(const struct remora_params *p, enum remora_param_id id)
{
	int64_t v = remora_params_int(p, id);

	return v < 0 ? 0 : (uint64_t)v;
}

bool remora_params_bool(const struct remora_params *p, enum remora_param_id id)
{
	return remora_params_int(p, id) != 0;
}

enum remora_param_src remora_params_src(const struct remora_params *p, enum remora_param_id id)
{
	return (unsigned)id < REMORA_P__COUNT ? p->v[id].src : REMORA_SRC_DEFAULT;
}

const char *remora_params_origin(const struct remora_params *p, enum remora_param_id id)
{
	return (unsigned)id < REMORA_P__COUNT ? p->v[id].origin : "";
}

/* ---- environment ------------------------------------------------------------------------ */

int remora_params_load_env(struct remora_params *p, char *const *envp)
{
	extern char **environ;

	if (!envp)
		envp = environ;
	for (; *envp; envp++) {
		const char *e = *envp, *eq = strchr(e, '='), *suffix = e + 7;
		char var[WHERE_MAX], name[WHERE_MAX];
		size_t len;
		int id, err;

		if (strncmp(e, "REMORA_", 7) != 0 || !eq)
			continue;
		len = (size_t)(eq - suffix);
		if (len == 0 || len >= sizeof(name) - 1 || cfg_knob_is(suffix, len))
			continue;
		snprintf(var, sizeof(var), "%.*s", (int)(eq - e), e);
		for (size_t i = 0; i < len; i++)
			name[i] = (char)tolower((unsigned char)suffix[i]);
		name[len] = '\0';
		id = remora_param_find(name);
		if (id < 0) {
			const char *guess = did_you_mean(name);
			char up[WHERE_MAX];
			size_t i;

			if (!guess)
				continue; /* another module's variable */
			for (i = 0; guess[i] && i < sizeof(up) - 1; i++)
				up[i] = (char)toupper((unsigned char)guess[i]);
			up[i] = '\0';
			return fail(p, "%s: unknown parameter (did you mean REMORA_%s?)", var, up);
		}
		err = set_id(p, (enum remora_param_id)id, eq + 1, REMORA_SRC_ENV, var);
		if (err)
			return err;
	}
	return 0;
}

/* ---- command-line flags ----------------------------------------------------------------- */

int remora_params_parse_flag(struct remora_params *p, int argc, char **argv, int *i)
{
	const char *arg = argv[*i], *name, *eq, *value;
	char where[WHERE_MAX];
	size_t len;
	bool negated = false;
	int id, err;

	if (strncmp(arg, "--", 2) != 0)
		return 0;
	name = arg + 2;
	eq = strchr(name, '=');
	len = eq ? (size_t)(eq - name) : strlen(name);
	id = find_n(name, len);
	if (id < 0 && len > 3 && strncmp(name, "no-", 3) == 0) {
		id = find_n(name + 3, len - 3);
		if (id < 0 || param_defs[id].type != REMORA_PT_BOOL)
			return 0;
		negated = true;
	}
	if (id < 0)
		return 0;
	snprintf(where, sizeof(where), "--%.*s", (int)len, name);
	if (negated) {
		if (eq)
			return fail(p, "%s takes no value", where);
		value = "false";
	} else if (eq) {
		value = eq + 1;
	} else if (param_defs[id].type == REMORA_PT_BOOL) {
		value = "true";
	} else if (*i + 1 < argc) {
		value = argv[*i + 1];
		(*i)++;
	} else {
		return fail(p, "%s: missing value", where);
	}
	err = set_id(p, (enum remora_param_id)id, value, REMORA_SRC_FLAG, where);
	if (err)
		return err;
	(*i)++;
	return 1;
}

/* ---- config file ------------------------------------------------------------------------ */

struct ini_state {
	struct remora_params *p;
	FILE *f;
	const char *path;
	char *line;
	size_t cap;
	unsigned lineno;      /* line being parsed */
	unsigned err_line;    /* first line an error was reported for, 0: none */
	int err;
	unsigned key_line[REMORA_P__COUNT];
};

static bool node_section(const char *section, char *role, unsigned *id);
static void ini_failf(struct ini_state *st, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* Marks node role.id as named by the file, at the current line. */
static struct node_slot *define_node(struct ini_state *st, char role, unsigned id)
{
	struct node_slot *n = role == 'm' ? &st->p->mn[id] : &st->p->cn[id];

	if (!n->defined) {
		n->defined = true;
		snprintf(n->addr.host, sizeof(n->addr.host), "127.0.0.1");
		snprintf(n->where, sizeof(n->where), "%s:%u", st->path, st->lineno);
	}
	return n;
}

/*
 * Section headers are checked here, where every line passes: inih reports a section only
 * with its first key, so "[cn.1]" alone (a node with default settings) would go unseen.
 */
static void check_section_line(struct ini_state *st, const char *s)
{
	const char *end = strchr(s, ']');
	char name[64], role;
	unsigned id;

	if (!end || (size_t)(end - s - 1) >= sizeof(name))
		return; /* inih reports the syntax error */
	memcpy(name, s + 1, (size_t)(end - s - 1));
	name[end - s - 1] = '\0';
	if (node_section(name, &role, &id))
		define_node(st, role, id);
	else if (strcmp(name, "cluster") != 0)
		ini_failf(st, "unknown section [%s] (expected [cluster], [mn.N] or [cn.N], N < %d)",
			  name, strncmp(name, "cn.", 3) == 0 ? REMORA_MAX_CN : REMORA_MAX_MN);
}

/*
 * inih's reader: hands over one line at a time, with its leading blanks removed. Counting
 * lines here gives exact line numbers (inih's handler has none), and stripping indentation
 * turns off inih's "continuation line" rule, which would glue an indented "key = v" line
 * onto the previous value.
 */
static char *cfg_read_line(char *str, int num, void *stream)
{
	struct ini_state *st = stream;
	ssize_t n;
	char *s;

	if (st->err)
		return NULL;
	n = getline(&st->line, &st->cap, st->f);
	if (n < 0)
		return NULL;
	st->lineno++;
	if (memchr(st->line, '\0', (size_t)n)) { /* the rest of the line would be ignored */
		st->err = fail(st->p, "%s:%u: NUL byte in the line (not a text file?)", st->path,
			       st->lineno);
		st->err_line = st->lineno;
		return NULL;
	}
	s = st->line;
	while (*s == ' ' || *s == '\t')
		s++;
	if (strlen(s) > (size_t)num - 1) {
		st->err = fail(st->p, "%s:%u: line longer than %d characters", st->path, st->lineno,
			       num - 2);
		st->err_line = st->lineno;
		return NULL;
	}
	if (*s == '[')
		check_section_line(st, s);
	if (st->err)
		return NULL;
	strcpy(str, s);
	return str;
}

static void ini_fail(struct ini_state *st, int err)
{
	if (!st->err) {
		st->err = err;
		st->err_line = st->lineno;
	}
}

static void ini_failf(struct ini_state *st, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static void ini_failf(struct ini_state *st, const char *fmt, ...)
{
	char msg[300];
	va_list ap;

	if (st->err)
		return;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	ini_fail(st, fail(st->p, "%s:%u: %s", st->path, st->lineno, msg));
}

/* "mn.3" -> role 'm', id 3; false when the section is no node section. */
static bool node_section(const char *section, char *role, unsigned *id)
{
	int64_t v, max;

	if (strncmp(section, "mn.", 3) == 0) {
		*role = 'm';
		max = REMORA_MAX_MN;
	} else if (strncmp(section, "cn.", 3) == 0) {
		*role = 'c';
		max = REMORA_MAX_CN;
	} else {
		return false;
	}
	if (!parse_i64(section + 3, &v) || v < 0 || v >= max ||
	    !isdigit((unsigned char)section[3]))
		return false;
	*id = (unsigned)v;
	return true;
}

static void ini_node_key(struct ini_state *st, char role, unsigned id, const char *name,
			 const char *value)
{
	struct node_slot *n = define_node(st, role, id);
	const char *sect = role == 'm' ? "mn" : "cn";

	if (strcmp(name, "host") == 0) {
		if (n->host_line) {
			ini_failf(st, "duplicate key 'host' in [%s.%u] (first at line %u)", sect,
				  id, n->host_line);
			return;
		}
		if (!*value || strlen(value) >= sizeof(n->addr.host) || strpbrk(value, " \t:,")) {
			ini_failf(st, "host: '%s' is not a host name or IPv4 address", value);
			return;
		}
		snprintf(n->addr.host, sizeof(n->addr.host), "%s", value);
		n->host_line = st->lineno;
	} else if (strcmp(name, "port") == 0 && role == 'm') {
		int64_t v;

		if (n->port_line) {
			ini_failf(st, "duplicate key 'port' in [%s.%u] (first at line %u)", sect,
				  id, n->port_line);
			return;
		}
		if (!parse_i64(value, &v) || v < 0 || v > 65535) {
			ini_failf(st, "port: '%s' is not a port (0..65535)", value);
			return;
		}
		n->addr.port = (uint16_t)v;
		n->port_line = st->lineno;
	} else {
		ini_failf(st, "unknown key '%s' in [%s.%u] (expected %s)", name, sect, id,
			  role == 'm' ? "host, port" : "host");
	}
}

static int cfg_on_key(void *user, const char *section, const char *name, const char *value)
{
	struct ini_state *st = user;
	char role;
	unsigned id;
	int pid;

	if (st->err)
		return 0;
	if (node_section(section, &role, &id)) {
		ini_node_key(st, role, id, name, value);
		return !st->err;
	}
	if (*section && strcmp(section, "cluster") != 0) {
		ini_failf(st, "unknown section [%s] (expected [cluster], [mn.N] or [cn.N], N < %d)",
			  section, strncmp(section, "cn.", 3) == 0 ? REMORA_MAX_CN : REMORA_MAX_MN);
		return 0;
	}
	pid = remora_param_find(name);
	if (pid < 0) {
		const char *guess = did_you_mean(name);

		if (guess)
			ini_failf(st, "unknown key '%s' (did you mean '%s'?)", name, guess);
		else
			ini_failf(st, "unknown key '%s' (see remora info --params)", name);
		return 0;
	}
	if (st->key_line[pid]) {
		ini_failf(st, "duplicate key '%s' (first at line %u)", param_defs[pid].name,
			  st->key_line[pid]);
		return 0;
	}
	st->key_line[pid] = st->lineno;
	{
		char where[WHERE_MAX];

		snprintf(where, sizeof(where), "%s:%u", st->path, st->lineno);
		ini_fail(st, set_id(st->p, (enum remora_param_id)pid, value, REMORA_SRC_FILE,
				    where));
	}
	return !st->err;
}

int remora_params_load_file(struct remora_params *p, const char *path)
{
	struct ini_state st = { .p = p, .path = path };
	struct stat sb;
	int ret, e;

	if (p->file_loaded)
		return fail(p, "%s: only one config file may be given (already read %s)", path,
			    p->file);
	st.f = fopen(path, "r");
	if (!st.f) {
		e = errno;
		fail(p, "%s: %s", path, strerror(e));
		return -e;
	}
	/* a directory opens, and reads as an empty config */
	if (fstat(fileno(st.f), &sb) == 0 && !S_ISREG(sb.st_mode) && !S_ISFIFO(sb.st_mode) &&
	    !S_ISCHR(sb.st_mode)) {
		fclose(st.f);
		return fail(p, "%s: not a config file (%s)", path,
			    S_ISDIR(sb.st_mode) ? "a directory" : "not a regular file");
	}
	ret = ini_parse_stream(cfg_read_line, &st, cfg_on_key, &st);
	free(st.line);
	fclose(st.f);
	if (ret > 0 && (!st.err || (unsigned)ret < st.err_line))
		return fail(p, "%s:%d: syntax error (expected [section], key = value or a comment)",
			    path, ret);
	if (st.err)
		return st.err;
	if (ret < 0) {
		fail(p, "%s: out of memory", path);
		return -ENOMEM;
	}
	p->file_loaded = true;
	snprintf(p->file, sizeof(p->file), "%s", path);
	return 0;
}

/* ---- cross-checks and nodes ------------------------------------------------------------- */

/* Number of node sections; fails when [x.K] is given but some [x.J], J < K, is not. */
static int count_sections(struct remora_params *p, const struct node_slot *s, unsigned max,
			  const char *role, unsigned *count)
{
	unsigned n = 0;

	for (unsigned i = 0; i < max; i++)
		if (s[i].defined)
			n = i + 1;
	for (unsigned i = 0; i < n; i++)
		if (!s[i].defined)
			return fail(p, "%s: [%s.%u] is given but [%s.%u] is missing",
				    s[n - 1].where, role, n - 1, role, i);
	*count = n;
	return 0;
}

/* Sets a count derived from node lists, unless the user set it; then both must agree. */
static int derive_count(struct remora_params *p, enum remora_param_id id, unsigned n,
			const char *what, const char *origin)
{
	struct param_val *v = &p->v[id];
	char text[16];

	if (n == 0)
		return 0;
	if (v->src != REMORA_SRC_DEFAULT) {
		if (v->num != (int64_t)n)
			return fail(p, "%s: %s = %" PRId64 " but %s names %u %s", v->where,
				    param_defs[id].name, v->num, origin, n, what);
		return 0;
	}
	snprintf(text, sizeof(text), "%u", n);
	return assign(p, id, text, n, REMORA_SRC_FILE, origin, origin);
}

/*
 * Cluster names become file names (pools, segments): checked here, before anything starts,
 * with the transport's own rule (1-47 of [A-Za-z0-9_.-], not starting with '.').
 */
static int check_cluster_name(struct remora_params *p)
{
	const struct param_val *v = &p->v[REMORA_P_CLUSTER];
	const char *s = v->str ? v->str : "";
	size_t n = strlen(s);
	bool ok = n > 0 && n < 48 && s[0] != '.';

	for (size_t i = 0; ok && i < n; i++)
		ok = (s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') ||
		     (s[i] >= '0' && s[i] <= '9') || s[i] == '_' || s[i] == '.' || s[i] == '-';
	if (ok)
		return 0;
	return fail(p, "%s: cluster name '%s'%s: use 1 to 47 of [A-Za-z0-9_.-], not starting "
		    "with '.'%s", v->origin, s, n >= 48 ? " is too long" : "",
		    (n && (s[0] == '"' || s[0] == '\'')) ? " (config values take no quotes)" : "");
}

int remora_params_check(struct remora_params *p)
{
	const struct param_val *hb = &p->v[REMORA_P_HEARTBEAT_MS];
	const struct param_val *lease = &p->v[REMORA_P_LEASE_MS];
	const struct param_val *rep = &p->v[REMORA_P_REPLICAS], *mn = &p->v[REMORA_P_MN];
	unsigned n_mn = 0, n_cn = 0;
	char origin[WHERE_MAX + 24];
	int err;

	err = check_cluster_name(p);
	if (!err)
		err = count_sections(p, p->mn, REMORA_MAX_MN, "mn", &n_mn);
	if (!err)
		err = count_sections(p, p->cn, REMORA_MAX_CN, "cn", &n_cn);
	if (err)
		return err;
	if (p->n_mn_addrs) {
		err = derive_count(p, REMORA_P_MN, p->n_mn_addrs, "memory nodes",
				   p->v[REMORA_P_MN_ADDRS].origin);
	} else {
		snprintf(origin, sizeof(origin), "%s ([mn.N] sections)", p->file);
		err = derive_count(p, REMORA_P_MN, n_mn, "memory nodes", origin);
	}
	if (err)
		return err;
	snprintf(origin, sizeof(origin), "%s ([cn.N] sections)", p->file);
	err = derive_count(p, REMORA_P_CN, n_cn, "compute nodes", origin);
	if (err)
		return err;
	if (lease->num < 2 * hb->num)
		return fail(p,
			    "%s: lease_ms = %" PRId64 " must be at least twice heartbeat_ms = "
			    "%" PRId64 " (%s)",
			    lease->origin, lease->num, hb->num, hb->origin);
	/* The default is 3 copies (f = 2 backups), as FORD and Pandora run, or one per node. */
	if (rep->src == REMORA_SRC_DEFAULT && rep->num > mn->num) {
		snprintf(origin, sizeof(origin), "%" PRId64, mn->num);
		err = assign(p, REMORA_P_REPLICAS, origin, mn->num, REMORA_SRC_DEFAULT, "default",
			     "default (at most mn)");
		if (err)
			return err;
	}
	if (rep->num > mn->num)
		return fail(p, "%s: replicas = %" PRId64 " exceeds mn = %" PRId64 " (%s)",
			    rep->origin, rep->num, mn->num, mn->origin);
	return 0;
}

unsigned remora_params_mn_count(const struct remora_params *p)
{
	return (unsigned)p->v[REMORA_P_MN].num;
}

unsigned remora_params_cn_count(const struct remora_params *p)
{
	return (unsigned)p->v[REMORA_P_CN].num;
}

bool remora_params_have_mn_addrs(const struct remora_params *p)
{
	return p->n_mn_addrs > 0 || p->mn[0].defined;
}

int remora_params_mn_addr(const struct remora_params *p, unsigned id,
			  struct remora_node_addr *out)
{
	if (id >= remora_params_mn_count(p) || id >= REMORA_MAX_MN)
		return -REMORA_ENODE;
	if (p->n_mn_addrs) {
		*out = p->mn_addrs[id];
	} else if (p->mn[id].defined) {
		*out = p->mn[id].addr;
	} else {
		memset(out, 0, sizeof(*out));
		snprintf(out->host, sizeof(out->host), "127.0.0.1");
	}
	return 0;
}

int remora_params_cn_addr(const struct remora_params *p, unsigned id,
			  struct remora_node_addr *out)
{
	if (id >= remora_params_cn_count(p) || id >= REMORA_MAX_CN)
		return -REMORA_ENODE;
	if (p->cn[id].defined) {
		*out = p->cn[id].addr;
	} else {
		memset(out, 0, sizeof(*out));
		snprintf(out->host, sizeof(out->host), "127.0.0.1");
	}
	return 0;
}

/* ---- documentation ---------------------------------------------------------------------- */

void remora_params_doc_table(FILE *f)
{
	fprintf(f, "| key | type | default | allowed | meaning |\n");
	fprintf(f, "|-----|------|---------|---------|---------|\n");
	for (unsigned i = 0; i < REMORA_P__COUNT; i++) {
		const struct remora_param_def *d = &param_defs[i];

		fprintf(f, "| `%s` | %s | %s%s%s | ", d->name, remora_param_type_name(d->type),
			*d->def ? "`" : "", *d->def ? d->def : "(empty)", *d->def ? "`" : "");
		if (d->type == REMORA_PT_BOOL)
			fputs("true, false", f);
		for (const char *a = d->allowed; a && *a; a++) {
			if (*a == '|')
				fputs(", ", f);
			else
				fputc(*a, f);
		}
		fputs(" | ", f);
		/* help texts say <cluster>: escaped, or markdown would take it for HTML */
		for (const char *h = d->help; *h; h++) {
			if (*h == '<')
				fputs("&lt;", f);
			else if (*h == '>')
				fputs("&gt;", f);
			else
				fputc(*h, f);
		}
		fputs(" |\n", f);
	}
}
