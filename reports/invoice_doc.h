/*
 * reports/invoice_doc.h: a month's invoice as JSON and as CSV (RFC 4180).
 *
 * Amounts are decimal strings: "amount" rounded half up to cents and
 * "amount_exact" to the nano-dollar; quantities to at most nine decimals of
 * their unit. The CSV has one row per line and a last "total" row.
 */
#ifndef REPORTS_INVOICE_H
#define REPORTS_INVOICE_H

#include <cjson/cJSON.h>
#include <stdint.h>

#include "meter/invoice.h"

struct invoice_meta {
	const char *account_id;
	const char *account_name;
	int64_t month_start_us; /* the first instant of the month, UTC */
	const char *status;     /* "draft" or "final" */
};

/* New JSON, owned by the caller (cJSON_Delete); NULL when out of memory. */
cJSON *report_invoice_json(const struct invoice_meta *m, const struct meter_invoice *inv);

/* The CSV text, malloc'd and owned by the caller (free); NULL when out of memory. */
char *report_invoice_csv(const struct invoice_meta *m, const struct meter_invoice *inv);

/*
 * A self-contained HTML page, fit to print: no script, no file from outside.
 * malloc'd and owned by the caller (free); NULL when out of memory.
 */
char *report_invoice_html(const struct invoice_meta *m, const struct meter_invoice *inv);

/* "2026-10" for a month start. */
void report_month(int64_t month_start_us, char *buf, size_t len);

#endif
