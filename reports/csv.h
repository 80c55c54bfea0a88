/*
 * reports/csv.h: RFC 4180 CSV into a growing buffer.
 *
 * Fields holding a comma, a quote or a line break are quoted, quotes doubled;
 * rows end in CRLF. On out of memory the buffer is dropped and oom set.
 */
#ifndef REPORTS_CSV_H
#define REPORTS_CSV_H

#include <stdbool.h>
#include <stddef.h>

struct csv {
	char *buf; /* NUL-terminated; the caller frees (or takes) it */
	size_t len, cap;
	bool oom;
};

/* Appends one field; last ends the row. */
void csv_field(struct csv *c, const char *s, bool last);

/* Appends a whole row of n fields. */
void csv_row(struct csv *c, const char *const *fields, size_t n);

#endif
