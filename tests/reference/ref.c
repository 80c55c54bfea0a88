/*
 * The rules, once more, the plain way (see ref.h). Nothing here comes from
 * meter/: calendar, rounding and ordering are written again on purpose.
 */
#include "tests/reference/ref.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HOUR_US ((int64_t)3600000000)

/* One interval of a sandbox, rated. */
struct iv {
	int sandbox, seq;
	int64_t start, end, cpu, billed;
	bool busy;
	const struct ref_plan *plan;
};

/* round(num / den), half up; num >= 0, den > 0. */
static ref_int half_up(ref_int num, ref_int den)
{
	return (2 * num + den) / (2 * den);
}

/* The first day of the month holding the day count d (days since 1970-01-01). */
static int64_t days_from_civil(int64_t y, int64_t m, int64_t d)
{
	y -= m <= 2;
	int64_t era = (y >= 0 ? y : y - 399) / 400;
	int64_t yoe = y - era * 400;
	int64_t doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
	int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
	return era * 146097 + doe - 719468;
}

static void civil_from_days(int64_t z, int64_t *y, int64_t *m)
{
	z += 719468;
	int64_t era = (z >= 0 ? z : z - 146096) / 146097;
	int64_t doe = z - era * 146097;
	int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
	int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
	int64_t mp = (5 * doy + 2) / 153;
	*m = mp + (mp < 10 ? 3 : -9);
	*y = yoe + era * 400 + (*m <= 2);
}

/* The start of the UTC month an interval ending at end belongs to: that of end - 1 µs. */
static int64_t month_of_end(int64_t end)
{
	int64_t us = end - 1, day = us / 86400000000;
	if (us % 86400000000 < 0)
		day--;
	int64_t y, m;
	civil_from_days(day, &y, &m);
	return days_from_civil(y, m, 1) * 86400000000;
}

/* The plan in force for an interval ending at end: the latest that took effect before. */
static const struct ref_plan *plan_at(const struct ref_input *in, int64_t end)
{
	const struct ref_plan *p = NULL;
	for (int i = 0; i < in->nplans; i++)
		if (in->plans[i].from_us < end && (p == NULL || in->plans[i].from_us > p->from_us))
			p = &in->plans[i];
	return p;
}

struct inc_first {
	int64_t inc, first;
};

static int by_first(const void *a, const void *b)
{
	const struct inc_first *x = a, *y = b;
	if (x->first != y->first)
		return x->first < y->first ? -1 : 1;
	return x->inc < y->inc ? -1 : x->inc > y->inc;
}

static const struct ref_input *sort_in; /* for by_ts: qsort has no context */

static int by_ts(const void *a, const void *b)
{
	const struct ref_sample *x = &sort_in->samples[*(const int *)a],
	                        *y = &sort_in->samples[*(const int *)b];
	if (x->ts_us != y->ts_us)
		return x->ts_us < y->ts_us ? -1 : 1;
	return *(const int *)a - *(const int *)b;
}

/* Appends an interval of sandbox sb, rated by the plan in force at its end. */
static void rate(const struct ref_input *in, int sb, int64_t start, int64_t end, int64_t cpu,
                 struct iv *out, int *n)
{
	const struct ref_sandbox *s = &in->sandboxes[sb];
	struct iv v = {.sandbox = sb,
	               .seq = *n,
	               .start = start,
	               .end = end,
	               .cpu = cpu,
	               .billed = cpu,
	               .plan = plan_at(in, end)};
	int64_t dt = end - start;
	v.busy = cpu > 0;
	if (v.plan && dt > 0) {
		/* busy: above the floor, exactly */
		v.busy =
		        (ref_int)cpu * 1000000000 > (ref_int)v.plan->floor_ppm * s->vcpu_milli * dt;
		/* rule 4: the floor and the cap, each to the nearest µs (half up) */
		ref_int lo = half_up((ref_int)v.plan->floor_ppm * s->vcpu_milli * dt, 1000000000);
		ref_int hi = half_up((ref_int)s->vcpu_milli * dt, 1000);
		if (v.billed < lo)
			v.billed = (int64_t)lo;
		if (v.billed > hi)
			v.billed = (int64_t)hi;
	}
	out[(*n)++] = v;
}

