/*
 * reports/csv.h: RFC 4180 CSV into a growing buffer.
 *
 * Fields holding a comma, a quote or a line break are quoted, quotes doubled;
 * rows end in CRLF. On out of memory the buffer is dropped and oom set.
 *
 * A field a spreadsheet would take for a formula (one that starts with = + -
 * @, a tab or a carriage return, OWASP's rule) is written quoted after a
 * single quote, so that a name someone chose (a price plan's, a sandbox's)
 * is shown as text, never run: "=HYPERLINK(...)" becomes "'=HYPERLINK(...)".
 * A decimal number is written as it is ("-0.25", an adjustment): no
 * spreadsheet runs it, and programs read it as the number it is.
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

/* A field that would be neutralised: it starts like a formula and is no number. */
bool csv_formula(const char *s);

/* Appends one field; last ends the row. */
void csv_field(struct csv *c, const char *s, bool last);

/* Appends a whole row of n fields. */
void csv_row(struct csv *c, const char *const *fields, size_t n);

#endif
