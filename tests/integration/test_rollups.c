/*
 * The rollups against rating the raw samples, with meter-api's rollup worker
 * running on a real PostgreSQL: usage rolled up by two processes from
 * samples that come late, shuffled and twice equals what the reference
 * (tests/reference/, written apart from meter/) gives from all of them, and
 * the API and the month's invoice say the same; also around stops,
 * overlapping incarnations and a clock behind; a cancelled rating is tried
 * again, never parked; a long-lived sandbox is rated from its checkpoint;
 * and dropping old raw partitions changes no invoice and no later rating.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "meter/money.h"
#include "meter/rating.h"
#include "meter/timefmt.h"
#include "tests/reference/ref.h"
#include "tests/support/apifx.h"
#include "tests/support/http.h"

#define NSB    5
#define S10(x) ((int64_t)(x)*10000000) /* tens of seconds of CPU, in µs */
struct gen {
	struct meter_sample s[2000];
	size_t n;
};

static unsigned int seed_state = 12345;
static int rnd(int n)
{
	return (int)(rand_r(&seed_state) % (unsigned)n);
}

static void generate(struct gen *g, int64_t start)
{
	int64_t t = start + 5000000, cpu = 0, inc = 1000 + rnd(1000);
	g->n = 0;
	for (int k = 0; k < 400; k++) {
		t += 10000000 + rnd(3000000); /* about every 10 s, jittered */
		if (rnd(10) == 0)
			t += 300000000; /* a gap of 5 minutes */
		cpu += rnd(25000000);   /* up to 2.5 vCPUs worth: clamped */
		if (rnd(60) == 0)
			cpu = rnd(1000000); /* the counter restarted */
		if (rnd(150) == 0) {
			inc += 7; /* a new cgroup under the same id */
			cpu = rnd(2000000);
		}
		g->s[g->n++] = (struct meter_sample){.incarnation = inc, .t_us = t, .cpu_us = cpu};
	}
}

static void insert(struct fx *f, const char *sb, const struct meter_sample *s)
{
	char q[512], ts[METER_TIME_BUF];
	meter_time_format(s->t_us, ts, sizeof ts);
	snprintf(q, sizeof q,
	         "INSERT INTO samples (sandbox_id, incarnation, ts, host, cpu_usage_us) "
	         "VALUES ('%s', %lld, '%s', 'gen', %lld) ON CONFLICT DO NOTHING",
	         sb, (long long)s->incarnation, ts, (long long)s->cpu_us);
	sql(f, q);
}

/*
 * The reference's view (tests/reference/ref.c, written apart from meter/) of
 * sandboxes of acme: 2 vCPU, 4 GiB, the default plan, no trial grant. Each
 * call adds one sandbox and its samples, in any order; returns its index.
 */
static int ref_add(struct ref_input *in, const char *sb, int64_t started, int64_t stopped,
                   const struct meter_sample *s, size_t n)
{
	if (in->nplans == 0) {
		in->plans[in->nplans++] = (struct ref_plan){.id = 1,
		                                            .name = "default",
		                                            .cpu_nano = 25000000,
		                                            .mem_nano = 7500000,
		                                            .floor_ppm = 25000};
		meter_time_parse("2026-09-25T00:00:00Z", &in->plans[0].from_us);
		in->accounts[in->naccounts++] = (struct ref_account){.id = "acme"};
	}
	int k = in->nsandboxes++;
	in->sandboxes[k] =
	        (struct ref_sandbox){.account = 0,
	                             .vcpu_milli = 2000,
	                             .mem_milli = 4000,
	                             .started_us = started == METER_TIME_NONE ? REF_NONE : started,
	                             .stopped_us = stopped == METER_TIME_NONE ? REF_NONE : stopped};
	snprintf(in->sandboxes[k].id, REF_ID, "%s", sb);
	for (size_t i = 0; i < n; i++)
		in->samples[in->nsamples++] = (struct ref_sample){.sandbox = k,
		                                                  .incarnation = s[i].incarnation,
		                                                  .ts_us = s[i].t_us,
		                                                  .cpu_us = s[i].cpu_us};
	return k;
}

