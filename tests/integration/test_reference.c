/*
 * The differential test: seeded scenarios go in through the real write path
 * and come out of the real API, and every invoice line, trial credit, total
 * and trial balance must equal what the independent reference
 * (tests/reference/ref.c) gives from the same raw samples.
 *
 * A scenario has one to three accounts with grants from none to 50 hours
 * (most run out mid-scenario), sandboxes from 0.5 vCPU / 0.5 GiB to
 * 256 vCPU / 1 TiB, samples at irregular gaps (seconds to hours) whose CPU is
 * idle, under the floor, busy or over the cap, new incarnations, samples
 * stamped out of order or before the sandbox started, stops after the last
 * sample, sandboxes with no sample, a price change, samples before any price
 * plan. It is written as collectors write it (collector/batch.c and
 * collector/writer.c, batches shuffled, some twice, some late, after a first
 * rating), registered and stopped through the API (or registered by the
 * rollup from the cgroup's limits), and rated by two meter-api processes at
 * once.
 *
 *   test_reference                 seeds 1 to 24 (what CI runs)
 *   test_reference --seeds A-B     seeds A to B; prints every seed that differs
 *   test_reference --seed N -v     one seed, with what it compares
 *
 * Exit 0 when every seed agrees. Samples after a stop (a lingering empty
 * cgroup) are not generated yet: the end the collector sees is not built.
 */
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "collector/batch.h"
#include "collector/writer.h"
#include "common/keys.h"
#include "meter/timefmt.h"
#include "tests/reference/ref.h"
#include "tests/support/csvread.h"
#include "tests/support/http.h"
#include "tests/support/testdb.h"

#define SEC     INT64_C(1000000)
#define HOUR    (3600 * SEC)
#define BATCHES 512

static bool verbose;

/* ---- the scenario ---- */

static uint64_t rng;

static uint64_t next(void)
{
	uint64_t z = (rng += 0x9E3779B97F4A7C15ULL);
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
	return z ^ (z >> 31);
}

/* An integer in [lo, hi]. */
static int64_t pick(int64_t lo, int64_t hi)
{
	return lo + (int64_t)(next() % (uint64_t)(hi - lo + 1));
}

static bool chance(int percent)
{
	return pick(1, 100) <= percent;
}

struct scenario {
	struct ref_input in;
	bool auto_registered[REF_SANDBOXES]; /* by the rollup, from its cgroup's limits */
	bool late_registration[REF_SANDBOXES], late_stop[REF_SANDBOXES];
	int batch_of[REF_SAMPLES]; /* which batch carries each sample */
	int nbatches;
	bool late[BATCHES], twice[BATCHES];
};

static int64_t at(const char *t)
{
	int64_t us = 0;
	if (meter_time_parse(t, &us) != METER_OK)
		abort();
	return us;
}

