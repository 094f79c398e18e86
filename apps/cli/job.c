/* SPDX-License-Identifier: MIT */
/* The job registry and the result channel from a compute node to `remora run`. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "job.h"

/* Every job, one line each. */
const struct job *const job_table[] = {
	&job_smoke,
	&job_bench,
	NULL,
};

const struct job *job_find(const char *name)
{
	for (unsigned i = 0; job_table[i]; i++)
		if (strcmp(job_table[i]->name, name) == 0)
			return job_table[i];
	return NULL;
}

void job_names(char *buf, size_t len)
{
	size_t off = 0;

	buf[0] = '\0';
	for (unsigned i = 0; job_table[i] && off < len; i++) {
		int n = snprintf(buf + off, len - off, "%s%s", i ? ", " : "", job_table[i]->name);

		if (n < 0)
			break;
		off += (size_t)n;
	}
}

void job_list(FILE *f, const char *indent)
{
	for (unsigned i = 0; job_table[i]; i++)
		fprintf(f, "%s%-10s %s\n", indent, job_table[i]->name, job_table[i]->help);
}

void job_id_list(uint64_t ids, char *buf, size_t len)
{
	size_t off = 0;

	buf[0] = '\0';
	for (unsigned i = 0; i < 64 && off < len; i++) {
		int n;

		if (!(ids >> i & 1))
			continue;
		n = snprintf(buf + off, len - off, "%s%u", off ? ", " : "", i);
		if (n < 0)
			break;
		off += (size_t)n;
	}
}

static int write_all(int fd, const char *buf, size_t len)
{
	while (len) {
		ssize_t n = write(fd, buf, len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		buf += n;
		len -= (size_t)n;
	}
	return 0;
}

int job_emit(struct job_ctx *ctx, const char *fmt, ...)
{
	char *line = NULL, *framed;
	va_list ap;
	int n, rc;

	va_start(ap, fmt);
	n = vasprintf(&line, fmt, ap);
	va_end(ap);
	if (n < 0)
		return -ENOMEM;
	/* One result is one line: a newline inside would split it. */
	for (char *c = line; *c; c++)
		if (*c == '\n')
			*c = ' ';
	if (ctx->result_fd < 0) {
		rc = printf("%s\n", line) < 0 ? -EIO : 0;
		fflush(stdout);
		free(line);
		return rc;
	}
	n = asprintf(&framed, "result %s\n", line);
	free(line);
	if (n < 0)
		return -ENOMEM;
	rc = write_all(ctx->result_fd, framed, (size_t)n);
	free(framed);
	return rc;
}
