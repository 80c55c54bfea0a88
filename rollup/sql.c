/*
 * rollup/sql.c: what every statement of the rollup goes through.
 *
 * A batch's statements take one array per column, one element per sandbox
 * (or per hourly row), so a batch of 64 costs the round trips of one
 * sandbox: struct arr builds those arrays as PostgreSQL's text literals,
 * bounded by ARRAY_MAX. ru_query runs a statement and, when it fails, ends
 * the message in its SQLSTATE, from which ru_passing_failure tells a
 * failure that says nothing about the sandbox (a deadlock, a cancel, a lost
 * connection: tried again) from a refusal of its data (parked, rule 10).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/db.h"
#include "common/plans.h"
#include "meter/decimal.h"
#include "rollup/internal.h"

/* The most text one array parameter may hold. */
#define ARRAY_MAX ((size_t)64 << 20)

static void arr_put(struct arr *a, const char *s, size_t n)
{
	if (a->failed)
		return;
	if (a->len + n + 2 > a->cap) {
		size_t cap = a->cap ? a->cap : 256;
		while (a->len + n + 2 > cap)
			cap *= 2;
		char *ns = cap <= ARRAY_MAX ? realloc(a->s, cap) : NULL;
		if (ns == NULL) {
			a->failed = true;
			return;
		}
		a->s = ns;
		a->cap = cap;
	}
	memcpy(a->s + a->len, s, n);
	a->len += n;
	a->s[a->len] = '\0';
}

/* Appends a text element, quoted. */
void ru_arr_str(struct arr *a, const char *v)
{
	arr_put(a, a->n++ ? ",\"" : "{\"", 2);
	for (const char *p = v; *p;) {
		size_t run = strcspn(p, "\"\\");
		arr_put(a, p, run);
		p += run;
		if (*p) {
			char esc[2] = {'\\', *p++};
			arr_put(a, esc, 2);
		}
	}
	arr_put(a, "\"", 1);
}

void ru_arr_int(struct arr *a, int64_t v)
{
	char b[32];
	int k = snprintf(b, sizeof b, "%s%lld", a->n++ ? "," : "{", (long long)v);
	arr_put(a, b, (size_t)k);
}

/* An integer element, or NULL for METER_TIME_NONE. */
void ru_arr_opt(struct arr *a, int64_t v)
{
	if (v != METER_TIME_NONE) {
		ru_arr_int(a, v);
		return;
	}
	arr_put(a, a->n++ ? ",NULL" : "{NULL", 5);
}

/* The literal, or NULL when it could not be built. */
const char *ru_arr_end(struct arr *a)
{
	arr_put(a, a->n ? "}" : "{}", a->n ? 1 : 2);
	return a->failed ? NULL : a->s;
}

void ru_arr_free(struct arr *a)
{
	free(a->s);
	*a = (struct arr){0};
}

bool ru_get_int(const PGresult *r, int row, int col, int64_t *out)
{
	if (PQgetisnull(r, row, col)) {
		*out = METER_TIME_NONE;
		return true;
	}
	return meter_decimal_parse(PQgetvalue(r, row, col), 0, true, out) == METER_OK;
}

/*
 * db_query for the statements of a rating transaction: a failure's message
 * ends in "(SQLSTATE xxxxx)", so the log says which error it was and ru_take()
 * can tell a refusal of this sandbox's data from a passing failure.
 */
PGresult *ru_query(PGconn *c, const char *sql, int n, const char *const *params,
                   ExecStatusType want, const char *what, char *err, size_t errlen)
{
	PGresult *r = PQexecParams(c, sql, n, NULL, params, NULL, NULL, 0);
	if (db_check(r, want, what, err, errlen))
		return r;
	const char *state = db_sqlstate(r);
	size_t len = strlen(err);
	if (state[0] && len < errlen)
		snprintf(err + len, errlen - len, " (SQLSTATE %s)", state);
	PQclear(r);
	return NULL;
}

/*
 * Runs sql with the n arrays as its parameters, then frees them: true when it
 * ran (what names it in err).
 */
bool ru_arr_run(PGconn *c, const char *sql, ExecStatusType want, struct arr *a, int n,
                const char *what, char *err, size_t errlen)
{
	const char *p[16];
	PGresult *r = NULL;
	bool ok = true;
	for (int k = 0; k < n && ok; k++)
		if ((p[k] = ru_arr_end(&a[k])) == NULL) {
			snprintf(err, errlen, "%s: out of memory", what);
			ok = false;
		}
	if (ok) {
		r = ru_query(c, sql, n, p, want, what, err, errlen);
		ok = r != NULL;
	}
	PQclear(r);
	for (int k = 0; k < n; k++)
		ru_arr_free(&a[k]);
	return ok;
}

/*
 * True when err (from ru_query) is a failure that says nothing about the sandbox:
 * a deadlock or serialization failure (class 40), too few resources (53),
 * a lock not available (55P03), a cancel, an operator's or the server's
 * shutdown (57), a connection lost (08), an I/O error (58). Such a sandbox is
 * tried again, never parked: parking waits for its next sample, and a stopped
 * sandbox has none, so its last usage would never be billed.
 */
bool ru_passing_failure(const char *err)
{
	const char *p = strstr(err, "(SQLSTATE ");
	if (p == NULL)
		return false;
	p += strlen("(SQLSTATE ");
	return strncmp(p, "40", 2) == 0 || strncmp(p, "53", 2) == 0 ||
	       strncmp(p, "55P03", 5) == 0 || strncmp(p, "57", 2) == 0 ||
	       strncmp(p, "08", 2) == 0 || strncmp(p, "58", 2) == 0;
}

bool ru_plans(PGconn *c, struct meter_plan **plans, size_t *nplans, char *err, size_t errlen)
{
	return plans_load(c, plans, nplans, err, errlen);
}