/* Rule 3: a piece of the series, cut at its incarnation's end when it passes it. */
static void rate_upto(const struct ref_input *in, int sb, int64_t start, int64_t end, int64_t cpu,
                      int64_t until, struct iv *out, int *n)
{
	if (until == REF_NONE || end <= until) {
		rate(in, sb, start, end, cpu, out, n);
		return;
	}
	/* up to the end: its time, and the CPU in proportion to it */
	int64_t before = 0;
	if (start < until) {
		before = (int64_t)half_up((ref_int)cpu * (until - start), (ref_int)end - start);
		rate(in, sb, start, until, before, out, n);
	}
	/* after it: the CPU alone, as measured, with no time */
	if (cpu > before)
		rate(in, sb, end, end, cpu - before, out, n);
}

static int64_t not_before(int64_t t, int64_t start)
{
	return t != REF_NONE && start != REF_NONE && t < start ? start : t;
}

/* Every interval of sandbox sb by rules 1 to 4, 6 and 9, in the order of its series. */
static int intervals(const struct ref_input *in, int sb, struct iv *out)
{
	static int idx[REF_SAMPLES];
	static struct inc_first incs[REF_SAMPLES];
	const struct ref_sandbox *s = &in->sandboxes[sb];
	int n = 0, ni = 0, nout = 0;
	/* its samples; a key (incarnation, time) written twice counts once, the first */
	for (int i = 0; i < in->nsamples; i++) {
		const struct ref_sample *x = &in->samples[i];
		if (x->sandbox != sb)
			continue;
		bool dup = false;
		for (int k = 0; k < n && !dup; k++)
			dup = in->samples[idx[k]].incarnation == x->incarnation &&
			      in->samples[idx[k]].ts_us == x->ts_us;
		if (!dup)
			idx[n++] = i;
	}
	/* incarnations in the order they began */
	for (int k = 0; k < n; k++) {
		const struct ref_sample *x = &in->samples[idx[k]];
		int j = 0;
		while (j < ni && incs[j].inc != x->incarnation)
			j++;
		if (j == ni)
			incs[ni++] = (struct inc_first){x->incarnation, x->ts_us};
		else if (x->ts_us < incs[j].first)
			incs[j].first = x->ts_us;
	}
	qsort(incs, (size_t)ni, sizeof incs[0], by_first);
	sort_in = in;
	qsort(idx, (size_t)n, sizeof idx[0], by_ts);
	int64_t stop = not_before(s->stopped_us, s->started_us);
	/* the platform's stop ends the last incarnation begun at or before it */
	int stopped = -1;
	for (int j = 0; j < ni; j++)
		if (stop != REF_NONE && not_before(incs[j].first, s->started_us) <= stop)
			stopped = j;
	for (int j = 0; j < ni; j++) {
		/* its end: the collector's (its earliest sample marked ended) or that stop */
		int64_t until = REF_NONE, last_t = REF_NONE, top = 0;
		for (int k = 0; k < n; k++) {
			const struct ref_sample *x = &in->samples[idx[k]];
			int64_t t = not_before(x->ts_us, s->started_us);
			if (x->incarnation == incs[j].inc && x->ended &&
			    (until == REF_NONE || t < until))
				until = t;
		}
		if (j == stopped && (until == REF_NONE || stop < until))
			until = stop;
		for (int k = 0; k < n; k++) {
			const struct ref_sample *x = &in->samples[idx[k]];
			if (x->incarnation != incs[j].inc)
				continue;
			/* a sample stamped before the start counts at the start */
			int64_t t = not_before(x->ts_us, s->started_us);
			if (last_t == REF_NONE) {
				/* rule 2: all its CPU; from the start for the sandbox's first one
				 */
				int64_t from =
				        j == 0 && s->started_us != REF_NONE && s->started_us < t
				                ? s->started_us
				                : t;
				rate_upto(in, sb, from, t, x->cpu_us, until, out, &nout);
				top = x->cpu_us;
			} else {
				/* rule 1: what the counter gained over its highest value */
				int64_t cpu = x->cpu_us > top ? x->cpu_us - top : 0;
				if (x->cpu_us > top)
					top = x->cpu_us;
				if (t > last_t || cpu > 0)
					rate_upto(in, sb, last_t, t, cpu, until, out, &nout);
			}
			last_t = t;
		}
		/* rule 3: an end after its last sample adds one interval with no CPU */
		if (until != REF_NONE && until > last_t)
			rate(in, sb, last_t, until, 0, out, &nout);
	}
	/* stopped before any sample: from the start to the stop */
	if (n == 0 && stop != REF_NONE && s->started_us != REF_NONE && stop > s->started_us)
		rate(in, sb, s->started_us, stop, 0, out, &nout);
	return nout;
}

