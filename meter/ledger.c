#include "meter/ledger.h"

#include <string.h>

#include "meter/checked.h"
#include "meter/timefmt.h"

/* The rows of one kind and month, summed per plan into out (room for METER_LEDGER_PLANS),
 * in the order of the plans' ids. */
static enum meter_status sums_of(const struct meter_ledger_account *a, enum meter_ledger_kind kind,
                                 int64_t month_us, struct meter_plan_sum *out, size_t *n)
{
	enum meter_status st;
	*n = 0;
	for (size_t i = 0; i < a->nrows; i++) {
		const struct meter_ledger_row *r = &a->rows[i];
		if (r->kind == kind && r->month_us == month_us &&
		    (st = meter_plan_sum_add(out, n, METER_LEDGER_PLANS, r->plan_id, &r->u)))
			return st;
	}
	for (size_t i = 1; i < *n; i++) /* a handful: insertion sort */
		for (size_t k = i; k > 0 && out[k - 1].plan_id > out[k].plan_id; k--) {
			struct meter_plan_sum t = out[k];
			out[k] = out[k - 1];
			out[k - 1] = t;
		}
	return METER_OK;
}

/* Clamps every quantity of c to at most u's. */
static void at_most(struct meter_usage *c, const struct meter_usage *u)
{
	meter_i128 *cv[] = {&c->cpu_measured_us, &c->cpu_billed_us, &c->busy_us,
	                    &c->idle_us,         &c->wall_us,       &c->mem_mgib_us};
	const meter_i128 uv[] = {u->cpu_measured_us, u->cpu_billed_us, u->busy_us,
	                         u->idle_us,         u->wall_us,       u->mem_mgib_us};
	for (int i = 0; i < 6; i++)
		if (*cv[i] > uv[i])
			*cv[i] = uv[i];
}

/*
 * What the grant covered of a month's usage (used, per plan): whole when it ran
 * out after the month's hours (or has not), nothing when it ran out before the
 * month or there is none, and when it ran out inside: the hours before the
 * crossing hour whole and that hour's covered part, never more than used.
 */
static enum meter_status covered_of(const struct meter_ledger_account *a, int64_t month_us,
                                    int64_t hours_end_us, const struct meter_plan_sum *used,
                                    size_t nused, struct meter_usage *covered)
{
	int64_t x = a->crossing_hour_us;
	memset(covered, 0, nused * sizeof *covered);
	if (a->grant_us <= 0 || (x != METER_TIME_NONE && x < month_us))
		return METER_OK;
	if (x == METER_TIME_NONE || x >= hours_end_us) {
		for (size_t i = 0; i < nused; i++)
			covered[i] = used[i].u;
		return METER_OK;
	}
	struct meter_plan_sum part[METER_LEDGER_PLANS];
	size_t np = 0;
	enum meter_status st;
	for (size_t i = 0; i < a->nrows; i++) {
		const struct meter_ledger_row *r = &a->rows[i];
		if ((r->kind == METER_LEDGER_BEFORE || r->kind == METER_LEDGER_COVER) &&
		    r->month_us == month_us &&
		    (st = meter_plan_sum_add(part, &np, METER_LEDGER_PLANS, r->plan_id, &r->u)))
			return st;
	}
	/* Never more than was used: the crossing hour is rated from the samples as they are,
	 * and a sandbox whose new samples there wait for their mark shows more for a moment,
	 * until that mark's rating finds the crossing again. A part under a plan the month
	 * did not use is dropped with it. */
	for (size_t i = 0; i < nused; i++)
		for (size_t k = 0; k < np; k++)
			if (part[k].plan_id == used[i].plan_id) {
				covered[i] = part[k].u;
				at_most(&covered[i], &used[i].u);
			}
	return METER_OK;
}

static const struct meter_plan *plan_of(const struct meter_plan *plans, size_t n, int64_t id)
{
	for (size_t i = 0; i < n; i++)
		if (plans[i].id == id)
			return &plans[i];
	return NULL;
}

/* a -= b, for what an invoice bills (billed CPU, memory, sandbox time). */
static enum meter_status sub_billed(struct meter_usage *a, const struct meter_usage *b)
{
	return ck_sub_q(a->cpu_billed_us, b->cpu_billed_us, &a->cpu_billed_us) &&
	                       ck_sub_q(a->mem_mgib_us, b->mem_mgib_us, &a->mem_mgib_us) &&
	                       ck_sub_q(a->wall_us, b->wall_us, &a->wall_us)
	               ? METER_OK
	               : METER_EOVERFLOW;
}