static void usage_from_two_processes_rollups_equals_rating_the_raw_samples(void **state)
{
	struct fx *f = *state;
	seed(f);
	/* The last month by the clock, its 5th at 22:00: within the second meter-api's
	 * grace below on any day, so the samples land in its draft, not in adjustments. */
	int64_t now = (int64_t)time(NULL) * 1000000;
	int64_t month = meter_month_start(meter_month_start(now) - 1);
	int64_t start = month + INT64_C(4) * 86400000000 + INT64_C(22) * 3600000000;
	char usage_path[128], from[METER_TIME_BUF], to[METER_TIME_BUF];
	meter_time_format(month + INT64_C(4) * 86400000000, from, sizeof from);
	meter_time_format(month + INT64_C(7) * 86400000000, to, sizeof to);
	snprintf(usage_path, sizeof usage_path, "/v1/accounts/acme/usage?from=%s&to=%s", from, to);
	static struct gen g[NSB];
	for (int i = 0; i < NSB; i++) {
		char q[512], st[METER_TIME_BUF], sp[METER_TIME_BUF];
		generate(&g[i], start);
		meter_time_format(start, st, sizeof st);
		meter_time_format(g[i].s[g[i].n - 1].t_us + 7000000, sp, sizeof sp);
		snprintf(q, sizeof q,
		         "INSERT INTO sandboxes (id, account_id, vcpus, memory_gib, started_at, "
		         "stopped_at) VALUES ('gen-%d', 'acme', 2, 4, '%s', %s%s%s)",
		         i, st, i % 2 ? "'" : "", i % 2 ? sp : "NULL", i % 2 ? "'" : "");
		sql(f, q);
		snprintf(q, sizeof q,
		         "INSERT INTO rollup_queue VALUES ('gen-%d', '-infinity', now())", i);
		sql(f, q);
	}
	/* Two meter-api processes, two rollup workers taking marks from one queue. The
	 * second's grace is long (90 days): its upkeep, as it starts, would otherwise make
	 * the last month (past the default grace after its 3rd day) final before the
	 * samples below arrive, and they would go to this month's adjustments. */
	assert_true(api_start(&f->api2, METER_API_BIN, f->db.api_url, "--invoice-grace=2160h"));
	/* Three waves: every other sample, then the rest late and shuffled, then duplicates. */
	for (int wave = 0; wave < 3; wave++) {
		for (int i = 0; i < NSB; i++) {
			char sb[16];
			snprintf(sb, sizeof sb, "gen-%d", i);
			size_t n = g[i].n;
			for (size_t k = 0; k < n; k++) {
				size_t j = wave == 1 ? n - 1 - k : k;
				if ((wave == 0 && j % 2 == 0) || (wave == 1 && j % 2 == 1) ||
				    (wave == 2 && rnd(4) == 0))
					insert(f, sb, &g[i].s[j]);
			}
		}
		wait_rollups(f);
	}
	/* Per sandbox and hour, the rollups hold what the reference gives from all the
	 * samples, in the order they were generated (it sorts them itself). */
	static struct ref_input in;
	memset(&in, 0, sizeof in);
	for (int i = 0; i < NSB; i++) {
		char sb[16];
		snprintf(sb, sizeof sb, "gen-%d", i);
		int64_t stopped = i % 2 ? g[i].s[g[i].n - 1].t_us + 7000000 : METER_TIME_NONE;
		int k = ref_add(&in, sb, start, stopped, g[i].s, g[i].n);
		struct ref_hour hours[64];
		int nh = ref_sandbox_hours(&in, k, hours, 64);
		assert_true(nh >= 2);
		ref_int measured = 0;
		for (int h = 0; h < nh; h++) {
			char q[512];
			snprintf(q, sizeof q,
			         "SELECT concat_ws(' ', cpu_measured_us, cpu_billed_us, busy_us, "
			         "idle_us, wall_us, memory_mgib_us) FROM usage_hourly WHERE "
			         "sandbox_id = '%s' AND hour = 'epoch'::timestamptz + %lld * "
			         "interval '1 microsecond'",
			         sb, (long long)hours[h].hour_us);
			PGresult *r = PQexec(f->db.conn, q);
			char want[256];
			const struct ref_hour *u = &hours[h];
			snprintf(want, sizeof want, "%lld %lld %lld %lld %lld %lld",
			         (long long)u->cpu_measured, (long long)u->cpu_billed,
			         (long long)u->busy, (long long)u->idle, (long long)u->wall,
			         (long long)u->mem);
			const char *got = PQntuples(r) == 1 ? PQgetvalue(r, 0, 0) : "(no row)";
			if (strcmp(got, want) != 0)
				fail_msg("%s hour %d: rollup %s, reference %s", sb, h, got, want);
			PQclear(r);
			measured += u->cpu_measured;
		}
		assert_true(measured > 0);
		char q[256];
		snprintf(q, sizeof q, "SELECT count(*) FROM usage_hourly WHERE sandbox_id = '%s'",
		         sb);
		assert_int_equal(num(f, q), nh);
		/* and the API says the same */
		struct http_res r = call(f, "GET", usage_path, f->acct, NULL);
		assert_int_equal(r.status, 200);
		cJSON *o = http_json(&r), *x;
		char want[32];
		cJSON_ArrayForEach(x,
		                   cJSON_GetObjectItem(o, "sandboxes")) if (strcmp(str(x, "id"),
		                                                                   sb) == 0) break;
		assert_non_null(x);
		snprintf(want, sizeof want, "%lld.%06lld", (long long)(measured / 1000000),
		         (long long)(measured % 1000000));
		/* the API trims trailing zeros */
		char *z = want + strlen(want) - 1;
		while (*z == '0')
			*z-- = '\0';
		if (*z == '.')
			*z = '\0';
		assert_string_equal(str(x, "cpu_seconds"), want);
		assert_non_null(cJSON_GetObjectItem(o, "data_as_of"));
		cJSON_Delete(o);
		http_free(&r);
	}
	/* The month's invoice is the reference's (no trial here). */
	sql(f, "UPDATE accounts SET trial_grant_seconds = 0 WHERE id = 'acme'");
	wait_rollups(f); /* the grant's change re-covers the trial (trial_queue) */
	struct ref_invoice want;
	assert_true(ref_invoice(&in, 0, month, &want));
	snprintf(usage_path, sizeof usage_path, "/v1/accounts/acme/invoices/%.7s", from);
	struct http_res ir = call(f, "GET", usage_path, f->acct, NULL);
	cJSON *io = http_json(&ir);
	int64_t got_total;
	assert_int_equal(meter_money_parse(str(io, "total_exact"), false, &got_total), METER_OK);
	assert_int_equal(got_total, want.total_nano);
	cJSON_Delete(io);
	http_free(&ir);
	/* account_month agrees with the hours it sums */
	assert_int_equal(
	        num(f, "SELECT count(*) FROM (SELECT account_id, date_trunc('month', hour) m, "
	               "price_plan_id, sum(wall_us) w, sum(cpu_billed_us) b FROM usage_hourly "
	               "GROUP BY 1, 2, 3) h FULL JOIN account_month a ON a.account_id = "
	               "h.account_id AND a.month = h.m::date AND a.price_plan_id = "
	               "h.price_plan_id WHERE h.w IS DISTINCT FROM a.wall_us OR h.b IS "
	               "DISTINCT FROM a.cpu_billed_us"),
	        0);
}

