#include "meter/credit.h"

#include <stdlib.h>

#include "meter/rating.h"

bool meter_credit_usable(const struct meter_credit *g, int64_t start_us, int64_t end_us)
{
	return g->effective_us < end_us &&
	       (g->expires_us == METER_TIME_NONE || g->expires_us > start_us);
}

/* Rule 11's order: priority, soonest expiry (none last), effective_at, id. */
static int credit_order(const void *pa, const void *pb)
{
	const struct meter_credit *a = *(const struct meter_credit *const *)pa;
	const struct meter_credit *b = *(const struct meter_credit *const *)pb;
	if (a->priority != b->priority)
		return a->priority < b->priority ? -1 : 1;
	bool an = a->expires_us == METER_TIME_NONE, bn = b->expires_us == METER_TIME_NONE;
	if (an != bn)
		return an ? 1 : -1;
	if (a->expires_us != b->expires_us)
		return a->expires_us < b->expires_us ? -1 : 1;
	if (a->effective_us != b->effective_us)
		return a->effective_us < b->effective_us ? -1 : 1;
	return (a->id > b->id) - (a->id < b->id);
}

enum meter_status meter_credits_apply(const struct meter_credit *g, size_t n,
                                      const struct meter_credit_month *m, size_t nm,
                                      meter_money *takes)
{
	if (n > METER_CREDITS_MAX)
		return METER_ERANGE;
	for (size_t j = 0; j < n; j++)
		if (g[j].amount <= 0 ||
		    (g[j].expires_us != METER_TIME_NONE && g[j].expires_us <= g[j].effective_us))
			return METER_EINVAL;
	for (size_t i = 0; i < nm; i++)
		if (m[i].end_us < m[i].start_us || (m[i].final && n && m[i].recorded == NULL))
			return METER_EINVAL;
	if (n == 0 || nm == 0)
		return METER_OK;
	meter_money *left = malloc(n * sizeof *left);
	const struct meter_credit **order = malloc(n * sizeof *order);
	if (left == NULL || order == NULL) {
		free(left);
		free(order);
		return METER_ERANGE;
	}
	/* what final months left of each grant, whichever months they are */
	enum meter_status st = METER_OK;
	for (size_t j = 0; j < n; j++) {
		left[j] = g[j].amount;
		order[j] = &g[j];
	}
	for (size_t i = 0; i < nm && st == METER_OK; i++)
		for (size_t j = 0; m[i].final && j < n; j++) {
			meter_money r = m[i].recorded[j];
			if (r < 0 || r > left[j]) {
				st = METER_EINVAL;
				break;
			}
			left[j] -= r;
		}
	if (st == METER_OK) {
		qsort(order, n, sizeof *order, credit_order);
		for (size_t i = 0; i < nm; i++) {
			meter_money *row = takes + i * n;
			if (m[i].final) {
				for (size_t j = 0; j < n; j++)
					row[j] = m[i].recorded[j];
				continue;
			}
			meter_money rem = m[i].remaining;
			for (size_t k = 0; k < n; k++) {
				size_t j = (size_t)(order[k] - g);
				row[j] = 0;
				if (rem <= 0 || left[j] <= 0 || g[j].voided ||
				    !meter_credit_usable(&g[j], m[i].start_us, m[i].end_us))
					continue;
				row[j] = left[j] < rem ? left[j] : rem;
				left[j] -= row[j];
				rem -= row[j];
			}
		}
	}
	free(left);
	free(order);
	return st;
}
