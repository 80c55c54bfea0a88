/*
 * rollup/rate.c: the rating of one sandbox's window, with the meter/ library.
 *
 * No database here: the samples read.c put in a job are rated, incarnation
 * by incarnation in the order they first appear in the sandbox's whole
 * history (rule 3's clipping at each incarnation's end), with the plan in
 * force at each interval's end (rule 6: none, the interval is unpriced),
 * into hour-by-plan buckets, or, for the trial's crossing hour (rule 8), into
 * the hour's intervals kept whole. A rating a rule refuses parks the
 * sandbox with the reason (rule 10).
 */
#include <stdio.h>
#include <stdlib.h>

#include "common/log.h"
#include "meter/timefmt.h"
#include "rollup/internal.h"

void ru_job_free(struct job *j)
{
	free(j->incs);
	free(j->s);
	free(j->b);
	free(j->iv);
}

void ru_cannot_rate(struct job *j, const char *why)
{
	j->fate = CANNOT_RATE;
	snprintf(j->why, sizeof j->why, "cannot rate: %s", why);
	log_warn("rollup: sandbox %s %s", j->sandbox, why);
}

/* One rated interval into j: summed into its hour and plan, or kept whole for the crossing hour. */
static enum meter_status emit(void *ctx, const struct meter_interval *iv,
                              const struct meter_plan *plan)
{
	struct job *j = ctx;
	if (iv->end_us <= j->window)
		return METER_OK;          /* before the window: its hour is not re-rated */
	if (j->upto != METER_TIME_NONE) { /* the trial's crossing hour: keep it whole */
		if (iv->end_us > j->upto || plan == NULL)
			return METER_OK; /* after the hour, or unpriced (no trial without a price)
			                  */
		if (j->niv == j->capiv) {
			size_t cap = j->capiv ? j->capiv * 2 : 64;
			struct hour_iv *n = realloc(j->iv, cap * sizeof *n);
			if (n == NULL)
				return METER_EOVERFLOW;
			j->iv = n;
			j->capiv = cap;
		}
		j->iv[j->niv] = (struct hour_iv){.iv = *iv, .plan = plan, .job = j, .seq = j->niv};
		j->niv++;
		return METER_OK;
	}
	int64_t hour = meter_hour_of(iv->end_us), id = plan ? plan->id : 0;
	size_t i = j->nb;
	while (i > 0 && !(j->b[i - 1].hour == hour && j->b[i - 1].plan == id))
		i--;
	if (i == 0) {
		if (j->nb == j->capb) {
			size_t cap = j->capb ? j->capb * 2 : 16;
			struct bucket *nb = realloc(j->b, cap * sizeof *nb);
			if (nb == NULL)
				return METER_EOVERFLOW;
			j->b = nb;
			j->capb = cap;
		}
		j->b[j->nb] = (struct bucket){.hour = hour, .plan = id};
		i = ++j->nb;
	}
	j->b[i - 1].intervals++;
	return meter_usage_add_interval(&j->b[i - 1].u, &j->size, iv);
}

static int cmp_smp(const void *a, const void *b)
{
	const struct smp *x = a, *y = b;
	if (x->order != y->order)
		return x->order < y->order ? -1 : 1;
	return x->t < y->t ? -1 : x->t > y->t;
}

/* Incarnations in the order they first appear. */
static int cmp_inc(const void *a, const void *b)
{
	const struct inc *x = a, *y = b;
	if (x->first != y->first)
		return x->first < y->first ? -1 : 1;
	return x->inc < y->inc ? -1 : x->inc > y->inc;
}

/* Rates one span with the plan in force at its end into j->b (none: unpriced, plan 0). */
static enum meter_status rate_span(struct job *j, const struct meter_span *sp)
{
	const struct meter_plan *plan;
	struct meter_interval iv;
	enum meter_status st = meter_span_rate(j->plans, j->nplans, &j->size, sp, &iv, &plan);
	return st ? st : emit(j, &iv, plan);
}