/* Inserts one sample of sandbox sb at "HH:MM:SS" on 2026-10-05, then lets the worker run. */
static void at(struct fx *f, const char *sb, int64_t inc, const char *hms, int64_t cpu_s)
{
	char q[512];
	snprintf(q, sizeof q,
	         "INSERT INTO samples (sandbox_id, incarnation, ts, host, cpu_usage_us) VALUES "
	         "('%s', %lld, '2026-10-05T%sZ', 'h', %lld) ON CONFLICT DO NOTHING",
	         sb, (long long)inc, hms, (long long)cpu_s * 10000000);
	sql(f, q);
	wait_rollups(f);
}

/* The rollups of sb against what the reference gives from these samples at once. */
static void same_as_raw(struct fx *f, const char *sb, const char *started, const char *stopped,
                        const struct meter_sample *s, size_t n)
{
	static struct ref_input in;
	memset(&in, 0, sizeof in);
	int64_t st = METER_TIME_NONE, sp = METER_TIME_NONE;
	if (started)
		meter_time_parse(started, &st);
	if (stopped)
		meter_time_parse(stopped, &sp);
	int k = ref_add(&in, sb, st, sp, s, n);
	struct ref_hour hours[256];
	int nh = ref_sandbox_hours(&in, k, hours, 256);
	assert_true(nh >= 0);
	ref_int u[4] = {0};
	for (int h = 0; h < nh; h++) {
		u[0] += hours[h].cpu_measured;
		u[1] += hours[h].cpu_billed;
		u[2] += hours[h].wall;
		u[3] += hours[h].mem;
	}
	char q[512], want[160];
	snprintf(q, sizeof q,
	         "SELECT concat_ws(' ', sum(cpu_measured_us), sum(cpu_billed_us), sum(wall_us), "
	         "sum(memory_mgib_us)) FROM usage_hourly WHERE sandbox_id = '%s'",
	         sb);
	snprintf(want, sizeof want, "%lld %lld %lld %lld", (long long)u[0], (long long)u[1],
	         (long long)u[2], (long long)u[3]);
	PGresult *r = PQexec(f->db.conn, q);
	if (strcmp(PQgetvalue(r, 0, 0), want) != 0)
		fail_msg("%s: rollups %s, reference %s", sb, PQgetvalue(r, 0, 0), want);
	PQclear(r);
}

static int64_t hms(const char *t)
{
	char full[40];
	int64_t us;
	snprintf(full, sizeof full, "2026-10-05T%sZ", t);
	meter_time_parse(full, &us);
	return us;
}

static void rollups_match_the_raw_rating_around_stops_and_overlaps(void **state)
{
	struct fx *f = *state;
	seed(f);
	/* A stop rated first, then a sample just after it, in the next hour. */
	sql(f, "INSERT INTO sandboxes (id, account_id, vcpus, memory_gib, started_at, stopped_at) "
	       "VALUES ('st', 'acme', 2, 4, '2026-10-05T04:00:00Z', '2026-10-05T04:55:00Z')");
	at(f, "st", 1, "04:50:00", 10);
	at(f, "st", 1, "05:00:10", 12);
	const struct meter_sample st[] = {{1, hms("04:50:00"), S10(10)},
	                                  {1, hms("05:00:10"), S10(12)}};
	same_as_raw(f, "st", "2026-10-05T04:00:00Z", "2026-10-05T04:55:00Z", st, 2);

	/* Incarnations that overlap in time, and samples arriving in a mixed order. */
	sql(f, "INSERT INTO sandboxes (id, account_id, vcpus, memory_gib, started_at, stopped_at) "
	       "VALUES ('ov', 'acme', 2, 4, '2026-10-05T04:40:00Z', '2026-10-05T06:00:00Z')");
	at(f, "ov", 7, "05:10:00", 3);
	at(f, "ov", 5, "04:50:00", 1);
	at(f, "ov", 7, "05:20:00", 4);
	at(f, "ov", 5, "05:40:00", 2);
	const struct meter_sample ov[] = {{5, hms("04:50:00"), S10(1)},
	                                  {5, hms("05:40:00"), S10(2)},
	                                  {7, hms("05:10:00"), S10(3)},
	                                  {7, hms("05:20:00"), S10(4)}};
	same_as_raw(f, "ov", "2026-10-05T04:40:00Z", "2026-10-05T06:00:00Z", ov, 4);

	/* A clock two minutes behind: samples stamped in the hour before the sandbox
	 * started count at started_at, also once the right clock's samples come after. */
	sql(f, "INSERT INTO sandboxes (id, account_id, vcpus, memory_gib, started_at, stopped_at) "
	       "VALUES ('sk', 'acme', 2, 4, '2026-10-05T06:00:30Z', '2026-10-05T06:10:00Z')");
	at(f, "sk", 1, "06:00:31", 1);
	at(f, "sk", 1, "05:58:32", 2);
	at(f, "sk", 1, "05:58:34", 3);
	at(f, "sk", 1, "06:00:40", 4);
	const struct meter_sample sk[] = {{1, hms("05:58:32"), S10(2)},
	                                  {1, hms("05:58:34"), S10(3)},
	                                  {1, hms("06:00:31"), S10(1)},
	                                  {1, hms("06:00:40"), S10(4)}};
	same_as_raw(f, "sk", "2026-10-05T06:00:30Z", "2026-10-05T06:10:00Z", sk, 4);

	/* A sandbox that lived before any price plan is rated as unpriced (rule 6), never
	 * parked, and holds up no other. */
	sql(f, "INSERT INTO sandboxes (id, account_id, vcpus, memory_gib, started_at, stopped_at) "
	       "VALUES ('old', 'acme', 2, 4, '2020-01-01T00:00:00Z', '2020-01-02T00:00:00Z')");
	sql(f, "INSERT INTO rollup_queue VALUES ('old', '-infinity', now() - interval '1 day')");
	at(f, "st", 1, "05:30:00", 20);
	assert_true(num(f, "SELECT count(*) FROM rollup_queue WHERE sandbox_id = 'old'") == 0);
	assert_true(num(f, "SELECT count(*) FROM usage_unpriced WHERE sandbox_id = 'old' AND "
	                   "wall_us = 86400000000") == 1);
	assert_true(num(f, "SELECT count(*) FROM usage_hourly WHERE sandbox_id = 'old'") == 0);
	const struct meter_sample st2[] = {{1, hms("04:50:00"), S10(10)},
	                                   {1, hms("05:00:10"), S10(12)},
	                                   {1, hms("05:30:00"), S10(20)}};
	same_as_raw(f, "st", "2026-10-05T04:00:00Z", "2026-10-05T04:55:00Z", st2, 3);
}