static void generate(struct scenario *s, uint64_t seed)
{
	static const int64_t vcpus[] = {500, 1000, 2000, 4000, 16000, 64000, 256000};
	static const int64_t mems[] = {500, 1000, 4000, 64000, 256000, 1024000};
	static const int64_t grants[] = {0, 60, 600, 1800, 3600, 7200, 36000, 180000};
	memset(s, 0, sizeof *s);
	rng = seed * 0x2545F4914F6CDD1DULL + 1;
	struct ref_input *in = &s->in;
	int64_t base = chance(15) ? at("2026-09-24T20:00:00Z")
	                          : at("2026-10-01T00:00:00Z") + pick(0, 40 * 24) * HOUR;
	in->plans[in->nplans++] = (struct ref_plan){.id = 1,
	                                            .from_us = at("2026-09-25T00:00:00Z"),
	                                            .name = "default",
	                                            .cpu_nano = 25000000,
	                                            .mem_nano = 7500000,
	                                            .floor_ppm = 25000};
	if (chance(50))
		in->plans[in->nplans++] =
		        (struct ref_plan){.id = 2,
		                          .from_us = base + pick(0, 20 * 3600) * SEC,
		                          .name = "changed",
		                          .cpu_nano = pick(10000, 50000) * 1000,
		                          .mem_nano = pick(2000, 10000) * 1000,
		                          .floor_ppm = chance(20) ? 0 : pick(0, 50000)};
	in->naccounts = (int)pick(1, 3);
	for (int a = 0; a < in->naccounts; a++) {
		snprintf(in->accounts[a].id, REF_ID, "acct-%d", a);
		in->accounts[a].grant_us = grants[pick(0, 7)] * SEC;
		/* the account's round times: sandboxes in step with them end intervals at once
		 * (rule 8's ties: taken in the order of the sandboxes' ids) */
		int64_t rounds[40], step0 = base + pick(0, 3 * 3600) * SEC;
		for (int i = 0; i < 40; i++)
			rounds[i] = (i == 0 ? step0 : rounds[i - 1]) +
			            (i == 0       ? 0
			             : chance(90) ? pick(1, 30) * SEC
			                          : pick(30, 900) * SEC);
		int nsb = (int)pick(1, 4);
		for (int k = 0; k < nsb && in->nsandboxes < REF_SANDBOXES; k++) {
			int sb = in->nsandboxes++;
			struct ref_sandbox *x = &in->sandboxes[sb];
			/* ids whose byte order is not their creation order, for rule 8's ties */
			snprintf(x->id, REF_ID, "%c%d.sb-%d", "zaMq9"[pick(0, 4)], a, k);
			x->account = a;
			x->vcpu_milli = vcpus[pick(0, 6)];
			x->mem_milli = mems[pick(0, 5)];
			bool in_step = chance(40);
			int64_t t0 = in_step ? rounds[0] : base + pick(0, 6 * 3600) * SEC;
			x->started_us = x->stopped_us = REF_NONE;
			s->auto_registered[sb] = chance(25);
			if (!s->auto_registered[sb]) {
				x->started_us = t0 - pick(0, 120) * SEC;
				if (chance(10))
					x->started_us =
					        t0 + pick(1, 30) * SEC; /* samples before it */
			}
			s->late_registration[sb] = !s->auto_registered[sb] && chance(30);
			int n = chance(5) && x->started_us != REF_NONE ? 0 : (int)pick(1, 40);
			int64_t t = t0, cpu = pick(0, 5) * SEC, inc = 1000 + sb * 10, max_ts = t0;
			for (int i = 0; i < n && in->nsamples < REF_SAMPLES; i++) {
				int64_t gap = chance(85)   ? pick(1000, 30000) * 1000
				              : chance(67) ? pick(30, 900) * SEC
				                           : pick(3600, 3 * 3600) * SEC;
				if (in_step) {
					gap = i > 0 ? rounds[i] - rounds[i - 1] : 0;
					t = rounds[i];
				} else if (i > 0) {
					t += gap;
				}
				if (i > 0 && chance(5)) { /* a new cgroup under the same id */
					/* the collector saw the old one end, or missed it */
					if (chance(60) && in->nsamples > 0 &&
					    in->samples[in->nsamples - 1].sandbox == sb)
						in->samples[in->nsamples - 1].ended = true;
					inc++;
					cpu = pick(0, 2) * SEC;
				} else if (i > 0) {
					int64_t full = x->vcpu_milli * gap / 1000;
					int kind = (int)pick(1, 100);
					cpu += kind <= 25   ? 0
					       : kind <= 45 ? pick(0, full / 80 + 1)
					       : kind <= 80 ? pick(full * 3 / 10, full)
					                    : full + full / 5 + pick(0, SEC);
				}
				int64_t ts = t;
				if (i > 0 && chance(3)) /* a clock stepped back */
					ts = t - pick(1, 5) * SEC;
				/* one sample per (incarnation, time) */
				for (bool clash = true; clash;) {
					clash = false;
					for (int j = 0; j < in->nsamples; j++)
						if (in->samples[j].sandbox == sb &&
						    in->samples[j].incarnation == inc &&
						    in->samples[j].ts_us == ts) {
							ts += 1000;
							clash = true;
						}
				}
				if (ts > max_ts)
					max_ts = ts;
				/* rarely, a cgroup that empties and is used again: an end, then
				 * CPU with no time */
				in->samples[in->nsamples++] =
				        (struct ref_sample){.sandbox = sb,
				                            .incarnation = inc,
				                            .ts_us = ts,
				                            .cpu_us = cpu,
				                            .ended = i > 0 && chance(2)};
			}
			int64_t from = max_ts > x->started_us ? max_ts : x->started_us;
			if (n > 0 && chance(25)) {
				/* stopped, its cgroup lingering after the stop: samples with no
				 * CPU (or a little), the last one maybe its removal (rule 3) */
				x->stopped_us = from + pick(0, 60) * SEC;
				int64_t lt = x->stopped_us;
				for (int left = (int)pick(1, 6);
				     left > 0 && in->nsamples < REF_SAMPLES; left--) {
					lt += pick(10, 900) * SEC;
					cpu += chance(70) ? 0 : pick(0, SEC);
					in->samples[in->nsamples++] = (struct ref_sample){
					        .sandbox = sb,
					        .incarnation = inc,
					        .ts_us = lt,
					        .cpu_us = cpu,
					        .ended = left == 1 && chance(40)};
				}
			} else if (n > 0 && chance(10)) {
				/* stopped while its samples go on (a stop the platform dated back)
				 */
				x->stopped_us = t0 + pick(0, (max_ts - t0) / SEC) * SEC;
				if (x->started_us != REF_NONE && x->stopped_us < x->started_us)
					x->stopped_us = x->started_us;
			} else if (chance(50)) {
				x->stopped_us = from + pick(0, 600) * SEC;
			}
			if (n > 0 && chance(30) && in->samples[in->nsamples - 1].sandbox == sb)
				/* its cgroup emptied at its last sample */
				in->samples[in->nsamples - 1].ended = true;
			s->late_stop[sb] = s->auto_registered[sb] || chance(40);
		}
	}
	/* batches: random runs of the samples in a shuffled order */
	int order[REF_SAMPLES];
	for (int i = 0; i < in->nsamples; i++)
		order[i] = i;
	for (int i = in->nsamples - 1; i > 0; i--) {
		int j = (int)pick(0, i), tmp = order[i];
		order[i] = order[j];
		order[j] = tmp;
	}
	for (int i = 0; i < in->nsamples;) {
		int len = (int)pick(1, 50);
		for (int k = 0; k < len && i < in->nsamples; k++)
			s->batch_of[order[i++]] = s->nbatches;
		s->late[s->nbatches] = chance(30);
		s->twice[s->nbatches] = chance(10);
		s->nbatches++;
	}
}

/* ---- the real system ---- */

struct run {
	struct testdb db;
	struct api_proc api, api2;
	char admin[KEY_LEN + 1];
	int64_t now_us; /* meter-api's clock (libfaketime): an hour after the scenario's end */
};

static bool http_ok(struct run *r, const char *method, const char *path, const char *body, int want)
{
	struct http_res res;
	http_do(r->api.port, method, path, r->admin, body, body ? strlen(body) : 0, &res);
	bool ok = res.status == want;
	if (!ok)
		fprintf(stderr, "%s %s: %d %s\n", method, path, res.status,
		        res.body ? res.body : "");
	http_free(&res);
	return ok;
}