static bool bills(const struct meter_usage *u)
{
	return u->cpu_billed_us || u->mem_mgib_us || u->wall_us;
}

static enum meter_status keep_row(struct meter_billed_row *rows, size_t *n, size_t cap,
                                  int64_t month, int64_t plan, const struct meter_usage *used,
                                  const struct meter_usage *covered)
{
	if (*n == cap)
		return METER_ERANGE;
	rows[(*n)++] = (struct meter_billed_row){
	        .for_month_us = month, .plan_id = plan, .used = *used, .covered = *covered};
	return METER_OK;
}

/* The month's usage and its cover, per plan in the order of their ids, as plan usage. */
static enum meter_status month_of(const struct meter_ledger_account *a, int64_t month_us,
                                  int64_t hours_end_us, const struct meter_plan *plans,
                                  size_t nplans, struct meter_plan_usage *pu, size_t *n)
{
	struct meter_plan_sum used[METER_LEDGER_PLANS];
	struct meter_usage cov[METER_LEDGER_PLANS];
	size_t nused;
	enum meter_status st;
	if ((st = sums_of(a, METER_LEDGER_USED, month_us, used, &nused)) ||
	    (st = covered_of(a, month_us, hours_end_us, used, nused, cov)))
		return st;
	for (size_t i = 0; i < nused; i++) {
		const struct meter_plan *p = plan_of(plans, nplans, used[i].plan_id);
		if (p == NULL)
			return METER_ENOPLAN;
		pu[i] = (struct meter_plan_usage){.plan = p, .used = used[i].u, .covered = cov[i]};
	}
	*n = nused;
	return METER_OK;
}

/* What month f has now less what final invoices billed for it, per plan (in the order of
 * their ids): into delta (room for METER_LEDGER_PLANS), *nd how many. */
static enum meter_status delta_of(const struct meter_ledger_account *a, int64_t f,
                                  const struct meter_plan *plans, size_t nplans,
                                  struct meter_plan_usage *delta, size_t *nd)
{
	enum meter_status st = month_of(a, f, meter_month_next(f), plans, nplans, delta, nd);
	for (size_t i = 0; st == METER_OK && i < a->nrows; i++) {
		const struct meter_ledger_row *r = &a->rows[i];
		if (r->kind != METER_LEDGER_BILLED || r->month_us != f)
			continue;
		size_t k = 0;
		while (k < *nd && delta[k].plan->id != r->plan_id)
			k++;
		if (k == *nd) { /* billed under a plan the month no longer uses */
			const struct meter_plan *p = plan_of(plans, nplans, r->plan_id);
			if (p == NULL)
				return METER_ENOPLAN;
			if (*nd == METER_LEDGER_PLANS)
				return METER_ERANGE;
			for (k = *nd; k > 0 && delta[k - 1].plan->id > r->plan_id; k--)
				delta[k] = delta[k - 1];
			delta[k] = (struct meter_plan_usage){.plan = p};
			(*nd)++;
		}
		if ((st = sub_billed(&delta[k].used, &r->u)) ||
		    (st = sub_billed(&delta[k].covered, &r->covered)))
			return st;
	}
	return st;
}

/* Whether month m has a final invoice (a FINAL row, or a BILLED one: an invoice made final
 * billed it). */
static bool final_month(const struct meter_ledger_account *a, int64_t m)
{
	for (size_t i = 0; i < a->nrows; i++)
		if ((a->rows[i].kind == METER_LEDGER_FINAL ||
		     a->rows[i].kind == METER_LEDGER_BILLED) &&
		    a->rows[i].month_us == m)
			return true;
	return false;
}

/* The first month after f whose invoice is not final: the one an adjustment of f goes on. */
static int64_t adjusting_month(const struct meter_ledger_account *a, int64_t f)
{
	int64_t m = meter_month_next(f);
	while (final_month(a, m))
		m = meter_month_next(m);
	return m;
}