/*
 * A rating that fails for a reason that is not the sandbox's (here a cancel
 * while it waits for a lock, as a deadlock or an operator would) is tried
 * again, never parked: a parked mark waits for the next sample, and a stopped
 * sandbox has none, so its last usage would never be billed.
 */
static void a_cancelled_rating_is_tried_again_never_parked(void **state)
{
	struct fx *f = *state;
	seed(f);
	sql(f, "INSERT INTO sandboxes (id, account_id, vcpus, memory_gib, started_at, stopped_at) "
	       "VALUES ('cx', 'acme', 2, 4, '2026-10-05T07:00:00Z', '2026-10-05T07:30:00Z')");
	PGconn *b = PQconnectdb(f->db.url);
	assert_int_equal(PQstatus(b), CONNECTION_OK);
	PGresult *r = PQexec(b, "BEGIN; LOCK TABLE usage_hourly IN SHARE MODE");
	assert_int_equal(PQresultStatus(r), PGRES_COMMAND_OK);
	PQclear(r);
	sql(f, "INSERT INTO samples (sandbox_id, incarnation, ts, host, cpu_usage_us) VALUES "
	       "('cx', 1, '2026-10-05T07:10:00Z', 'h', 30000000)");
	long pid = -1;
	for (int i = 0; i < 200 && pid < 0; i++) {
		pid = num(f, "SELECT coalesce(max(pid), -1) FROM pg_stat_activity WHERE datname = "
		             "current_database() AND wait_event_type = 'Lock' AND query LIKE "
		             "'%usage_hourly%'");
		if (pid < 0)
			usleep(50000);
	}
	if (pid < 0)
		fail_msg("the rollup worker never waited for the lock on usage_hourly");
	char q[128];
	snprintf(q, sizeof q, "SELECT pg_cancel_backend(%ld)::int", pid);
	assert_int_equal(num(f, q), 1);
	/* the cancel lands (the worker logs it and waits for its next pass) */
	for (int i = 0; i < 100; i++) {
		snprintf(q, sizeof q,
		         "SELECT count(*) FROM pg_stat_activity WHERE pid = %ld AND "
		         "wait_event_type = 'Lock'",
		         pid);
		if (num(f, q) == 0)
			break;
		usleep(20000);
	}
	assert_int_equal(num(f, "SELECT count(*) FROM rollup_queue WHERE waiting IS NOT NULL"), 0);
	r = PQexec(b, "COMMIT");
	PQclear(r);
	PQfinish(b);
	wait_rollups(f);
	assert_int_equal(num(f, "SELECT count(*) FROM rollup_queue WHERE sandbox_id = 'cx'"), 0);
	const struct meter_sample cx[] = {{1, hms("07:10:00"), S10(3)}};
	same_as_raw(f, "cx", "2026-10-05T07:00:00Z", "2026-10-05T07:30:00Z", cx, 1);
}

/* Library order: incarnations by first appearance, then time. */
static int by_time(const void *a, const void *b)
{
	const struct meter_sample *x = a, *y = b;
	return x->t_us < y->t_us ? -1 : x->t_us > y->t_us;
}

static size_t library_order(const struct meter_sample *in, size_t n, struct meter_sample *out)
{
	struct meter_sample t[64];
	memcpy(t, in, n * sizeof *in);
	qsort(t, n, sizeof *t, by_time);
	size_t m = 0;
	for (size_t a = 0; a < n; a++) {
		bool seen = false;
		for (size_t b = 0; b < a; b++)
			seen |= t[b].incarnation == t[a].incarnation;
		for (size_t b = a; !seen && b < n; b++)
			if (t[b].incarnation == t[a].incarnation)
				out[m++] = t[b];
	}
	return m;
}

