/* Exports: a month as CSV (FOCUS, or usage per sandbox), for the API and the dashboard. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/account.h"
#include "api/opening.h"
#include "api/reply.h"
#include "api/routes.h"
#include "common/export.h"
#include "common/log.h"

/*
 * GET /v1/accounts/{id}/exports/{YYYY-MM}?format=focus|usage, and the same for
 * the dashboard at /dashboard/exports/{YYYY-MM} (an admin adds ?account=ID):
 * CSV files for finance tools (common/export.h), as downloads.
 */
/* An export being sent (common/export.h), a piece at a time. */
struct export_answer {
	struct req *r;
	struct export *e;
};

static ssize_t export_piece(void *cls, char *buf, size_t max)
{
	struct export_answer *a = cls;
	char err[256];
	ssize_t n = export_read(a->e, buf, max, err, sizeof err);
	if (n < 0)
		log_warn("%s %s: the export stopped: %s", a->r->method, a->r->path, err);
	return n;
}

static void export_done(void *cls)
{
	struct export_answer *a = cls;
	export_close(a->e);
	free(a);
}

static void export_answer(struct req *r, const char *id, const char *month_text, const char *format)
{
	static const struct in_field mf[] = {{"month", IN_MONTH, 0, 0, 0, true, NULL}};
	struct in_value mv[1];
	struct problem p;
	const struct in_arg month_arg = {"month", month_text};
	if (!in_query(&month_arg, 1, mf, 1, mv, &p)) {
		reply_problem(r, &p);
		return;
	}
	/* the plans first, then the account: the order this answer has always had */
	struct req_open op;
	char err[256];
	if (!req_open(r, id, NULL, 0, NULL, REQ_OPEN_PLANS, &op))
		return;
	if (!account_exists(r, op.c, id)) {
		req_open_done(&op);
		return;
	}
	bool focus = strcmp(format, "focus") == 0;
	struct export_answer *a = calloc(1, sizeof *a);
	if (a != NULL) {
		a->r = r;
		a->e = export_open(op.c, id, mv[0].num, focus, op.plans, op.nplans, err,
		                   sizeof err);
	}
	req_open_done(&op);
	if (a == NULL || a->e == NULL) {
		free(a);
		reply_db_error(r, a ? err : "the export cannot be made: out of memory", NULL);
		return;
	}
	reply_stream(r, 200, "text/csv; charset=utf-8", export_piece, a, export_done);
}

void h_export(struct req *r)
{
	static const struct in_field f[] = {{"format", IN_ENUM, 0, 0, 0, true, "focus|usage"}};
	struct in_value v[1];
	struct problem p;
	if (!in_query(r->args, r->nargs, f, 1, v, &p)) {
		reply_problem(r, &p);
		return;
	}
	export_answer(r, r->param[0], r->param[1], v[0].text);
}

void h_dashboard_export(struct req *r)
{
	static const struct in_field f[] = {{"format", IN_ENUM, 0, 0, 0, true, "focus|usage"},
	                                    {"account", IN_ID, 0, 0, 0, false, NULL}};
	struct in_value v[2];
	struct problem p;
	if (!in_query(r->args, r->nargs, f, 2, v, &p)) {
		reply_problem(r, &p);
		return;
	}
	export_answer(r, v[1].set ? v[1].text : r->account, r->param[0], v[0].text);
}