enum meter_status meter_ledger_lines(const struct meter_ledger_account *a, int64_t month_us,
                                     int64_t hours_end_us, const struct meter_plan *plans,
                                     size_t nplans, struct meter_invoice *out,
                                     struct meter_billed_row *billed, size_t *nbilled, size_t cap,
                                     int64_t *adjusting_us)
{
	struct meter_plan_usage pu[METER_LEDGER_PLANS];
	struct meter_invoice inv;
	size_t n = 0, nb = 0;
	int64_t first = METER_TIME_NONE;
	enum meter_status st;
	if ((st = month_of(a, month_us, hours_end_us, plans, nplans, pu, &n)) ||
	    (st = meter_invoice_build(pu, n, &inv)))
		return st;
	for (size_t i = 0; i < n; i++)
		if ((st = keep_row(billed, &nb, cap, month_us, pu[i].plan->id, &pu[i].used,
		                   &pu[i].covered)))
			return st;
	/* the final months before it, oldest first, each once */
	int64_t after = INT64_MIN;
	for (;;) {
		int64_t f = INT64_MAX;
		for (size_t i = 0; i < a->nrows; i++) {
			const struct meter_ledger_row *r = &a->rows[i];
			if ((r->kind == METER_LEDGER_FINAL || r->kind == METER_LEDGER_BILLED) &&
			    r->month_us > after && r->month_us < month_us && r->month_us < f)
				f = r->month_us;
		}
		if (f == INT64_MAX)
			break;
		after = f;
		struct meter_plan_usage delta[METER_LEDGER_PLANS], changed[METER_LEDGER_PLANS];
		size_t nd = 0, nc = 0;
		if ((st = delta_of(a, f, plans, nplans, delta, &nd)))
			return st;
		for (size_t k = 0; k < nd; k++)
			if (bills(&delta[k].used) || bills(&delta[k].covered))
				changed[nc++] = delta[k];
		if (nc == 0)
			continue;
		/* on the first invoice after f not final yet, and on no other */
		int64_t x = adjusting_month(a, f);
		if (first == METER_TIME_NONE || x < first)
			first = x;
		if (x != month_us)
			continue;
		for (size_t k = 0; k < nc; k++)
			if ((st = keep_row(billed, &nb, cap, f, changed[k].plan->id,
			                   &changed[k].used, &changed[k].covered)))
				return st;
		if ((st = meter_invoice_adjust(&inv, f, changed, nc)))
			return st;
	}
	*out = inv;
	*nbilled = nb;
	if (adjusting_us)
		*adjusting_us = first;
	return METER_OK;
}

/* What rows recorded of month m, per plan in the order of their ids, as plan usage. */
static enum meter_status recorded_month(const struct meter_billed_row *rows, size_t n, int64_t m,
                                        const struct meter_plan *plans, size_t nplans,
                                        struct meter_plan_usage *pu, size_t *np)
{
	*np = 0;
	for (int64_t after = INT64_MIN;;) {
		const struct meter_billed_row *next = NULL;
		for (size_t i = 0; i < n; i++)
			if (rows[i].for_month_us == m && rows[i].plan_id > after &&
			    (next == NULL || rows[i].plan_id < next->plan_id))
				next = &rows[i];
		if (next == NULL)
			return METER_OK;
		after = next->plan_id;
		const struct meter_plan *p = plan_of(plans, nplans, next->plan_id);
		if (p == NULL)
			return METER_ENOPLAN;
		if (*np == METER_LEDGER_PLANS)
			return METER_ERANGE;
		pu[(*np)++] = (struct meter_plan_usage){
		        .plan = p, .used = next->used, .covered = next->covered};
	}
}

enum meter_status meter_ledger_recorded(const struct meter_billed_row *rows, size_t n,
                                        int64_t month_us, const struct meter_plan *plans,
                                        size_t nplans, struct meter_invoice *out)
{
	struct meter_plan_usage pu[METER_LEDGER_PLANS] = {0};
	struct meter_invoice inv;
	size_t np = 0;
	enum meter_status st;
	if ((st = recorded_month(rows, n, month_us, plans, nplans, pu, &np)) ||
	    (st = meter_invoice_build(pu, np, &inv)))
		return st;
	/* then each earlier month it adjusts, oldest first */
	for (int64_t after = INT64_MIN;;) {
		int64_t f = INT64_MAX;
		for (size_t i = 0; i < n; i++)
			if (rows[i].for_month_us < month_us && rows[i].for_month_us > after &&
			    rows[i].for_month_us < f)
				f = rows[i].for_month_us;
		if (f == INT64_MAX)
			break;
		after = f;
		if ((st = recorded_month(rows, n, f, plans, nplans, pu, &np)) ||
		    (st = meter_invoice_adjust(&inv, f, pu, np)))
			return st;
	}
	*out = inv;
	return METER_OK;
}