/*
 * A sandbox that lives for hours is rated from its checkpoint (its last read's
 * start), not its whole life, and the rollups still equal rating every raw
 * sample: in order, a counter that goes down, a new incarnation, a sample
 * late by hours (which the checkpoint cannot hold: it reads the history
 * again), a duplicate, and the stop.
 */
static void a_long_lived_sandbox_is_rated_from_its_checkpoint(void **state)
{
	struct fx *f = *state;
	seed(f);
	sql(f, "INSERT INTO sandboxes (id, account_id, vcpus, memory_gib, started_at) VALUES "
	       "('lv', 'acme', 2, 4, '2026-10-05T00:00:00Z')");
	struct meter_sample all[64], sorted[64];
	size_t n = 0;
	int64_t cpu = 0;
	char q[256], ts[METER_TIME_BUF], want[METER_TIME_BUF + 8];
	for (int h = 0; h < 5; h++) {
		for (int k = 0; k < 6; k++) {
			char hms_[16];
			snprintf(hms_, sizeof hms_, "%02d:%02d:00", h, 5 + 10 * k);
			cpu += S10(1 + (h + k) % 3);
			all[n++] = (struct meter_sample){1, hms(hms_), cpu};
			insert(f, "lv", &all[n - 1]);
		}
		wait_rollups(f);
		size_t m = library_order(all, n, sorted);
		same_as_raw(f, "lv", "2026-10-05T00:00:00Z", NULL, sorted, m);
		if (h > 0) { /* rated from where the hour began: the checkpoint is there */
			snprintf(want, sizeof want, "2026-10-05T%02d:00:00Z", h);
			assert_int_equal(num(f, "SELECT count(*) FROM rollup_checkpoints WHERE "
			                        "sandbox_id = 'lv'"),
			                 1);
			PGresult *r =
			        PQexec(f->db.conn,
			               "SELECT to_char(upto AT TIME ZONE 'UTC', "
			               "'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"') FROM rollup_checkpoints");
			assert_string_equal(PQgetvalue(r, 0, 0), want);
			PQclear(r);
		}
	}
	const struct {
		int64_t inc;
		const char *at;
		int64_t cpu;
	} steps[] = {
	        {1, "04:57:00", S10(2)},  /* below what the counter had: adds nothing */
	        {9, "05:10:00", S10(1)},  /* a new incarnation */
	        {9, "05:20:00", S10(4)},  /* and on */
	        {1, "01:33:00", S10(30)}, /* hours late: the checkpoint does not hold */
	        {9, "05:20:00", S10(4)},  /* a duplicate */
	        {9, "06:10:00", S10(6)},  /* the next hour, from a checkpoint again */
	};
	for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++) {
		struct meter_sample x = {steps[i].inc, hms(steps[i].at), steps[i].cpu};
		insert(f, "lv", &x);
		bool dup = false;
		for (size_t k = 0; k < n; k++)
			dup |= all[k].incarnation == x.incarnation && all[k].t_us == x.t_us;
		if (!dup)
			all[n++] = x;
		wait_rollups(f);
		size_t m = library_order(all, n, sorted);
		same_as_raw(f, "lv", "2026-10-05T00:00:00Z", NULL, sorted, m);
	}
	assert_int_equal(num(f, "SELECT count(*) FROM rollup_checkpoints WHERE sandbox_id = 'lv'"),
	                 2); /* both incarnations */
	/* the stop */
	meter_time_format(hms("06:30:00"), ts, sizeof ts);
	snprintf(q, sizeof q, "{\"stopped_at\": \"%s\"}", ts);
	struct http_res r = call(f, "POST", "/v1/sandboxes/lv/stop", f->admin, q);
	assert_int_equal(r.status, 200);
	http_free(&r);
	wait_rollups(f);
	size_t m = library_order(all, n, sorted);
	same_as_raw(f, "lv", "2026-10-05T00:00:00Z", "2026-10-05T06:30:00Z", sorted, m);
}

/* ---- partition upkeep ---- */

static char *invoice_body(struct fx *f, const char *month)
{
	char path[96];
	snprintf(path, sizeof path, "/v1/accounts/acme/invoices/%s?format=csv", month);
	struct http_res r = call(f, "GET", path, f->admin, NULL);
	assert_int_equal(r.status, 200);
	char *body = strdup(r.body);
	http_free(&r);
	return body;
}

