/* Exports: a month as CSV (FOCUS, or usage per sandbox), for the API and the dashboard. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "api/account.h"
#include "api/opening.h"
#include "api/reply.h"
#include "api/routes.h"
#include "common/export.h"

/*
 * GET /v1/accounts/{id}/exports/{YYYY-MM}?format=focus|usage, and the same for
 * the dashboard at /dashboard/exports/{YYYY-MM} (an admin adds ?account=ID):
 * CSV files for finance tools (common/export.h), as downloads.
 *
 * The export is written whole into an unlinked file first, on the slow lane,
 * and its database connection given back as soon as its rows are read; the
 * kernel then sends the file at the client's pace. A client reading slowly
 * holds no database connection and puts no work on a request thread (a
 * streamed export held both to its last byte, and twelve slow readers made
 * quota checks wait). An export that fails is an error status, never a CSV
 * cut short. The file takes the export's size on TMPDIR's disk (/tmp) while
 * it is sent.
 */

/* An unlinked file in TMPDIR (or /tmp): its descriptor, or -1 with err. */
static int scratch_file(char *err, size_t errlen)
{
	const char *dir = getenv("TMPDIR");
	char path[4096];
	snprintf(path, sizeof path, "%s/meter-export-XXXXXX", dir && dir[0] ? dir : "/tmp");
	int fd = mkostemp(path, O_CLOEXEC);
	if (fd < 0) {
		snprintf(err, errlen, "cannot make a file for the export in \"%s\": %s",
		         dir && dir[0] ? dir : "/tmp", strerror(errno));
		return -1;
	}
	unlink(path);
	return fd;
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
	int fd = scratch_file(err, sizeof err);
	FILE *f = fd >= 0 ? fdopen(fd, "w+") : NULL;
	if (fd >= 0 && f == NULL) {
		snprintf(err, sizeof err, "cannot write the export: %s", strerror(errno));
		close(fd);
	}
	bool ok = f != NULL &&
	          export_write(op.c, id, mv[0].num, focus, op.plans, op.nplans, f, err, sizeof err);
	req_open_done(&op);
	if (ok && fflush(f) != 0) {
		snprintf(err, sizeof err, "cannot write the export: %s", strerror(errno));
		ok = false;
	}
	if (!ok) {
		if (f != NULL)
			fclose(f);
		reply_db_error(r, err, NULL);
		return;
	}
	int out = dup(fileno(f));
	fclose(f);
	if (out < 0) {
		reply_problemf(r, 500, "internal", "Internal error", "the export cannot be sent");
		return;
	}
	reply_file(r, 200, "text/csv; charset=utf-8", out);
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
