#include "common/plans.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/db.h"
#include "meter/decimal.h"

static bool parse_row(const PGresult *r, int i, struct meter_plan *p, char *err, size_t errlen)
{
	int64_t id, from;
	memset(p, 0, sizeof *p);
	if (meter_decimal_parse(PQgetvalue(r, i, 0), 0, false, &id) ||
	    meter_decimal_parse(PQgetvalue(r, i, 2), 0, true, &from) ||
	    meter_money_parse(PQgetvalue(r, i, 3), false, &p->cpu_vcpu_hour) ||
	    meter_money_parse(PQgetvalue(r, i, 4), false, &p->memory_gib_hour) ||
	    meter_decimal_parse(PQgetvalue(r, i, 5), 6, false, &p->cpu_floor_ppm) ||
	    meter_plan_check(p) != METER_OK) {
		snprintf(err, errlen, "price plan %s has a value meter cannot use",
		         PQgetvalue(r, i, 0));
		return false;
	}
	p->id = id;
	p->effective_from_us = from;
	snprintf(p->name, sizeof p->name, "%s", PQgetvalue(r, i, 1));
	return true;
}

bool plans_from_result(const PGresult *r, struct meter_plan **out, size_t *n, char *err,
                       size_t errlen)
{
	int nr = PQntuples(r);
	struct meter_plan *rows = calloc(nr ? (size_t)nr : 1, sizeof *rows);
	if (rows == NULL) {
		snprintf(err, errlen, "could not read price plans: out of memory");
		return false;
	}
	for (int i = 0; i < nr; i++)
		if (!parse_row(r, i, &rows[i], err, errlen)) {
			free(rows);
			return false;
		}
	*out = rows;
	*n = (size_t)nr;
	return true;
}

bool plans_load(PGconn *c, struct meter_plan **out, size_t *n, char *err, size_t errlen)
{
	PGresult *r = PQexec(c, "SELECT id, name, "
	                        "(extract(epoch FROM effective_from) * 1000000)::bigint, "
	                        "cpu_vcpu_hour::text, memory_gib_hour::text, cpu_floor::text "
	                        "FROM price_plans ORDER BY effective_from");
	bool ok = db_check(r, PGRES_TUPLES_OK, "could not read price plans", err, errlen) &&
	          plans_from_result(r, out, n, err, errlen);
	PQclear(r);
	return ok;
}

enum plan_refusal plan_add(PGconn *c, const char *name, int64_t effective_from_us,
                           meter_money cpu_vcpu_hour, meter_money memory_gib_hour,
                           int64_t cpu_floor_ppm, int64_t *id, char *err, size_t errlen)
{
	char from[24], cpu[METER_DECIMAL_BUF], mem[METER_DECIMAL_BUF], floor[METER_DECIMAL_BUF];
	snprintf(from, sizeof from, "%lld", (long long)effective_from_us);
	meter_decimal_format(cpu_vcpu_hour, 9, 0, cpu, sizeof cpu);
	meter_decimal_format(memory_gib_hour, 9, 0, mem, sizeof mem);
	if (cpu_floor_ppm >= 0)
		meter_decimal_format(cpu_floor_ppm, 6, 0, floor, sizeof floor);
	const char *p[] = {name, from, cpu, mem, cpu_floor_ppm >= 0 ? floor : NULL};
	PGresult *r = PQexecParams(
	        c,
	        "WITH t AS (SELECT 'epoch'::timestamptz + $2::bigint * interval '1 microsecond' f) "
	        "INSERT INTO price_plans (name, effective_from, cpu_vcpu_hour, memory_gib_hour, "
	        "cpu_floor) SELECT $1, t.f, $3::numeric, $4::numeric, coalesce($5::numeric, "
	        "(SELECT cpu_floor FROM price_plans WHERE effective_from < t.f "
	        "ORDER BY effective_from DESC LIMIT 1), 0.025) FROM t "
	        "WHERE t.f >= meter_rated_until() "
	        "RETURNING id",
	        5, NULL, p, NULL, NULL, 0);
	enum plan_refusal why = PLAN_DB_ERROR;
	if (strcmp(db_sqlstate(r), "23505") == 0)
		why = PLAN_TAKEN;
	else if (db_check(r, PGRES_TUPLES_OK, "could not add the price plan", err, errlen))
		why = PQntuples(r) == 1 && meter_decimal_parse(PQgetvalue(r, 0, 0), 0, false, id) ==
		                                   METER_OK
		              ? PLAN_ADDED
		              : PLAN_PAST;
	PQclear(r);
	return why;
}