static void dropping_old_raw_partitions_never_changes_an_invoice(void **state)
{
	struct fx *f = *state;
	char buf[512], before[512];
	seed(f);
	/* "edge" runs across the end of September (two incarnations), "sep" in it. */
	sql(f, "INSERT INTO sandboxes (id, account_id, vcpus, memory_gib, started_at, stopped_at) "
	       "VALUES ('edge', 'acme', 2, 4, '2026-09-30T23:00:00Z', '2026-10-01T01:00:00Z'), "
	       "('sep', 'acme', 2, 4, '2026-09-26T10:00:00Z', '2026-09-26T11:00:00Z')");
	/* In the library's order (by incarnation, then time); [4] comes late. */
	struct meter_sample edge[7] = {{3, 0, S10(1)}, {3, 0, S10(3)},  {3, 0, S10(8)},
	                               {3, 0, S10(9)}, {3, 0, S10(10)}, {9, 0, S10(1)},
	                               {9, 0, S10(5)}};
	const char *edge_ts[] = {"2026-09-30T23:10:00Z", "2026-09-30T23:40:00Z",
	                         "2026-10-01T00:20:00Z", "2026-10-01T00:50:00Z",
	                         "2026-10-01T00:55:00Z", "2026-09-30T23:55:00Z",
	                         "2026-10-01T00:30:00Z"};
	struct meter_sample sep[3] = {{1, 0, S10(2)}, {1, 0, S10(6)}, {1, 0, S10(7)}};
	const char *sep_ts[] = {"2026-09-26T10:20:00Z", "2026-09-26T10:50:00Z",
	                        "2026-09-26T10:55:00Z"};
	for (int i = 0; i < 7; i++)
		meter_time_parse(edge_ts[i], &edge[i].t_us);
	for (int i = 0; i < 3; i++)
		meter_time_parse(sep_ts[i], &sep[i].t_us);
	for (int i = 0; i < 7; i++)
		if (i != 4)
			insert(f, "edge", &edge[i]);
	for (int i = 0; i < 2; i++)
		insert(f, "sep", &sep[i]);
	wait_rollups(f);
	const char *drop = "SELECT array_to_string(meter_drop_sample_partitions('35 days'), ',')";
	/* Not while September and October are drafts. */
	assert_string_equal(text(f, drop, buf, sizeof buf), "");
	char *inv9 = invoice_body(f, "2026-09"), *inv10 = invoice_body(f, "2026-10");
	assert_non_null(strstr(inv9, "cpu"));
	assert_string_equal(text(f, "SELECT count(*) FROM invoices", buf, sizeof buf), "2");
	/* Not while a mark (here one parked for an unknown sandbox) reaches into it. */
	sql(f, "INSERT INTO rollup_queue (sandbox_id, from_ts, queued_at, waiting, waiting_kind) "
	       "VALUES "
	       "('ghost', '2026-09-15T00:00:00Z', now(), 'not registered', 'unregistered')");
	assert_string_equal(text(f, drop, buf, sizeof buf), "");
	/* ... and the service says why it keeps the partition */
	unsetenv("METER_RAW_RETENTION");
	assert_true(api_start(&f->api2, METER_API_BIN, f->db.api_url, "--log-level=info"));
	setenv("METER_RAW_RETENTION", "0", 1);
	static char log[1 << 16];
	const char *said = "partitions: 1 parked sandbox(es) keep raw samples past the "
	                   "retention (sandbox ghost: not registered)";
	bool found = false;
	for (int i = 0; i < 100 && !found; i++) {
		FILE *lf = fopen(f->api2.log, "r");
		size_t ln = lf ? fread(log, 1, sizeof log - 1, lf) : 0;
		if (lf)
			fclose(lf);
		log[ln] = '\0';
		found = strstr(log, said) != NULL;
		if (!found)
			usleep(50000);
	}
	if (!found)
		fail_msg("meter-api did not say why it keeps old samples; its log:\n%s", log);
	assert_int_equal(api_stop(&f->api2), 0);
	assert_string_equal(
	        text(f, "SELECT to_regclass('samples_202609') IS NOT NULL", buf, sizeof buf), "t");
	sql(f, "DELETE FROM rollup_queue WHERE sandbox_id = 'ghost'");
	const char *usage = "SELECT md5(string_agg(u::text, '|' ORDER BY u::text)) FROM "
	                    "usage_hourly u";
	text(f, usage, before, sizeof before);

	/* The service drops it itself: an API process whose retention reaches back to
	 * a day before October's end, whatever today is (the default, 35 days, kept
	 * October only until 2026-12-05), so September is past it and October not. */
	sql(f, "DROP TABLE samples_202701"); /* and makes the months ahead it finds missing */
	int64_t oct_end_us = 0;
	assert_int_equal(meter_time_parse("2026-11-01T00:00:00Z", &oct_end_us), METER_OK);
	char retention[32];
	snprintf(retention, sizeof retention, "%lldd",
	         (long long)((time(NULL) - oct_end_us / 1000000) / 86400 + 2));
	setenv("METER_RAW_RETENTION", retention, 1);
	assert_true(api_start(&f->api2, METER_API_BIN, f->db.api_url, "--log-level=info"));
	setenv("METER_RAW_RETENTION", "0", 1);
	for (int i = 0; i < 100 && strcmp(text(f, "SELECT to_regclass('samples_202609') IS NULL",
	                                       buf, sizeof buf),
	                                  "f") == 0;
	     i++)
		usleep(50000);
	assert_string_equal(
	        text(f, "SELECT to_regclass('samples_202609') IS NULL", buf, sizeof buf), "t");
	/* October ended inside the retention: kept; the months ahead are there again. */
	assert_string_equal(text(f,
	                         "SELECT to_regclass('samples_202610') IS NOT NULL AND "
	                         "to_regclass('samples_202701') IS NOT NULL",
	                         buf, sizeof buf),
	                    "t");
	assert_string_equal(text(f, "SELECT raw_from FROM sample_horizon", buf, sizeof buf),
	                    "2026-10-01 00:00:00+00");
	assert_string_equal(text(f, "SELECT count(*) FROM sample_seeds", buf, sizeof buf), "3");
	assert_string_equal(text(f, usage, buf, sizeof buf), before);

	/* A late sample in October re-rates from 00:00, seeded by what September's
	 * partition knew: the whole history is rated as if nothing was dropped. */
	insert(f, "edge", &edge[4]);
	wait_rollups(f);
	same_as_raw(f, "edge", "2026-09-30T23:00:00Z", "2026-10-01T01:00:00Z", edge, 7);
	/* A late sample for the dropped month changes nothing there. */
	insert(f, "sep", &sep[2]);
	wait_rollups(f);
	same_as_raw(f, "sep", "2026-09-26T10:00:00Z", "2026-09-26T11:00:00Z", sep, 2);
	/* The final invoices are as they were, to the byte. */
	char *again9 = invoice_body(f, "2026-09"), *again10 = invoice_body(f, "2026-10");
	assert_string_equal(again9, inv9);
	assert_string_equal(again10, inv10);
	free(inv9);
	free(inv10);
	free(again9);
	free(again10);
}

