#include "meter/rating.h"

#include "meter/checked.h"

enum meter_status meter_interval_rate(const struct meter_size *size, int64_t floor_ppm,
                                      const struct meter_span *span, struct meter_interval *out)
{
	int64_t dt;
	if (meter_size_check(size) != METER_OK || floor_ppm < 0 || floor_ppm > METER_PPM)
		return METER_ERANGE;
	if (span->cpu_us < 0 || !ck_sub(span->end_us, span->start_us, &dt) || dt < 0)
		return METER_EINVAL;

	struct meter_interval iv = {
	        .start_us = span->start_us,
	        .end_us = span->end_us,
	        .cpu_us = span->cpu_us,
	        .billed_us = span->cpu_us,
	        .busy = span->cpu_us > 0,
	};
	if (dt > 0) {
		/* floor x vCPUs x dt, exactly, in µs x 10^9 (ppm x milli). */
		meter_i128 floor_exact = (meter_i128)floor_ppm * size->vcpu_milli * dt;
		int64_t lo, hi;
		if (!ck_div_round(floor_exact, METER_PPM * METER_MILLI, &lo) ||
		    !ck_div_round((meter_i128)size->vcpu_milli * dt, METER_MILLI, &hi))
			return METER_EOVERFLOW;
		iv.busy = (meter_i128)span->cpu_us * METER_PPM * METER_MILLI > floor_exact;
		if (iv.billed_us < lo)
			iv.billed_us = lo;
		if (iv.billed_us > hi)
			iv.billed_us = hi;
	}
	*out = iv;
	return METER_OK;
}

void meter_series_init(struct meter_series *s)
{
	*s = (struct meter_series){0};
}

void meter_series_resume(struct meter_series *s, const struct meter_sample *last)
{
	s->opened = true;
	s->last = *last;
}

void meter_series_after_other(struct meter_series *s)
{
	/* INT64_MIN is no inode: the next sample is always of another incarnation. */
	s->opened = true;
	s->last = (struct meter_sample){.incarnation = INT64_MIN, .t_us = INT64_MIN, .cpu_us = 0};
}

enum meter_status meter_series_next(struct meter_series *s, const struct meter_sample *smp,
                                    int64_t started_at_us, struct meter_span *out)
{
	if (smp->cpu_us < 0)
		return METER_EINVAL;
	/* A sample stamped before the sandbox started (a clock behind) counts at started_at. */
	int64_t t = smp->t_us;
	if (started_at_us != METER_TIME_NONE && t < started_at_us)
		t = started_at_us;
	struct meter_span sp = {.start_us = t, .end_us = t, .cpu_us = smp->cpu_us};
	if (!s->opened) {
		/* The sandbox's first incarnation may start at started_at. */
		if (started_at_us != METER_TIME_NONE && started_at_us < t)
			sp.start_us = started_at_us;
	} else if (smp->incarnation == s->last.incarnation) {
		if (t < s->last.t_us)
			return METER_EORDER;
		/* The counter never goes down within an incarnation: a sample below the
		 * highest one seen was stamped out of order and adds no CPU. */
		sp.start_us = s->last.t_us;
		sp.cpu_us = smp->cpu_us > s->last.cpu_us ? smp->cpu_us - s->last.cpu_us : 0;
		if (t == s->last.t_us && sp.cpu_us == 0)
			return METER_SKIP;
		s->last.t_us = t;
		if (smp->cpu_us > s->last.cpu_us)
			s->last.cpu_us = smp->cpu_us;
		*out = sp;
		return METER_OK;
	}
	/* else: a new incarnation counts from zero over a zero-length interval. */
	s->opened = true;
	s->last = (struct meter_sample){
	        .incarnation = smp->incarnation, .t_us = t, .cpu_us = smp->cpu_us};
	*out = sp;
	return METER_OK;
}

enum meter_status meter_series_close(const struct meter_series *s, int64_t started_at_us,
                                     int64_t stopped_at_us, struct meter_span *out)
{
	if (stopped_at_us == METER_TIME_NONE)
		return METER_SKIP;
	int64_t from = s->opened ? s->last.t_us : started_at_us;
	if (from == METER_TIME_NONE || stopped_at_us <= from)
		return METER_SKIP;
	*out = (struct meter_span){.start_us = from, .end_us = stopped_at_us, .cpu_us = 0};
	return METER_OK;
}