static int by_end(const void *a, const void *b)
{
	const struct iv *x = a, *y = b;
	if (x->end != y->end)
		return x->end < y->end ? -1 : 1;
	int c = strcmp(sort_in->sandboxes[x->sandbox].id, sort_in->sandboxes[y->sandbox].id);
	if (c != 0)
		return c;
	return x->seq - y->seq;
}

/* What a month of an account sums to under one plan. */
struct sums {
	ref_int billed, mem, wall;    /* used */
	ref_int cbilled, cmem, cwall; /* the trial's part */
};

/* All the priced intervals of an account, in rule 8's order; *n of them (malloc'd). */
static struct iv *account_intervals(const struct ref_input *in, int account, int *n)
{
	struct iv *all = malloc(sizeof *all * (3 * REF_SAMPLES + REF_SANDBOXES));
	static struct iv one[3 * REF_SAMPLES + 1];
	*n = 0;
	if (all == NULL)
		return NULL;
	for (int sb = 0; sb < in->nsandboxes; sb++) {
		if (in->sandboxes[sb].account != account)
			continue;
		int k = intervals(in, sb, one);
		for (int i = 0; i < k; i++)
			if (one[i].plan != NULL) /* rule 6: unpriced, never billed */
				all[(*n)++] = one[i];
	}
	sort_in = in;
	qsort(all, (size_t)*n, sizeof *all, by_end);
	return all;
}