/*
 * A raw retention that September and October 2026 are past, whatever today is:
 * a day short of the time since October ended.
 */
static void past_october(char *keep, size_t len)
{
	int64_t oct_end_us = 0;
	assert_int_equal(meter_time_parse("2026-11-01T00:00:00Z", &oct_end_us), METER_OK);
	snprintf(keep, len, "%lldd", (long long)((time(NULL) - oct_end_us / 1000000) / 86400 - 1));
}

/*
 * What a meter-api with raw retention keep (f->api2) logged by the time its
 * upkeep had dropped partition gone: the whole log of the process, read
 * through a descriptor opened before api_stop, which waits for it (and its
 * rollup worker) to end. The caller frees it.
 */
static char *upkeep_log(struct fx *f, const char *keep, const char *gone)
{
	char q[128], buf[16];
	setenv("METER_RAW_RETENTION", keep, 1);
	bool up = api_start(&f->api2, METER_API_BIN, f->db.api_url, "--log-level=info");
	setenv("METER_RAW_RETENTION", "0", 1);
	assert_true(up);
	snprintf(q, sizeof q, "SELECT to_regclass('%s') IS NULL", gone);
	for (int i = 0; i < 200 && strcmp(text(f, q, buf, sizeof buf), "t") != 0; i++)
		usleep(50000);
	FILE *lf = fopen(f->api2.log, "r");
	assert_non_null(lf);
	assert_int_equal(api_stop(&f->api2), 0);
	size_t cap = 1 << 16, n = 0;
	char *log = malloc(cap);
	assert_non_null(log);
	n = fread(log, 1, cap - 1, lf);
	fclose(lf);
	log[n] = '\0';
	if (strcmp(buf, "t") != 0)
		fail_msg("meter-api (raw retention %s) did not drop %s; its log:\n%s", keep, gone,
		         log);
	return log;
}

/*
 * The partitions migration 0001 made for months before the first sample are
 * dropped without a word: a fresh database's first upkeep past them logs no
 * "dropped" line. A partition that held samples is still told of.
 */
static void only_partitions_that_held_samples_are_told_dropped(void **state)
{
	struct fx *f = *state;
	char keep[32], buf[16];
	past_october(keep, sizeof keep);
	assert_string_equal(text(f,
	                         "SELECT to_regclass('samples_202609') IS NOT NULL AND "
	                         "to_regclass('samples_202610') IS NOT NULL",
	                         buf, sizeof buf),
	                    "t");
	char *log = upkeep_log(f, keep, "samples_202610");
	assert_string_equal(
	        text(f, "SELECT to_regclass('samples_202609') IS NULL", buf, sizeof buf), "t");
	if (strstr(log, "dropped"))
		fail_msg("a fresh database's upkeep told of dropping empty partitions:\n%s", log);
	free(log);

	/* October again, with samples in it, rolled up and invoiced as final */
	seed(f);
	sql(f, "CREATE TABLE samples_202610 PARTITION OF samples "
	       "FOR VALUES FROM ('2026-10-01T00:00:00Z') TO ('2026-11-01T00:00:00Z')");
	sql(f, "INSERT INTO sandboxes (id, account_id, vcpus, memory_gib, started_at, stopped_at) "
	       "VALUES ('oct', 'acme', 2, 4, '2026-10-05T10:00:00Z', '2026-10-05T11:00:00Z')");
	const char *ts[] = {"2026-10-05T10:20:00Z", "2026-10-05T10:50:00Z"};
	for (int i = 0; i < 2; i++) {
		struct meter_sample s = {1, 0, S10(i + 1)};
		meter_time_parse(ts[i], &s.t_us);
		insert(f, "oct", &s);
	}
	wait_rollups(f);
	assert_string_equal(text(f, "SELECT count(*) FROM samples_202610", buf, sizeof buf), "2");
	free(invoice_body(f, "2026-10"));
	log = upkeep_log(f, keep, "samples_202610");
	if (strstr(log, "partitions: dropped samples_202610 (rolled up, invoiced as final, past "
	                "the retention)") == NULL)
		fail_msg("the upkeep did not tell of dropping October's samples:\n%s", log);
	free(log);
}

/*
 * Samples in the default partition (a clock behind stamps them before the
 * first month) that a partition drop leaves below the horizon are seeded:
 * rating from the checkpoint and rating the whole history again give the
 * same, and both what rating every raw sample gives.
 */
