/*
 * tests/support/csvread.h: reading the CSV meter writes (RFC 4180: fields with a
 * comma or a quote are quoted, a quote in them doubled), for tests.
 */
#ifndef TESTS_SUPPORT_CSV_H
#define TESTS_SUPPORT_CSV_H

#include <stdint.h>

/* Splits one row in place into at most max fields (pointers into line): how many. */
int csv_fields(char *line, char **f, int max);

/* "12.5", "-0.000000001": the value x 10^9, exactly; 0 when it is not a decimal of at
 * most 9 places, else 1. */
int csv_nano(const char *s, int64_t *out);

/*
 * Sums the FOCUS export csv's column BilledCost (and, when period is not NULL, only of
 * rows whose ChargePeriodStart begins with it) into *total; how many rows it summed, or
 * -1 when a row is not one of 19 fields with a decimal cost. csv is not changed.
 */
int csv_focus_billed(const char *csv, const char *period, int64_t *total);

#endif