enum meter_status meter_usage_add_interval(struct meter_usage *u, const struct meter_size *size,
                                           const struct meter_interval *iv)
{
	struct meter_usage t = *u;
	int64_t dt;
	if (!ck_sub(iv->end_us, iv->start_us, &dt) || dt < 0)
		return METER_EINVAL;
	/* Both factors fit in 64 bits: the product always fits in 128. */
	meter_i128 mem = (meter_i128)size->mem_mgib * dt;
	if (!ck_add_q(t.cpu_measured_us, iv->cpu_us, &t.cpu_measured_us) ||
	    !ck_add_q(t.cpu_billed_us, iv->billed_us, &t.cpu_billed_us) ||
	    !ck_add_q(t.wall_us, dt, &t.wall_us) || !ck_add_q(t.mem_mgib_us, mem, &t.mem_mgib_us))
		return METER_EOVERFLOW;
	if (iv->busy ? !ck_add_q(t.busy_us, dt, &t.busy_us) : !ck_add_q(t.idle_us, dt, &t.idle_us))
		return METER_EOVERFLOW;
	*u = t;
	return METER_OK;
}

enum meter_status meter_usage_add(struct meter_usage *u, const struct meter_usage *v)
{
	struct meter_usage t = *u;
	if (!ck_add_q(t.cpu_measured_us, v->cpu_measured_us, &t.cpu_measured_us) ||
	    !ck_add_q(t.cpu_billed_us, v->cpu_billed_us, &t.cpu_billed_us) ||
	    !ck_add_q(t.busy_us, v->busy_us, &t.busy_us) ||
	    !ck_add_q(t.idle_us, v->idle_us, &t.idle_us) ||
	    !ck_add_q(t.wall_us, v->wall_us, &t.wall_us) ||
	    !ck_add_q(t.mem_mgib_us, v->mem_mgib_us, &t.mem_mgib_us))
		return METER_EOVERFLOW;
	*u = t;
	return METER_OK;
}

enum meter_status meter_usage_sub(struct meter_usage *u, const struct meter_usage *v)
{
	struct meter_usage t = *u;
	if (!ck_sub_q(t.cpu_measured_us, v->cpu_measured_us, &t.cpu_measured_us) ||
	    !ck_sub_q(t.cpu_billed_us, v->cpu_billed_us, &t.cpu_billed_us) ||
	    !ck_sub_q(t.busy_us, v->busy_us, &t.busy_us) ||
	    !ck_sub_q(t.idle_us, v->idle_us, &t.idle_us) ||
	    !ck_sub_q(t.wall_us, v->wall_us, &t.wall_us) ||
	    !ck_sub_q(t.mem_mgib_us, v->mem_mgib_us, &t.mem_mgib_us))
		return METER_EOVERFLOW;
	*u = t;
	return METER_OK;
}

enum meter_status meter_usage_cost(const struct meter_usage *u, const struct meter_plan *p,
                                   struct meter_cost *out)
{
	struct meter_cost c;
	enum meter_status st;
	if ((st = meter_money_of(u->cpu_billed_us, p->cpu_vcpu_hour, METER_US_PER_HOUR, &c.cpu)) ||
	    (st = meter_money_of(u->mem_mgib_us, p->memory_gib_hour,
	                         METER_US_PER_HOUR * METER_MILLI, &c.memory)) ||
	    (st = meter_money_add(c.cpu, c.memory, &c.total)))
		return st;
	*out = c;
	return METER_OK;
}

enum meter_status meter_span_rate(const struct meter_plan *plans, size_t nplans,
                                  const struct meter_size *size, const struct meter_span *sp,
                                  struct meter_interval *out, const struct meter_plan **plan)
{
	const struct meter_plan *p = meter_plan_at(plans, nplans, sp->end_us);
	/* Unpriced: measured as it is, with no floor to raise it. */
	enum meter_status st = meter_interval_rate(size, p ? p->cpu_floor_ppm : 0, sp, out);
	if (st == METER_OK)
		*plan = p;
	return st;
}

static enum meter_status rate_span(const struct meter_plan *plans, size_t nplans,
                                   const struct meter_size *size, const struct meter_span *sp,
                                   meter_emit_fn emit, void *ctx)
{
	const struct meter_plan *plan;
	struct meter_interval iv;
	enum meter_status st = meter_span_rate(plans, nplans, size, sp, &iv, &plan);
	return st ? st : emit(ctx, &iv, plan);
}

static int64_t at_least(int64_t t, int64_t floor_us)
{
	if (t == METER_TIME_NONE || floor_us == METER_TIME_NONE)
		return t;
	return t < floor_us ? floor_us : t;
}

int64_t meter_incarnation_end(int64_t started_at_us, int64_t stop_us, int64_t begin_us,
                              int64_t next_begin_us, int64_t collector_end_us)
{
	int64_t stop = at_least(stop_us, started_at_us), begin = at_least(begin_us, started_at_us),
	        next = at_least(next_begin_us, started_at_us),
	        end = at_least(collector_end_us, started_at_us);
	bool applies = stop != METER_TIME_NONE && begin != METER_TIME_NONE && begin <= stop &&
	               (next == METER_TIME_NONE || next > stop);
	if (applies && (end == METER_TIME_NONE || stop < end))
		return stop;
	return end;
}