static void the_horizon_passing_default_rows_keeps_both_reads_equal(void **state)
{
	struct fx *f = *state;
	char buf[128];
	seed(f);
	sql(f, "INSERT INTO sandboxes (id, account_id, vcpus, memory_gib, started_at) VALUES "
	       "('hz', 'acme', 2, 4, '2026-09-25T01:00:00Z')");
	const char *at_[] = {"2026-08-31T10:00:00Z", "2026-09-26T10:00:00Z", "2026-08-31T11:00:00Z",
	                     "2026-10-05T10:05:00Z", "2026-10-05T10:15:00Z"};
	const int64_t cpu[] = {S10(1), S10(2), S10(10), S10(11), S10(11) + 5000000};
	struct meter_sample all[5], sorted[5];
	for (int i = 0; i < 5; i++) {
		all[i] = (struct meter_sample){1, 0, cpu[i]};
		meter_time_parse(at_[i], &all[i].t_us);
	}
	for (int i = 0; i < 4; i++) {
		insert(f, "hz", &all[i]);
		wait_rollups(f);
	}
	assert_string_equal(text(f, "SELECT count(*) FROM samples_default", buf, sizeof buf), "2");
	/* September final, then dropped: the horizon moves to October */
	char *inv = invoice_body(f, "2026-09");
	free(inv);
	assert_non_null(strstr(
	        text(f, "SELECT array_to_string(meter_drop_sample_partitions('35 days'), ',')", buf,
	             sizeof buf),
	        "samples_202609"));
	assert_string_equal(text(f, "SELECT raw_from FROM sample_horizon", buf, sizeof buf),
	                    "2026-10-01 00:00:00+00");
	insert(f, "hz", &all[4]);
	wait_rollups(f);
	size_t m = library_order(all, 5, sorted);
	same_as_raw(f, "hz", "2026-09-25T01:00:00Z", NULL, sorted, m);
	/* the whole history read again (no checkpoint): the same */
	sql(f, "DELETE FROM rollup_checkpoints WHERE sandbox_id = 'hz'");
	sql(f, "INSERT INTO rollup_queue VALUES ('hz', '2026-10-05T10:00:00Z', now())");
	wait_rollups(f);
	same_as_raw(f, "hz", "2026-09-25T01:00:00Z", NULL, sorted, m);
}

/* The collector's write of six samples of vsb-2, a second apart from 5
 * minutes ago, from a cgroup whose path names account (its incarnation inc). */
static void collector_writes(struct fx *f, const char *account, int inc)
{
	char q[512];
	snprintf(q, sizeof q,
	         "SELECT meter_samples_ingest(array_agg(ROW('vsb-2', %d, now() - interval '5 min' "
	         "+ k * interval '1 s', '%s', 'h', k * 1000000, NULL, NULL, NULL, 1073741824, "
	         "1000, false)::meter_sample_row)) FROM generate_series(1, 6) k",
	         inc, account);
	sql(f, q);
}

/*
 * A cgroup under acme's path reporting the id of other's sandbox: the
 * sandbox is parked with the reason, and nothing of it is billed to other
 * (issue 39, finding 4); once those samples are gone, its own are rated.
 */
static void a_sandbox_id_under_another_account_s_path_is_parked_not_billed(void **state)
{
	struct fx *f = *state;
	char v[600];
	seed(f);
	sql(f, "INSERT INTO sandboxes (id, account_id, vcpus, memory_gib, started_at) VALUES "
	       "('vsb-2', 'other', 1, 1, now() - interval '10 min')");
	collector_writes(f, "acme", 7);
	wait_rollups(f);
	text(f,
	     "SELECT waiting_kind || ': ' || waiting FROM rollup_queue WHERE sandbox_id = 'vsb-2'",
	     v, sizeof v);
	if (strstr(v, "parked: cannot rate: 6 sample(s) from ") != v ||
	    strstr(v, "come from a cgroup whose path names another account than its own, other") ==
	            NULL)
		fail_msg("vsb-2 is not parked for acme's cgroup: %s", v);
	assert_int_equal(num(f, "SELECT count(*) FROM usage_hourly WHERE sandbox_id = 'vsb-2'"), 0);
	/* the operator removes them; its own cgroup's samples are then rated */
	sql(f, "DELETE FROM samples WHERE sandbox_id = 'vsb-2' AND account_id = 'acme'");
	collector_writes(f, "other", 8);
	wait_rollups(f);
	assert_int_equal(num(f, "SELECT count(*) FROM rollup_queue WHERE sandbox_id = 'vsb-2'"), 0);
	assert_int_equal(num(f, "SELECT coalesce(sum(cpu_measured_us), 0) FROM usage_hourly "
	                        "WHERE sandbox_id = 'vsb-2'"),
	                 6000000);
}

int main(void)
{
	if (getenv("METER_TEST_ONLY"))
		cmocka_set_test_filter(getenv("METER_TEST_ONLY"));
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test_setup_teardown(
	                usage_from_two_processes_rollups_equals_rating_the_raw_samples, apifx_setup,
	                apifx_teardown),
	        cmocka_unit_test_setup_teardown(
	                rollups_match_the_raw_rating_around_stops_and_overlaps, apifx_setup,
	                apifx_teardown),
	        cmocka_unit_test_setup_teardown(a_cancelled_rating_is_tried_again_never_parked,
	                                        apifx_setup, apifx_teardown),
	        cmocka_unit_test_setup_teardown(a_long_lived_sandbox_is_rated_from_its_checkpoint,
	                                        apifx_setup, apifx_teardown),
	        cmocka_unit_test_setup_teardown(
	                the_horizon_passing_default_rows_keeps_both_reads_equal, apifx_setup,
	                apifx_teardown),
	        cmocka_unit_test_setup_teardown(
	                dropping_old_raw_partitions_never_changes_an_invoice, apifx_setup,
	                apifx_teardown),
	        cmocka_unit_test_setup_teardown(
	                a_sandbox_id_under_another_account_s_path_is_parked_not_billed, apifx_setup,
	                apifx_teardown),
	        cmocka_unit_test_setup_teardown(only_partitions_that_held_samples_are_told_dropped,
	                                        apifx_setup, apifx_teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
