/*
 * api/forecast.h: where an account's month is heading.
 *
 * The month to date is the month's money as common/ledgerdb.h computes it; the
 * projection is the run rate of the FORECAST_BASIS_DAYS full days (UTC)
 * before "at" over the time left in the month, with a low and a high bound
 * from the quietest and the busiest of those days. The run rate is at list
 * prices (a trial grant still left is not taken off). Used by the forecast
 * route (api/h_invoices.c) and the dashboard (api/page_dashboard.c).
 */
#ifndef API_FORECAST_H
#define API_FORECAST_H

#include <libpq-fe.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "api/request.h"
#include "meter/money.h"
#include "meter/plan.h"

#define FORECAST_BASIS_DAYS 7

struct forecast {
	meter_money month_to_date, projected, low, high, per_day;
};

/*
 * Month to date and the projection of account id's month (its first µs) as
 * of at. asked: at was asked for (a month to date as it stood then) rather
 * than now. On failure it has answered (404 for no such account, 503 for the
 * database, 500 when the figures cannot be computed).
 */
bool forecast_compute(struct req *r, PGconn *c, const char *id, int64_t month, int64_t at,
                      bool asked, const struct meter_plan *plans, size_t nplans,
                      struct forecast *out);

#endif
