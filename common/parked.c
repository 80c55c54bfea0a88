#include "common/parked.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/db.h"
#include "meter/decimal.h"

#define US(col) "(extract(epoch FROM " col ") * 1000000)::bigint"

bool parked_list(PGconn *c, struct parked_row **rows, size_t *n, char *err, size_t errlen)
{
	*rows = NULL;
	*n = 0;
	PGresult *r = db_query(
	        c,
	        "SELECT q.sandbox_id, coalesce(sb.account_id, (SELECT s.account_id FROM samples s "
	        "  WHERE s.sandbox_id = q.sandbox_id AND s.account_id IS NOT NULL "
	        "  ORDER BY s.ts DESC LIMIT 1), ''), q.waiting_kind, q.waiting, "
	        "  " US("coalesce(q.waiting_since, q.queued_at)") ", "
	                                                          "  (SELECT count(*) FROM samples "
	                                                          "s WHERE s.sandbox_id = "
	                                                          "q.sandbox_id "
	                                                          "   AND s.ts >= q.from_ts) "
	                                                          "FROM rollup_queue q LEFT JOIN "
	                                                          "sandboxes sb ON sb.id = "
	                                                          "q.sandbox_id "
	                                                          "WHERE q.waiting IS NOT NULL "
	                                                          "ORDER BY "
	                                                          "coalesce(q.waiting_since, "
	                                                          "q.queued_at), 1",
	        0, NULL, PGRES_TUPLES_OK, "could not read the marks set aside", err, errlen);
	if (r == NULL)
		return false;
	size_t m = (size_t)PQntuples(r);
	struct parked_row *out = calloc(m + 1, sizeof *out);
	bool ok = out != NULL;
	if (!ok)
		snprintf(err, errlen, "could not read the marks set aside: out of memory");
	for (size_t i = 0; ok && i < m; i++) {
		struct parked_row *p = &out[i];
		int row = (int)i;
		snprintf(p->sandbox, sizeof p->sandbox, "%s", PQgetvalue(r, row, 0));
		snprintf(p->account, sizeof p->account, "%s", PQgetvalue(r, row, 1));
		snprintf(p->kind, sizeof p->kind, "%s", PQgetvalue(r, row, 2));
		snprintf(p->reason, sizeof p->reason, "%s", PQgetvalue(r, row, 3));
		ok = meter_decimal_parse(PQgetvalue(r, row, 4), 0, true, &p->since_us) ==
		             METER_OK &&
		     meter_decimal_parse(PQgetvalue(r, row, 5), 0, false, &p->samples) == METER_OK;
		if (!ok)
			snprintf(err, errlen,
			         "could not read the marks set aside: a malformed row");
	}
	PQclear(r);
	if (!ok) {
		free(out);
		return false;
	}
	*rows = out;
	*n = m;
	return true;
}

bool parked_retry(PGconn *c, const char *sandbox, int64_t *woken, char *err, size_t errlen)
{
	const char *p[] = {sandbox};
	PGresult *r = db_query(c,
	                       "UPDATE rollup_queue SET waiting = NULL, waiting_kind = NULL, "
	                       "retry_after = NULL WHERE waiting IS NOT NULL "
	                       "AND ($1::text IS NULL OR sandbox_id = $1)",
	                       1, p, PGRES_COMMAND_OK, "could not wake the marks", err, errlen);
	if (r == NULL)
		return false;
	bool ok = meter_decimal_parse(PQcmdTuples(r), 0, false, woken) == METER_OK;
	PQclear(r);
	if (!ok)
		snprintf(err, errlen, "could not wake the marks: no count of rows");
	return ok;
}