/* Says which of the sandbox's re-rated intervals end before any price plan (rule 6). */
static void log_unpriced(const struct job *j)
{
	int64_t n = 0, first = INT64_MAX, last = INT64_MIN;
	for (size_t i = 0; i < j->nb; i++)
		if (j->b[i].plan == 0) {
			n += j->b[i].intervals;
			first = j->b[i].hour < first ? j->b[i].hour : first;
			last = j->b[i].hour > last ? j->b[i].hour : last;
		}
	if (n == 0)
		return;
	char a[METER_TIME_BUF], b[METER_TIME_BUF];
	meter_time_format(first, a, sizeof a);
	meter_time_format(last + METER_US_PER_HOUR, b, sizeof b);
	log_warn("rollup: sandbox %s (account %s): %lld interval(s) ending between %s and %s end "
	         "before any price plan is in force: counted as unpriced, not billed",
	         j->sandbox, j->account, (long long)n, a, b);
}

/* Rates one span of an incarnation that ends at end_us, clipped there (rule 3). */
static enum meter_status rate_clipped(struct job *j, const struct meter_span *sp, int64_t end_us)
{
	struct meter_span part[2];
	size_t k = meter_span_clip(sp, end_us, part);
	enum meter_status st = METER_OK;
	for (size_t i = 0; i < k && st == METER_OK; i++)
		st = rate_span(j, &part[i]);
	return st;
}

/*
 * Rates the window of one sandbox into j->b, as meter_rate_sandbox would
 * rate all its samples: incarnations in the order they first appear in the
 * sandbox's whole history, each seeded with where it stood before the
 * window and ended where meter_incarnation_end says (its last sample
 * before the window stands in for one with none in it). False (the job
 * parked with the reason) when a rule refuses it.
 */
bool ru_rate(struct job *j)
{
	size_t n = j->n, ninc = j->ninc;
	struct smp *s = j->s;
	enum meter_status st = METER_OK;
	qsort(j->incs, ninc, sizeof *j->incs, cmp_inc);
	for (size_t i = 0; i < n; i++) {
		size_t k = 0;
		while (k < ninc && j->incs[k].inc != s[i].inc)
			k++;
		if (k == ninc) {
			ru_cannot_rate(j, "malformed samples");
			return false;
		}
		s[i].order = k;
	}
	qsort(s, n, sizeof *s, cmp_smp);

	struct meter_series ser;
	struct meter_span sp;
	meter_series_init(&ser);
	if (ninc == 0) { /* stopped before any sample: [started_at, stop] */
		st = meter_series_close(&ser, j->started, j->stopped, &sp);
		if (st == METER_OK && (st = rate_span(j, &sp)) != METER_OK)
			goto rule;
	}
	for (size_t k = 0, i = 0; k < ninc; k++) {
		const struct inc *x = &j->incs[k];
		int64_t end = meter_incarnation_end(
		        j->started, j->stopped, x->first,
		        k + 1 < ninc ? j->incs[k + 1].first : METER_TIME_NONE, x->ended);
		if (i < n && s[i].order == k) {
			if (x->at_window)
				meter_series_resume(&ser, &x->window);
			else if (k > 0)
				meter_series_after_other(&ser);
			else
				meter_series_init(&ser); /* the sandbox's first incarnation opens */
		} else if (x->at_end) {
			meter_series_resume(&ser, &x->end); /* nothing of it in the window */
		} else {
			continue;
		}
		for (; i < n && s[i].order == k; i++) {
			struct meter_sample m = {
			        .incarnation = s[i].inc, .t_us = s[i].t, .cpu_us = s[i].cpu};
			st = meter_series_next(&ser, &m, j->started, &sp);
			if (st == METER_SKIP)
				continue;
			if (st != METER_OK || (st = rate_clipped(j, &sp, end)) != METER_OK)
				goto rule;
		}
		/* an end after its last sample: one more interval, with no CPU */
		st = meter_series_close(&ser, j->started, end, &sp);
		if (st == METER_OK && (st = rate_span(j, &sp)) != METER_OK)
			goto rule;
	}
	/* An hour of one sandbox is stored in 64 bits (usage_hourly): 256 vCPUs and 1 TiB
	 * use a thousandth of that; more is a counter out of all reason. */
	for (size_t i = 0; i < j->nb; i++) {
		const struct meter_usage *u = &j->b[i].u;
		if (u->cpu_measured_us > INT64_MAX || u->cpu_billed_us > INT64_MAX ||
		    u->mem_mgib_us > INT64_MAX || u->wall_us > INT64_MAX) {
			ru_cannot_rate(j,
			               "an hour of its usage is out of range (a CPU counter past "
			               "all reason?)");
			return false;
		}
	}
	log_unpriced(j);
	return true;
rule:
	ru_cannot_rate(j, meter_strerror(st));
	return false;
}
