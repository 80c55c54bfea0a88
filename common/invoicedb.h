/*
 * common/invoicedb.h: a month's invoice, draft or final, from the database.
 *
 * An invoice is a draft, recomputed from the rollups on every request, until
 * the grace period after its month has passed and nothing of the month waits
 * for the rollup (a sample's mark, the trial's crossing); the first request
 * after that finalises it: its JSON and CSV are stored byte for byte with the
 * quantities it billed (tables invoices and invoice_quantities, which the
 * database refuses to change), and every later request gets those bytes.
 * Each invoice carries adjustment lines for earlier final months: the usage
 * they have now, less what final invoices billed for them so far. Per
 * account, one transaction at a time (an advisory lock) computes or
 * finalises, so an invoice is finalised once.
 */
#ifndef COMMON_INVOICEDB_H
#define COMMON_INVOICEDB_H

#include <libpq-fe.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "meter/plan.h"

#define INVOICE_GRACE_DEFAULT "72h"

struct invoice_doc {
	char *json; /* malloc'd, unformatted JSON */
	char *csv;  /* malloc'd */
	char *html; /* malloc'd; NULL for an invoice made final before pages were kept */
	bool final;
	bool found; /* false: no such account */
};

void invoice_doc_free(struct invoice_doc *d);

/*
 * The invoice of account for the month starting at month_us (UTC). plans are
 * all price plans. On failure writes err, rolls back, and returns false.
 */
bool invoice_get(PGconn *c, const char *account, int64_t month_us, int64_t now_us, int64_t grace_us,
                 const struct meter_plan *plans, size_t nplans, struct invoice_doc *out, char *err,
                 size_t errlen);

/*
 * Makes final, through invoice_get, the invoices that are due and not final
 * yet: of each account-month with usage whose grace after its end passed
 * before now_us, at most limit of them, oldest month first. One still waiting
 * for the rollup stays a draft and is tried again next time, as is one
 * whose finalising fails (logged). *made counts those made final. False
 * with err when the invoices due could not be read.
 */
bool invoices_finalize_due(PGconn *c, int64_t now_us, int64_t grace_us, int limit, int *made,
                           char *err, size_t errlen);

#endif