static void decimal3(int64_t milli, char *buf, size_t len)
{
	snprintf(buf, len, "%lld.%03lld", (long long)(milli / 1000), (long long)(milli % 1000));
}

static bool sql(struct run *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static bool sql(struct run *r, const char *fmt, ...)
{
	char q[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(q, sizeof q, fmt, ap);
	va_end(ap);
	return testdb_exec(&r->db, q);
}

static bool register_sandbox(struct run *r, const struct scenario *s, int sb)
{
	const struct ref_sandbox *x = &s->in.sandboxes[sb];
	char body[512], v[32], m[32], when[METER_TIME_BUF];
	decimal3(x->vcpu_milli, v, sizeof v);
	decimal3(x->mem_milli, m, sizeof m);
	meter_time_format(x->started_us, when, sizeof when);
	snprintf(body, sizeof body,
	         "{\"id\": \"%s\", \"account_id\": \"%s\", \"vcpus\": %s, \"memory_gib\": %s, "
	         "\"started_at\": \"%s\"}",
	         x->id, s->in.accounts[x->account].id, v, m, when);
	return http_ok(r, "POST", "/v1/sandboxes", body, 201);
}

static bool stop_sandbox(struct run *r, const struct scenario *s, int sb)
{
	const struct ref_sandbox *x = &s->in.sandboxes[sb];
	char path[128], body[128], when[METER_TIME_BUF];
	if (x->stopped_us == REF_NONE)
		return true;
	meter_time_format(x->stopped_us, when, sizeof when);
	snprintf(path, sizeof path, "/v1/sandboxes/%s/stop", x->id);
	snprintf(body, sizeof body, "{\"stopped_at\": \"%s\"}", when);
	return http_ok(r, "POST", path, body, 200);
}

/* Writes the batches of one phase as a collector would (COPY, then insert). */
static bool write_batches(struct run *r, const struct scenario *s, bool late)
{
	PGconn *c = PQconnectdb(r->db.url);
	bool ok = PQstatus(c) == CONNECTION_OK;
	for (int b = 0; ok && b < s->nbatches; b++) {
		if (s->late[b] != late && !(late && s->twice[b]))
			continue;
		struct batch bt = {0};
		for (int i = 0; ok && i < s->in.nsamples; i++) {
			const struct ref_sample *x = &s->in.samples[i];
			if (s->batch_of[i] != b)
				continue;
			const struct ref_sandbox *sb = &s->in.sandboxes[x->sandbox];
			bool limits = s->auto_registered[x->sandbox];
			struct cg_reading rd = {
			        .cpu_usage_us = x->cpu_us,
			        .mem_current = 1 << 20,
			        .mem_peak = CG_ABSENT,
			        .mem_anon_kernel = CG_ABSENT,
			        /* limits that register exactly its size: memory in 1/1000 GiB */
			        .mem_limit = limits ? sb->mem_milli * (INT64_C(1) << 30) / 1000
			                            : CG_ABSENT,
			        .cpu_limit_millicores = limits ? sb->vcpu_milli : CG_ABSENT};
			ok = batch_add(&bt, sb->id, limits ? s->in.accounts[sb->account].id : "",
			               x->incarnation, x->ts_us, "gen-host", &rd);
			if (x->ended)
				batch_mark_end(&bt, END_READ);
		}
		long inserted;
		char err[512];
		for (int k = 0; ok && k < (s->twice[b] && !late ? 2 : 1); k++) {
			/* A deadlock with the rollup (on Citus, its shard locks) is sent again,
			 * as the collector sends a batch again from its spool. */
			for (int tries = 0; tries < 10; tries++) {
				ok = writer_write(c, "", bt.buf, bt.len, &inserted, err,
				                  sizeof err);
				if (ok || strstr(err, "deadlock") == NULL)
					break;
				usleep(20000);
			}
			if (!ok)
				fprintf(stderr, "batch %d: %s\n", b, err);
		}
		batch_free(&bt);
	}
	PQfinish(c);
	return ok;
}

static long count(struct run *r, const char *q)
{
	char buf[64];
	return testdb_value(&r->db, q, buf, sizeof buf) ? strtol(buf, NULL, 10) : -1;
}

static bool settle(struct run *r)
{
	for (int i = 0; i < 1200; i++) {
		if (count(r, "SELECT (SELECT count(*) FROM rollup_queue WHERE waiting IS NULL) + "
		             "(SELECT count(*) FROM trial_queue)") == 0)
			return true;
		usleep(25000);
	}
	fprintf(stderr, "the rollup did not settle in 30 s\n");
	return false;
}

static bool feed(struct run *r, const struct scenario *s)
{
	const struct ref_input *in = &s->in;
	for (int k = 1; k < in->nplans; k++)
		if (!sql(r,
		         "INSERT INTO price_plans (name, effective_from, cpu_vcpu_hour, "
		         "memory_gib_hour, cpu_floor) VALUES ('%s', 'epoch'::timestamptz + %lld * "
		         "interval '1 microsecond', %lld / 1e9, %lld / 1e9, %lld / 1e6)",
		         in->plans[k].name, (long long)in->plans[k].from_us,
		         (long long)in->plans[k].cpu_nano, (long long)in->plans[k].mem_nano,
		         (long long)in->plans[k].floor_ppm))
			return false;
	for (int a = 0; a < in->naccounts; a++) {
		char body[256], path[128];
		snprintf(body, sizeof body,
		         "{\"id\": \"%s\", \"name\": \"A\", \"plan\": \"paid\", "
		         "\"collector_registration\": true}",
		         in->accounts[a].id);
		snprintf(path, sizeof path, "/v1/accounts/%s", in->accounts[a].id);
		if (!http_ok(r, "POST", "/v1/accounts", body, 201) ||
		    !http_ok(r, "PATCH", path, "{\"max_concurrent\": 10000}", 200) ||
		    !sql(r, "UPDATE accounts SET trial_grant_seconds = %lld WHERE id = '%s'",
		         (long long)(in->accounts[a].grant_us / SEC), in->accounts[a].id))
			return false;
	}
	for (int sb = 0; sb < in->nsandboxes; sb++)
		if (!s->auto_registered[sb] && !s->late_registration[sb] &&
		    (!register_sandbox(r, s, sb) || (!s->late_stop[sb] && !stop_sandbox(r, s, sb))))
			return false;
	if (!write_batches(r, s, false) || !settle(r))
		return false;
	/* late: registrations, stops, batches, and the batches sent twice again */
	for (int sb = 0; sb < in->nsandboxes; sb++)
		if (s->late_registration[sb] && !register_sandbox(r, s, sb))
			return false;
	if (!write_batches(r, s, true))
		return false;
	for (int sb = 0; sb < in->nsandboxes; sb++) {
		/* one the rollup registers needs its samples rated first */
		if (s->auto_registered[sb] && !settle(r))
			return false;
		if ((s->late_stop[sb] || s->late_registration[sb]) && !stop_sandbox(r, s, sb))
			return false;
	}
	return settle(r);
}

/* ---- the comparison ---- */

static const char *field(cJSON *o, const char *name)
{
	cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
	return cJSON_IsString(v) ? v->valuestring : "";
}

static void say(char *diff, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static void say(char *diff, size_t len, const char *fmt, ...)
{
	size_t used = strlen(diff);
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(diff + used, len - used, fmt, ap);
	va_end(ap);
}

/* Compares one account's month; writes what differs into diff. */
static void compare_month(struct run *r, const struct scenario *s, int a, const char *month,
                          char *diff, size_t len)
{
	char path[128], t[METER_TIME_BUF];
	snprintf(t, sizeof t, "%s-01T00:00:00Z", month);
	struct ref_invoice want;
	if (!ref_invoice(&s->in, a, at(t), &want)) {
		say(diff, len, "  %s %s: the reference overflowed\n", s->in.accounts[a].id, month);
		return;
	}
	snprintf(path, sizeof path, "/v1/accounts/%s/invoices/%s", s->in.accounts[a].id, month);
	struct http_res res;
	http_do(r->api.port, "GET", path, r->admin, NULL, 0, &res);
	cJSON *o = res.status == 200 ? http_json(&res) : NULL;
	http_free(&res);
	if (o == NULL) {
		say(diff, len, "  %s: status %d\n", path, res.status);
		return;
	}
	/* A draft under meter-api's grace of 90 days (2160h), final past it: never, on
	 * meter-api's clock, an hour after the scenario's end. */
	const char *status =
	        r->now_us >= meter_month_next(at(t)) + INT64_C(2160) * HOUR ? "final" : "draft";
	cJSON *lines = cJSON_GetObjectItem(o, "lines");
	int n = cJSON_GetArraySize(lines);
	int64_t total = 0;
	bool same = n == want.nlines && csv_nano(field(o, "total_exact"), &total) &&
	            total == want.total_nano && strcmp(field(o, "status"), status) == 0;
	for (int i = 0; same && i < n; i++) {
		cJSON *l = cJSON_GetArrayItem(lines, i);
		int64_t amount;
		same = strcmp(field(l, "item"), want.lines[i].item) == 0 &&
		       strcmp(field(l, "plan"), want.lines[i].plan) == 0 &&
		       csv_nano(field(l, "amount_exact"), &amount) &&
		       amount == want.lines[i].amount_nano;
	}
	if (!same || verbose) {
		say(diff, len, "  %s %s %s:\n    meter:    ", same ? "same" : "DIFFERS",
		    s->in.accounts[a].id, month);
		for (int i = 0; i < n; i++) {
			cJSON *l = cJSON_GetArrayItem(lines, i);
			say(diff, len, "%s/%s %s; ", field(l, "item"), field(l, "plan"),
			    field(l, "amount_exact"));
		}
		say(diff, len, "total %s\n    reference: ", field(o, "total_exact"));
		for (int i = 0; i < want.nlines; i++)
			say(diff, len, "%s/%s %.9f; ", want.lines[i].item, want.lines[i].plan,
			    (double)want.lines[i].amount_nano / 1e9);
		say(diff, len, "total %.9f\n", (double)want.total_nano / 1e9);
	}
	cJSON_Delete(o);
}

/* An account's figure of a month to date (name, from the answer o) against want. */
static void same_money(cJSON *o, const char *what, const char *name, int64_t want,
                       const char *account, char *diff, size_t len)
{
	int64_t got = 0;
	bool same = o && csv_nano(field(o, name), &got) && got == want;
	if (!same || verbose)
		say(diff, len, "  %s %s %s: meter %s, reference %lld nano-dollars\n",
		    same ? "same" : "DIFFERS", account, what, o ? field(o, name) : "?",
		    (long long)want);
}

static cJSON *call(struct run *r, const char *method, const char *path, const char *body,
                   int *status)
{
	struct http_res res;
	http_do(r->api.port, method, path, r->admin, body, body ? strlen(body) : 0, &res);
	*status = res.status;
	cJSON *o = res.status == 200 ? http_json(&res) : NULL;
	http_free(&res);
	return o;
}

/* The quota check after a cap of cap nano-dollars on the account: allowed or why not,
 * and what account_limits, which enforcing collectors read, says of the cap. */
static void cap_decision(struct run *r, const char *account, int64_t cap, bool reached, char *diff,
                         size_t len)
{
	char path[128], body[160], q[256];
	int st;
	snprintf(path, sizeof path, "/v1/accounts/%s", account);
	snprintf(body, sizeof body, "{\"monthly_spend_cap\": \"%lld.%09lld\"}",
	         (long long)(cap / 1000000000), (long long)(cap % 1000000000));
	cJSON_Delete(call(r, "PATCH", path, body, &st));
	snprintf(body, sizeof body, "{\"account_id\": \"%s\", \"vcpus\": 1, \"memory_gib\": 1}",
	         account);
	cJSON *o = st == 200 ? call(r, "POST", "/v1/quota/check", body, &st) : NULL;
	const char *reason = o ? field(o, "reason") : "?";
	snprintf(q, sizeof q,
	         "SELECT count(*) FROM account_limits WHERE account_id = '%s' AND "
	         "spend_cap_reached",
	         account);
	long kept = count(r, q);
	bool same = strcmp(reason, reached ? "spend_cap_reached" : "ok") == 0 &&
	            kept == (reached ? 1 : 0);
	if (!same || verbose)
		say(diff, len,
		    "  %s %s cap %lld nano-dollars: quota check %s, account_limits %s (the "
		    "reference: %s)\n",
		    same ? "same" : "DIFFERS", account, (long long)cap, reason,
		    kept == 1 ? "reached" : "not reached", reached ? "reached" : "not reached");
	cJSON_Delete(o);
}

/*
 * The month to date of meter-api's month, where the account, the quota check and
 * the forecast read it, against the reference's invoice of that month; then the
 * spend cap's decision at exactly that figure (reached) and a nano-dollar above
 * it (not).
 */
static void compare_to_date(struct run *r, const struct scenario *s, int a, char *diff, size_t len)
{
	const char *id = s->in.accounts[a].id;
	int64_t month = meter_month_start(r->now_us);
	struct ref_invoice want;
	if (!ref_invoice(&s->in, a, month, &want)) {
		say(diff, len, "  %s month to date: the reference overflowed\n", id);
		return;
	}
	char path[160], body[160], m[16];
	int st;
	meter_time_format(month, m, sizeof m);
	m[7] = '\0';
	snprintf(body, sizeof body, "{\"account_id\": \"%s\", \"vcpus\": 1, \"memory_gib\": 1}",
	         id);
	cJSON *o = call(r, "POST", "/v1/quota/check", body, &st);
	same_money(o, "quota check month to date", "month_to_date_exact", want.total_nano, id, diff,
	           len);
	cJSON_Delete(o);
	snprintf(path, sizeof path, "/v1/accounts/%s", id);
	o = call(r, "GET", path, NULL, &st);
	same_money(o, "account month to date", "month_to_date_exact", want.total_nano, id, diff,
	           len);
	cJSON_Delete(o);
	snprintf(path, sizeof path, "/v1/accounts/%s/forecast?month=%s", id, m);
	o = call(r, "GET", path, NULL, &st);
	same_money(o, "forecast month to date", "month_to_date_exact", want.total_nano, id, diff,
	           len);
	cJSON_Delete(o);
	cap_decision(r, id, want.total_nano, true, diff, len);
	cap_decision(r, id, want.total_nano + 1, false, diff, len);
	snprintf(path, sizeof path, "/v1/accounts/%s", id);
	cJSON_Delete(call(r, "PATCH", path, "{\"monthly_spend_cap\": null}", &st));
}

/*
 * The month's FOCUS export against the reference's invoice: its usage rows,
 * summed per line (CPU or memory of a plan), give each line's amount, the
 * credit row the trial line's, and all of them the total.
 */
static void compare_export(struct run *r, const struct scenario *s, int a, const char *month,
                           char *diff, size_t len)
{
	const char *id = s->in.accounts[a].id;
	char path[160], t[METER_TIME_BUF];
	snprintf(t, sizeof t, "%s-01T00:00:00Z", month);
	struct ref_invoice want;
	if (!ref_invoice(&s->in, a, at(t), &want))
		return; /* said by compare_month */
	snprintf(path, sizeof path, "/v1/accounts/%s/exports/%s?format=focus", id, month);
	struct http_res res;
	http_do(r->api.port, "GET", path, r->admin, NULL, 0, &res);
	int64_t line_sum[REF_LINES] = {0}, total = 0;
	bool same = res.status == 200 && res.body != NULL;
	int rows = 0;
	for (char *save = NULL, *ln = same ? strtok_r(res.body, "\r\n", &save) : NULL; same && ln;
	     ln = strtok_r(NULL, "\r\n", &save)) {
		char *f[20];
		if (rows++ == 0)
			continue; /* the heading */
		int64_t cost;
		same = csv_fields(ln, f, 20) == 19 && csv_nano(f[16], &cost);
		if (!same)
			break;
		total += cost;
		/* which line: "CPU, billed on measured use (plan P)", "Memory, provisioned
		 * (plan P)", or the trial's credit */
		const char *item = strncmp(f[6], "CPU", 3) == 0      ? "cpu"
		                   : strncmp(f[6], "Memory", 6) == 0 ? "memory"
		                                                     : "trial_credit";
		char plan[REF_ID + 8] = "";
		const char *pp = strstr(f[6], "(plan ");
		if (pp)
			snprintf(plan, sizeof plan, "%.*s", (int)strcspn(pp + 6, ")"), pp + 6);
		int k = 0;
		while (k < want.nlines && !(strcmp(want.lines[k].item, item) == 0 &&
		                            strcmp(want.lines[k].plan, plan) == 0))
			k++;
		same = k < want.nlines;
		if (same)
			line_sum[k] += cost;
	}
	for (int k = 0; same && k < want.nlines; k++)
		same = line_sum[k] == want.lines[k].amount_nano;
	same = same && total == want.total_nano;
	if (!same || verbose)
		say(diff, len,
		    "  %s %s %s export: HTTP %d, %d rows, BilledCost %lld nano-dollars, the "
		    "reference's total %lld\n",
		    same ? "same" : "DIFFERS", id, month, res.status, rows > 0 ? rows - 1 : 0,
		    (long long)total, (long long)want.total_nano);
	http_free(&res);
}

static void compare_trial(struct run *r, const struct scenario *s, int a, char *diff, size_t len)
{
	char path[128];
	snprintf(path, sizeof path, "/v1/accounts/%s/trial", s->in.accounts[a].id);
	struct http_res res;
	http_do(r->api.port, "GET", path, r->admin, NULL, 0, &res);
	cJSON *o = res.status == 200 ? http_json(&res) : NULL;
	http_free(&res);
	int64_t used = 0, want = ref_trial_used(&s->in, a);
	/* hours to 6 decimals, half up */
	int64_t want_micro_h = (want * 2 + 3600) / 7200;
	if (o == NULL || !csv_nano(field(o, "used_hours"), &used) || used / 1000 != want_micro_h ||
	    verbose)
		say(diff, len, "  %s %s trial used: meter %s h, reference %lld µs\n",
		    o && used / 1000 == want_micro_h ? "same" : "DIFFERS", s->in.accounts[a].id,
		    o ? field(o, "used_hours") : "?", (long long)want);
	cJSON_Delete(o);
}

/*
 * sandbox_month_cost (kept by the rollup, step by step) against the hours it
 * sums, summed here at once, and each plan's part priced here (half up, in
 * 128-bit integers), apart from the SQL that keeps it.
 */
static void compare_month_costs(struct run *r, char *diff, size_t len)
{
	PGresult *h = PQexec(
	        r->db.conn,
	        "SELECT * FROM (SELECT u.account_id || ' ' || (date_trunc('month', u.hour AT "
	        "TIME ZONE 'UTC'))::date || ' ' || u.sandbox_id k, sum(u.cpu_measured_us), "
	        "sum(u.cpu_billed_us), sum(u.wall_us), sum(u.memory_mgib_us), "
	        "(p.cpu_vcpu_hour * 1e9)::bigint, (p.memory_gib_hour * 1e9)::bigint, "
	        "u.price_plan_id pl FROM usage_hourly u JOIN price_plans p "
	        "ON p.id = u.price_plan_id "
	        "GROUP BY 1, u.price_plan_id, p.cpu_vcpu_hour, p.memory_gib_hour) x "
	        "ORDER BY k COLLATE \"C\", pl");
	PGresult *c =
	        PQexec(r->db.conn,
	               "SELECT * FROM (SELECT account_id || ' ' || month || ' ' || sandbox_id k, "
	               "cost_nano, cpu_measured_us, cpu_billed_us, wall_us, memory_mgib_us "
	               "FROM sandbox_month_cost) x ORDER BY k COLLATE \"C\"");
	if (PQresultStatus(h) != PGRES_TUPLES_OK || PQresultStatus(c) != PGRES_TUPLES_OK) {
		say(diff, len, "  sandbox months: DIFFERS (could not read: %s)\n",
		    PQerrorMessage(r->db.conn));
		goto out;
	}
	int k = 0, nc = PQntuples(c), nh = PQntuples(h);
	for (int i = 0; i < nh;) {
		const char *key = PQgetvalue(h, i, 0);
		__extension__ __int128 cost = 0, sum[4] = {0};
		for (; i < nh && strcmp(PQgetvalue(h, i, 0), key) == 0; i++) {
			__extension__ __int128 v[6];
			for (int x = 0; x < 6; x++)
				v[x] = strtoll(PQgetvalue(h, i, x + 1), NULL, 10);
			for (int x = 0; x < 4; x++)
				sum[x] += v[x];
			cost += (2 * v[1] * v[4] + INT64_C(3600000000)) / INT64_C(7200000000) +
			        (2 * v[3] * v[5] + INT64_C(3600000000000)) / INT64_C(7200000000000);
		}
		if (sum[0] == 0 && sum[1] == 0 && sum[2] == 0)
			continue; /* no usage left: no row */
		char want[256], got[256] = "(none)";
		snprintf(want, sizeof want, "%s %lld %lld %lld %lld %lld", key, (long long)cost,
		         (long long)sum[0], (long long)sum[1], (long long)sum[2],
		         (long long)sum[3]);
		if (k < nc)
			snprintf(got, sizeof got, "%s %s %s %s %s %s", PQgetvalue(c, k, 0),
			         PQgetvalue(c, k, 1), PQgetvalue(c, k, 2), PQgetvalue(c, k, 3),
			         PQgetvalue(c, k, 4), PQgetvalue(c, k, 5));
		k++;
		if (strcmp(want, got) != 0) {
			say(diff, len,
			    "  sandbox month DIFFERS: hours say %s, sandbox_month_cost %s\n", want,
			    got);
			goto out;
		}
	}
	if (k != nc)
		say(diff, len, "  sandbox months DIFFERS: %d more rows than the hours give\n",
		    nc - k);
out:
	PQclear(h);
	PQclear(c);
}

/*
 * account_day (kept by the rollup, hours taken out and put in as sandboxes
 * are re-rated) against the same hours summed at once by day: every day and
 * plan with usage matches, and a day with none is absent or all zero. And
 * account_month_sandboxes against a count of sandbox_month_cost.
 */
static void compare_days(struct run *r, char *diff, size_t len)
{
	PGresult *d = PQexec(
	        r->db.conn,
	        "WITH h AS (SELECT account_id, (hour AT TIME ZONE 'UTC')::date AS day, "
	        "price_plan_id, sum(cpu_measured_us) a, sum(cpu_billed_us) b, sum(busy_us) c, "
	        "sum(idle_us) d, sum(wall_us) e, sum(memory_mgib_us) f FROM usage_hourly "
	        "GROUP BY 1, 2, 3) "
	        "SELECT coalesce(h.account_id, k.account_id) || ' ' || coalesce(h.day, k.day) "
	        "|| ' plan ' || coalesce(h.price_plan_id, k.price_plan_id) || ': hours ' || "
	        "coalesce(h.a || '/' || h.b || '/' || h.e || '/' || h.f, 'none') || ', account_day "
	        "' || coalesce(k.cpu_measured_us || '/' || k.cpu_billed_us || '/' || k.wall_us || "
	        "'/' || k.memory_mgib_us, 'none') FROM h FULL JOIN account_day k "
	        "ON k.account_id = h.account_id AND k.day = h.day AND k.price_plan_id = "
	        "h.price_plan_id WHERE (h.a, h.b, h.c, h.d, h.e, h.f) IS DISTINCT FROM "
	        "(k.cpu_measured_us, k.cpu_billed_us, k.busy_us, k.idle_us, k.wall_us, "
	        "k.memory_mgib_us) AND NOT (h.account_id IS NULL AND k.cpu_measured_us = 0 AND "
	        "k.cpu_billed_us = 0 AND k.busy_us = 0 AND k.idle_us = 0 AND k.wall_us = 0 AND "
	        "k.memory_mgib_us = 0) LIMIT 3");
	if (PQresultStatus(d) != PGRES_TUPLES_OK)
		say(diff, len, "  account days: DIFFERS (could not read: %s)\n",
		    PQerrorMessage(r->db.conn));
	for (int i = 0; PQresultStatus(d) == PGRES_TUPLES_OK && i < PQntuples(d); i++)
		say(diff, len, "  account day DIFFERS: %s\n", PQgetvalue(d, i, 0));
	PQclear(d);
	/* and the sandboxes a month ranks, counted as the rollup goes, against a count */
	d = PQexec(r->db.conn,
	           "SELECT coalesce(c.account_id, n.account_id) || ' ' || coalesce(c.month, "
	           "n.month) || ': ' || coalesce(c.k, 0) || ' ranked, ' || coalesce(n.sandboxes, "
	           "0) || ' counted' FROM (SELECT account_id, month, count(*) k FROM "
	           "sandbox_month_cost GROUP BY 1, 2) c FULL JOIN account_month_sandboxes n ON "
	           "n.account_id = c.account_id AND n.month = c.month WHERE coalesce(c.k, 0) <> "
	           "coalesce(n.sandboxes, 0) LIMIT 3");
	if (PQresultStatus(d) != PGRES_TUPLES_OK)
		say(diff, len, "  month counts: DIFFERS (could not read: %s)\n",
		    PQerrorMessage(r->db.conn));
	for (int i = 0; PQresultStatus(d) == PGRES_TUPLES_OK && i < PQntuples(d); i++)
		say(diff, len, "  month count DIFFERS: %s\n", PQgetvalue(d, i, 0));
	PQclear(d);
}

#define FAKETIME_LIB "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1"

/* The environment meter-api starts in: its clock at us (libfaketime, from there on),
 * or, for 0, the real one. False when libfaketime is missing. */
static bool fake_clock(int64_t us)
{
	static char asan[512];
	if (us == 0) {
		unsetenv("FAKETIME");
		unsetenv("LD_PRELOAD");
		return true;
	}
	if (access(FAKETIME_LIB, R_OK) != 0) {
		fprintf(stderr, "%s is missing: install Debian's faketime (scripts/deps.sh does)\n",
		        FAKETIME_LIB);
		return false;
	}
	char when[64];
	time_t t = (time_t)(us / 1000000);
	struct tm tm;
	gmtime_r(&t, &tm);
	strftime(when, sizeof when, "@%Y-%m-%d %H:%M:%S", &tm);
	setenv("TZ", "UTC", 1);
	setenv("FAKETIME", when, 1);
	setenv("FAKETIME_DONT_FAKE_MONOTONIC", "1", 1);
	setenv("LD_PRELOAD", FAKETIME_LIB, 1);
	/* the sanitizers' runtime wants to come first; it comes second here */
	if (asan[0] == '\0') {
		const char *was = getenv("ASAN_OPTIONS");
		snprintf(asan, sizeof asan, "%s%sverify_asan_link_order=0", was ? was : "",
		         was && *was ? ":" : "");
		setenv("ASAN_OPTIONS", asan, 1);
	}
	return true;
}

/* Runs one seed; true when meter and the reference agree. */
static bool one_seed(const char *template_name, uint64_t seed, int *scenarios)
{
	static struct scenario s;
	struct run r = {0};
	char diff[32768] = "";
	bool ok = false;
	generate(&s, seed);
	/* meter-api's clock an hour after the scenario's last sample, start or stop: its month to
	 * date is that month's, and the scenario the same whatever day it runs */
	r.now_us = 0;
	for (int i = 0; i < s.in.nsamples; i++)
		if (s.in.samples[i].ts_us > r.now_us)
			r.now_us = s.in.samples[i].ts_us;
	for (int i = 0; i < s.in.nsandboxes; i++) {
		if (s.in.sandboxes[i].stopped_us > r.now_us)
			r.now_us = s.in.sandboxes[i].stopped_us;
		if (s.in.sandboxes[i].started_us > r.now_us) /* one with no sample */
			r.now_us = s.in.sandboxes[i].started_us;
	}
	r.now_us += HOUR;
	bool clock = fake_clock(r.now_us);
	bool up = clock && testdb_create_from(&r.db, "ref", template_name) &&
	          testdb_key(&r.db, NULL, r.admin) &&
	          api_start(&r.api, METER_API_BIN, r.db.api_url, "--invoice-grace=2160h") &&
	          api_start(&r.api2, METER_API_BIN, r.db.api_url, "--invoice-grace=2160h");
	fake_clock(0);
	if (!up) {
		fprintf(stderr, "seed %llu: could not set up\n", (unsigned long long)seed);
		goto out;
	}
	/* Odd seeds run without the trigger that marks other writers' samples, as on Citus
	 * (docs/scaling.md), where meter migrate dropped it already (and Citus refuses even
	 * DROP TRIGGER IF EXISTS on a distributed table): the collector's write alone sets
	 * everything going. */
	if (seed % 2 == 1 &&
	    !testdb_exec(&r.db, "DO $$ BEGIN IF EXISTS (SELECT 1 FROM pg_trigger WHERE tgname = "
	                        "'samples_mark' AND tgrelid = 'samples'::regclass) THEN "
	                        "DROP TRIGGER samples_mark ON samples; END IF; END $$")) {
		fprintf(stderr, "seed %llu: could not drop samples_mark\n",
		        (unsigned long long)seed);
		goto out;
	}
	if (!feed(&r, &s)) {
		fprintf(stderr, "seed %llu: could not feed the scenario\n",
		        (unsigned long long)seed);
		goto out;
	}
	if (count(&r, "SELECT count(*) FROM rollup_queue") != 0)
		say(diff, sizeof diff, "  %ld mark(s) set aside\n",
		    count(&r, "SELECT count(*) FROM rollup_queue"));
	static const char *const months[] = {"2026-09", "2026-10", "2026-11", "2026-12"};
	for (int a = 0; a < s.in.naccounts; a++) {
		for (int m = 0; m < 4; m++) {
			compare_month(&r, &s, a, months[m], diff, sizeof diff);
			compare_export(&r, &s, a, months[m], diff, sizeof diff);
		}
		compare_trial(&r, &s, a, diff, sizeof diff);
		compare_to_date(&r, &s, a, diff, sizeof diff);
	}
	compare_month_costs(&r, diff, sizeof diff);
	compare_days(&r, diff, sizeof diff);
	ok = strstr(diff, "DIFFERS") == NULL && strstr(diff, "set aside") == NULL &&
	     strstr(diff, "status") == NULL && strstr(diff, "overflowed") == NULL;
	*scenarios += s.in.naccounts;
	if (!ok || verbose)
		printf("seed %llu: %s (%d accounts, %d sandboxes, %d samples, %d batches, %d "
		       "plans)\n%s",
		       (unsigned long long)seed, ok ? "same" : "DIFFERS", s.in.naccounts,
		       s.in.nsandboxes, s.in.nsamples, s.nbatches, s.in.nplans, diff);
out:;
	/* a clean exit: under the sanitizers, no leak and no error either */
	struct api_proc *procs[] = {&r.api, &r.api2};
	for (int i = 0; i < 2; i++)
		if (procs[i]->pid) {
			int st = api_stop(procs[i]);
			if (st != 0) {
				printf("seed %llu: meter-api exited with status %d\n",
				       (unsigned long long)seed, st);
				ok = false;
			}
		}
	testdb_drop(&r.db);
	return ok;
}

int main(int argc, char **argv)
{
	uint64_t first = 1, last = 24;
	for (int i = 1; i < argc; i++) {
		unsigned long long a, b;
		if (strcmp(argv[i], "-v") == 0)
			verbose = true;
		else if (strcmp(argv[i], "--seed") == 0 && i + 1 < argc &&
		         sscanf(argv[i + 1], "%llu", &a) == 1)
			first = last = a, i++;
		else if (strcmp(argv[i], "--seeds") == 0 && i + 1 < argc &&
		         sscanf(argv[i + 1], "%llu-%llu", &a, &b) == 2 && a <= b)
			first = a, last = b, i++;
		else {
			fprintf(stderr, "usage: test_reference [--seed N | --seeds A-B] [-v]\n");
			return 2;
		}
	}
	struct testdb tmpl;
	if (!testdb_create_migrated(&tmpl, "reftemplate"))
		return 1;
	PQfinish(tmpl.conn); /* a template takes no connection */
	tmpl.conn = NULL;
	time_t t0 = time(NULL);
	int differ = 0, scenarios = 0;
	for (uint64_t seed = first; seed <= last; seed++)
		if (!one_seed(tmpl.name, seed, &scenarios)) {
			differ++;
			printf("DIFFERS: seed %llu (replay: test_reference --seed %llu -v)\n",
			       (unsigned long long)seed, (unsigned long long)seed);
		}
	testdb_drop(&tmpl);
	printf("differential: seeds %llu-%llu, %d accounts compared against the reference "
	       "(4 months and the trial each), %d seed(s) differ, %lld s\n",
	       (unsigned long long)first, (unsigned long long)last, scenarios, differ,
	       (long long)(time(NULL) - t0));
	return differ == 0 ? 0 : 1;
}