bool ref_invoice(const struct ref_input *in, int account, int64_t month_us, struct ref_invoice *out)
{
	struct sums per[REF_PLANS];
	memset(per, 0, sizeof per);
	memset(out, 0, sizeof *out);
	int n;
	struct iv *all = account_intervals(in, account, &n);
	if (all == NULL)
		return false;
	ref_int left = in->accounts[account].grant_us;
	for (int i = 0; i < n; i++) {
		const struct iv *v = &all[i];
		const struct ref_sandbox *s = &in->sandboxes[v->sandbox];
		ref_int dt = v->end - v->start, cwall = 0, cbilled = 0;
		/* rule 8: in the order of the ends, the crossing one in proportion */
		if (left > 0 && dt <= left) {
			cwall = dt;
			cbilled = v->billed;
		} else if (left > 0) {
			cwall = left;
			cbilled = half_up((ref_int)v->billed * left, dt);
		}
		left -= cwall;
		if (month_of_end(v->end) != month_us)
			continue;
		struct sums *p = &per[v->plan - in->plans];
		p->billed += v->billed;
		p->mem += (ref_int)s->mem_milli * dt;
		p->wall += dt;
		p->cbilled += cbilled;
		p->cmem += (ref_int)s->mem_milli * cwall;
		p->cwall += cwall;
	}
	free(all);
	/* lines in the order of the plans' ids; money once per line (rule 7) */
	ref_int total = 0, credit = 0, cwall = 0;
	int order[REF_PLANS];
	for (int k = 0; k < in->nplans; k++) {
		int j = k;
		while (j > 0 && in->plans[order[j - 1]].id > in->plans[k].id) {
			order[j] = order[j - 1];
			j--;
		}
		order[j] = k;
	}
	for (int o = 0; o < in->nplans; o++) {
		int k = order[o];
		const struct ref_plan *pl = &in->plans[k];
		const struct sums *p = &per[k];
		if (p->billed == 0 && p->mem == 0 && p->wall == 0)
			continue;
		ref_int cpu = half_up(p->billed * pl->cpu_nano, HOUR_US);
		ref_int mem = half_up(p->mem * pl->mem_nano, (ref_int)HOUR_US * 1000);
		struct ref_line *l = &out->lines[out->nlines++];
		snprintf(l->item, sizeof l->item, "cpu");
		snprintf(l->plan, sizeof l->plan, "%s", pl->name);
		l->amount_nano = (int64_t)cpu;
		l = &out->lines[out->nlines++];
		snprintf(l->item, sizeof l->item, "memory");
		snprintf(l->plan, sizeof l->plan, "%s", pl->name);
		l->amount_nano = (int64_t)mem;
		total += cpu + mem;
		/* the trial's part at the same prices, each priced as its line is */
		credit += half_up(p->cbilled * pl->cpu_nano, HOUR_US) +
		          half_up(p->cmem * pl->mem_nano, (ref_int)HOUR_US * 1000);
		cwall += p->cwall;
	}
	if (cwall > 0 || credit > 0) {
		struct ref_line *l = &out->lines[out->nlines++];
		snprintf(l->item, sizeof l->item, "trial_credit");
		l->amount_nano = -(int64_t)credit;
		total -= credit;
	}
	out->total_nano = (int64_t)total;
	return total < INT64_MAX && total > INT64_MIN;
}

int64_t ref_trial_used(const struct ref_input *in, int account)
{
	int n;
	struct iv *all = account_intervals(in, account, &n);
	ref_int wall = 0;
	for (int i = 0; all && i < n; i++)
		wall += all[i].end - all[i].start;
	free(all);
	int64_t grant = in->accounts[account].grant_us;
	return wall < grant ? (int64_t)wall : grant;
}

int ref_sandbox_hours(const struct ref_input *in, int sb, struct ref_hour *out, int cap)
{
	static struct iv one[3 * REF_SAMPLES + 1];
	int k = intervals(in, sb, one), n = 0;
	const struct ref_sandbox *s = &in->sandboxes[sb];
	for (int i = 0; i < k; i++) {
		const struct iv *v = &one[i];
		if (v->plan == NULL)
			continue;
		/* the hour of its end: an end on the hour belongs to the hour before */
		int64_t last = v->end - 1, hour = last / HOUR_US * HOUR_US;
		if (last % HOUR_US < 0)
			hour -= HOUR_US;
		int h = 0;
		while (h < n && out[h].hour_us != hour)
			h++;
		if (h == n) {
			if (n == cap)
				return -1;
			/* kept in time order: insert */
			h = n;
			while (h > 0 && out[h - 1].hour_us > hour) {
				out[h] = out[h - 1];
				h--;
			}
			out[h] = (struct ref_hour){.hour_us = hour};
			n++;
		}
		ref_int dt = v->end - v->start;
		out[h].cpu_measured += v->cpu;
		out[h].cpu_billed += v->billed;
		out[h].wall += dt;
		out[h].mem += (ref_int)s->mem_milli * dt;
		if (v->busy)
			out[h].busy += dt;
		else
			out[h].idle += dt;
	}
	return n;
}