size_t meter_span_clip(const struct meter_span *sp, int64_t end_us, struct meter_span out[2])
{
	if (end_us == METER_TIME_NONE || sp->end_us <= end_us) {
		out[0] = *sp;
		return 1;
	}
	int64_t share = 0;
	size_t n = 0;
	if (sp->start_us < end_us) {
		/* cpu x (end - start) / (span's length), half up: both factors fit in 64 bits */
		meter_i128 num = (meter_i128)sp->cpu_us * ((meter_i128)end_us - sp->start_us);
		meter_i128 den = (meter_i128)sp->end_us - sp->start_us;
		share = (int64_t)((2 * num + den) / (2 * den));
		out[n++] = (struct meter_span){
		        .start_us = sp->start_us, .end_us = end_us, .cpu_us = share};
	}
	if (sp->cpu_us - share > 0)
		out[n++] = (struct meter_span){
		        .start_us = sp->end_us, .end_us = sp->end_us, .cpu_us = sp->cpu_us - share};
	return n;
}

/* Rates a span clipped at its incarnation's end, part by part. */
static enum meter_status rate_clipped(const struct meter_plan *plans, size_t nplans,
                                      const struct meter_size *size, const struct meter_span *sp,
                                      int64_t end_us, meter_emit_fn emit, void *ctx)
{
	struct meter_span part[2];
	size_t k = meter_span_clip(sp, end_us, part);
	enum meter_status st = METER_OK;
	for (size_t i = 0; i < k && st == METER_OK; i++)
		st = rate_span(plans, nplans, size, &part[i], emit, ctx);
	return st;
}

enum meter_status meter_rate_sandbox(const struct meter_plan *plans, size_t nplans,
                                     const struct meter_size *size, int64_t started_at_us,
                                     int64_t stop_us, const struct meter_end *ends, size_t nends,
                                     const struct meter_sample *samples, size_t n,
                                     meter_emit_fn emit, void *ctx)
{
	struct meter_series s;
	struct meter_span sp;
	enum meter_status st;
	meter_series_init(&s);
	if (n == 0) { /* stopped before any sample: [started_at, stop] */
		st = meter_series_close(&s, started_at_us, stop_us, &sp);
		return st == METER_SKIP ? METER_OK
		       : st             ? st
		                        : rate_span(plans, nplans, size, &sp, emit, ctx);
	}
	for (size_t i = 0; i < n;) {
		/* one incarnation's run: [i, k) */
		size_t k = i + 1;
		while (k < n && samples[k].incarnation == samples[i].incarnation)
			k++;
		/* An incarnation that began a run of its own must not come back. */
		for (size_t j = 0; j < i; j++)
			if (samples[j].incarnation == samples[i].incarnation)
				return METER_EORDER;
		int64_t collector_end = METER_TIME_NONE;
		for (size_t e = 0; e < nends; e++)
			if (ends[e].incarnation == samples[i].incarnation &&
			    (collector_end == METER_TIME_NONE || ends[e].t_us < collector_end))
				collector_end = ends[e].t_us;
		int64_t end = meter_incarnation_end(started_at_us, stop_us, samples[i].t_us,
		                                    k < n ? samples[k].t_us : METER_TIME_NONE,
		                                    collector_end);
		for (; i < k; i++) {
			st = meter_series_next(&s, &samples[i], started_at_us, &sp);
			if (st == METER_SKIP)
				continue;
			if (st || (st = rate_clipped(plans, nplans, size, &sp, end, emit, ctx)) !=
			                  METER_OK)
				return st;
		}
		st = meter_series_close(&s, started_at_us, end, &sp);
		if (st == METER_OK)
			st = rate_span(plans, nplans, size, &sp, emit, ctx);
		if (st != METER_OK && st != METER_SKIP)
			return st;
	}
	return METER_OK;
}

int64_t meter_hour_of(int64_t end_us)
{
	/* (start, end]: an interval ending on the hour belongs to the hour before. */
	if (end_us == INT64_MIN)
		return INT64_MIN;
	int64_t x = end_us - 1;
	int64_t q = x / METER_US_PER_HOUR;
	if (x % METER_US_PER_HOUR < 0)
		q--;
	return q * METER_US_PER_HOUR;
}

enum meter_status meter_plan_sum_add(struct meter_plan_sum *sums, size_t *n, size_t cap,
                                     int64_t plan, const struct meter_usage *u)
{
	size_t i = 0;
	while (i < *n && sums[i].plan_id != plan)
		i++;
	if (i == *n && *n == cap)
		return METER_ERANGE;
	struct meter_usage sum = i < *n ? sums[i].u : (struct meter_usage){0};
	enum meter_status st = meter_usage_add(&sum, u);
	if (st != METER_OK)
		return st;
	if (i == *n)
		(*n)++;
	sums[i] = (struct meter_plan_sum){.plan_id = plan, .u = sum};
	return METER_OK;
}
