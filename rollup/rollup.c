#include "rollup/rollup.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/db.h"
#include "common/invoicedb.h"
#include "common/limits.h"
#include "common/log.h"
#include "common/month.h"
#include "common/plans.h"
#include "meter/checked.h"
#include "meter/decimal.h"
#include "meter/rating.h"
#include "meter/timefmt.h"
#include "meter/trial.h"

#define US(col) "(extract(epoch FROM " col ") * 1000000)::bigint"
/* meter_ts (migrations/0030_on_citus.sql): immutable, so Citus sends what uses it to shards */
#define TS(n) "meter_ts((" n ")::bigint)"

/*
 * Marks taken in one transaction. Every statement of a batch serves all of
 * its sandboxes, so a sandbox costs a fraction of a round trip; a batch
 * whose statement fails is taken again one sandbox per transaction, where a
 * sandbox that cannot be stored is parked alone as before.
 */
#define BATCH 32

/* The most text one array parameter may hold. */
#define ARRAY_MAX ((size_t)64 << 20)

static int64_t now_realtime_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* A PostgreSQL array literal ("{...}") being built; failed once it could not grow. */
struct arr {
	char *s;
	size_t len, cap, n;
	bool failed;
};

static void arr_put(struct arr *a, const char *s, size_t n)
{
	if (a->failed)
		return;
	if (a->len + n + 2 > a->cap) {
		size_t cap = a->cap ? a->cap : 256;
		while (a->len + n + 2 > cap)
			cap *= 2;
		char *ns = cap <= ARRAY_MAX ? realloc(a->s, cap) : NULL;
		if (ns == NULL) {
			a->failed = true;
			return;
		}
		a->s = ns;
		a->cap = cap;
	}
	memcpy(a->s + a->len, s, n);
	a->len += n;
	a->s[a->len] = '\0';
}

/* Appends a text element, quoted. */
static void arr_str(struct arr *a, const char *v)
{
	arr_put(a, a->n++ ? ",\"" : "{\"", 2);
	for (const char *p = v; *p;) {
		size_t run = strcspn(p, "\"\\");
		arr_put(a, p, run);
		p += run;
		if (*p) {
			char esc[2] = {'\\', *p++};
			arr_put(a, esc, 2);
		}
	}
	arr_put(a, "\"", 1);
}

static void arr_int(struct arr *a, int64_t v)
{
	char b[32];
	int k = snprintf(b, sizeof b, "%s%lld", a->n++ ? "," : "{", (long long)v);
	arr_put(a, b, (size_t)k);
}

/* An integer element, or NULL for METER_TIME_NONE. */
static void arr_opt(struct arr *a, int64_t v)
{
	if (v != METER_TIME_NONE) {
		arr_int(a, v);
		return;
	}
	arr_put(a, a->n++ ? ",NULL" : "{NULL", 5);
}

/* The literal, or NULL when it could not be built. */
static const char *arr_end(struct arr *a)
{
	arr_put(a, a->n ? "}" : "{}", a->n ? 1 : 2);
	return a->failed ? NULL : a->s;
}

static void arr_free(struct arr *a)
{
	free(a->s);
	*a = (struct arr){0};
}

/* Usage of one hour under one plan; plan 0 holds the hour's unpriced intervals (rule 6). */
struct bucket {
	int64_t hour, plan;
	struct meter_usage u;
	int64_t intervals;
};

struct smp {
	int64_t inc, t, cpu;
	size_t order; /* rank of its incarnation's first appearance */
};

/* One incarnation of a sandbox, as its whole history knows it. */
struct inc {
	int64_t inc, first; /* first: its earliest sample, dropped partitions included */
	bool at_window;     /* seeded: a sample (or seed) up to the window's start */
	bool at_end;        /* any sample (or seed) at all */
	struct meter_sample window, end; /* where it stood at the window's start, at its end */
	int64_t ck_last, ck_cpu;         /* the same up to the read's start, as read (no started_at
	                                  * raise): the checkpoint; METER_TIME_NONE when none */
	int64_t ended; /* the collector's end of it (incarnation_ends), METER_TIME_NONE: none */
};

enum fate {
	RATE,           /* rated and stored, its mark removed */
	NOT_REGISTERED, /* set aside until it is registered (why says what is missing) */
	CANNOT_RATE,    /* parked with the reason in why */
};

struct job {
	char sandbox[160], account[160];
	enum fate fate;
	char why[600];
	bool found;
	int64_t mark; /* the mark's from_ts (METER_TIME_NONE: everything) */
	struct meter_size size;
	int64_t started, stopped; /* METER_TIME_NONE when not known */
	int64_t window;           /* re-rate intervals ending after this (an hour start) */
	int64_t from;             /* samples after it are read, the ones before seed */
	int64_t horizon;          /* raw samples before it were dropped (METER_TIME_NONE: none) */
	const struct meter_plan *plans;
	size_t nplans;
	struct inc *incs;
	size_t ninc;
	struct smp *s;
	size_t n;
	struct bucket *b;
	size_t nb, capb;
	/* The trial's crossing hour (trial_hour_rate): upto is the hour's end, the intervals
	 * ending in (window, upto] are kept in iv instead of summed. */
	int64_t upto;               /* METER_TIME_NONE: a rating of the mark, not of an hour */
	int64_t ahead, ahead_first; /* samples stamped over an hour ahead of now, the first */
	struct hour_iv *iv;
	size_t niv, capiv;
};

/* An interval of the trial's crossing hour, with what rule 8 orders it by. */
struct hour_iv {
	struct meter_interval iv;
	const struct meter_plan *plan;
	const struct job *job; /* its sandbox (jobs are in the order of their ids) */
	size_t seq;            /* its place in the sandbox's series */
};

static void job_free(struct job *j)
{
	free(j->incs);
	free(j->s);
	free(j->b);
	free(j->iv);
}

static void cannot_rate(struct job *j, const char *why)
{
	j->fate = CANNOT_RATE;
	snprintf(j->why, sizeof j->why, "cannot rate: %s", why);
	log_warn("rollup: sandbox %s %s", j->sandbox, why);
}

static bool get_int(const PGresult *r, int row, int col, int64_t *out)
{
	if (PQgetisnull(r, row, col)) {
		*out = METER_TIME_NONE;
		return true;
	}
	return meter_decimal_parse(PQgetvalue(r, row, col), 0, true, out) == METER_OK;
}

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

/*
 * db_query for the statements of a rating transaction: a failure's message
 * ends in "(SQLSTATE xxxxx)", so the log says which error it was and take()
 * can tell a refusal of this sandbox's data from a passing failure.
 */
static PGresult *rq(PGconn *c, const char *sql, int n, const char *const *params,
                    ExecStatusType want, const char *what, char *err, size_t errlen)
{
	PGresult *r = PQexecParams(c, sql, n, NULL, params, NULL, NULL, 0);
	if (db_check(r, want, what, err, errlen))
		return r;
	const char *state = db_sqlstate(r);
	size_t len = strlen(err);
	if (state[0] && len < errlen)
		snprintf(err + len, errlen - len, " (SQLSTATE %s)", state);
	PQclear(r);
	return NULL;
}

/*
 * Runs sql with the n arrays as its parameters, then frees them: true when it
 * ran (what names it in err).
 */
static bool arr_run(PGconn *c, const char *sql, ExecStatusType want, struct arr *a, int n,
                    const char *what, char *err, size_t errlen)
{
	const char *p[16];
	PGresult *r = NULL;
	bool ok = true;
	for (int k = 0; k < n && ok; k++)
		if ((p[k] = arr_end(&a[k])) == NULL) {
			snprintf(err, errlen, "%s: out of memory", what);
			ok = false;
		}
	if (ok) {
		r = rq(c, sql, n, p, want, what, err, errlen);
		ok = r != NULL;
	}
	PQclear(r);
	for (int k = 0; k < n; k++)
		arr_free(&a[k]);
	return ok;
}

/*
 * True when err (from rq) is a failure that says nothing about the sandbox:
 * a deadlock or serialization failure (class 40), too few resources (53),
 * a lock not available (55P03), a cancel, an operator's or the server's
 * shutdown (57), a connection lost (08), an I/O error (58). Such a sandbox is
 * tried again, never parked: parking waits for its next sample, and a stopped
 * sandbox has none, so its last usage would never be billed.
 */
static bool passing_failure(const char *err)
{
	const char *p = strstr(err, "(SQLSTATE ");
	if (p == NULL)
		return false;
	p += strlen("(SQLSTATE ");
	return strncmp(p, "40", 2) == 0 || strncmp(p, "53", 2) == 0 ||
	       strncmp(p, "55P03", 5) == 0 || strncmp(p, "57", 2) == 0 ||
	       strncmp(p, "08", 2) == 0 || strncmp(p, "58", 2) == 0;
}

/* Sets a job aside until the sandbox is registered, saying why. */
static void not_registered(struct job *j, const char *why)
{
	j->fate = NOT_REGISTERED;
	snprintf(j->why, sizeof j->why, "not registered: %s", why);
}

/*
 * Registers a sandbox from its cgroup's limits (its latest sample that names
 * an account and both limits): *done when it did. When it cannot, the job
 * says why: NOT_REGISTERED while the platform may still register it (no
 * account named, an account that does not exist), CANNOT_RATE for limits out
 * of all range (a memory limit of 0) or an INSERT the database refused. The
 * INSERT runs under a savepoint, so its failure is this sandbox's alone;
 * false (the whole batch fails) only when the database failed for a passing
 * reason or the connection is gone.
 */
static bool auto_register(PGconn *c, struct job *j, bool *done, char *err, size_t errlen)
{
	const char *p[] = {j->sandbox};
	*done = false;
	PGresult *r = rq(c,
	                 "SELECT s.account_id, s.cpu_limit_millicores, s.memory_limit_bytes "
	                 "FROM samples s WHERE s.sandbox_id = $1 AND s.account_id IS NOT NULL "
	                 "AND s.cpu_limit_millicores IS NOT NULL "
	                 "AND s.memory_limit_bytes IS NOT NULL ORDER BY s.ts DESC LIMIT 1",
	                 1, p, PGRES_TUPLES_OK, "could not read its cgroup's limits", err, errlen);
	if (r == NULL)
		return false;
	if (PQntuples(r) == 0) {
		not_registered(j, "no sample names its account with CPU and memory limits");
		PQclear(r);
		return true;
	}
	char account[160], why[400];
	int64_t millicores, bytes;
	snprintf(account, sizeof account, "%s", PQgetvalue(r, 0, 0));
	bool good = get_int(r, 0, 1, &millicores) && get_int(r, 0, 2, &bytes);
	PQclear(r);
	/* The account apart: on Citus samples and accounts are spread by different keys. */
	const char *ap[] = {account};
	r = rq(c, "SELECT EXISTS (SELECT 1 FROM accounts WHERE id = $1)", 1, ap, PGRES_TUPLES_OK,
	       "could not look its account up", err, errlen);
	if (r == NULL)
		return false;
	bool exists = strcmp(PQgetvalue(r, 0, 0), "t") == 0;
	PQclear(r);
	if (!exists) {
		snprintf(why, sizeof why, "its cgroup names account \"%s\", which does not exist",
		         account);
		not_registered(j, why);
		return true;
	}
	/* vCPUs: the millicores; memory: bytes to milli-GiB, rounded up. */
	struct meter_size size = {.vcpu_milli = millicores};
	meter_i128 mgib = ((meter_i128)bytes * 1000 + (INT64_C(1) << 30) - 1) >> 30;
	size.mem_mgib = good && mgib <= INT64_MAX ? (int64_t)mgib : -1;
	if (!good || meter_size_check(&size) != METER_OK) {
		snprintf(
		        why, sizeof why,
		        "cannot register from its cgroup's limits: %lld millicores of CPU and %lld "
		        "bytes of memory are out of range (a sandbox has 0.001 to 256 vCPUs and "
		        "up to 1 TiB)",
		        (long long)millicores, (long long)bytes);
		j->fate = CANNOT_RATE;
		snprintf(j->why, sizeof j->why, "%s", why);
		log_warn("rollup: sandbox %s %s", j->sandbox, why);
		return true;
	}
	char vcpus[METER_DECIMAL_BUF], mem[METER_DECIMAL_BUF];
	meter_decimal_format(size.vcpu_milli, 3, 0, vcpus, sizeof vcpus);
	meter_decimal_format(size.mem_mgib, 3, 0, mem, sizeof mem);
	const char *ip[] = {j->sandbox, account, vcpus, mem};
	r = rq(c, "SAVEPOINT register", 0, NULL, PGRES_COMMAND_OK, "could not set a savepoint", err,
	       errlen);
	if (r == NULL)
		return false;
	PQclear(r);
	r = rq(c,
	       "INSERT INTO sandboxes (id, account_id, vcpus, memory_gib) "
	       "VALUES ($1, $2, $3::numeric, $4::numeric) ON CONFLICT DO NOTHING",
	       4, ip, PGRES_COMMAND_OK, "could not register it from its cgroup's limits", err,
	       errlen);
	if (r == NULL) {
		if (PQstatus(c) != CONNECTION_OK || passing_failure(err))
			return false;
		PGresult *back = rq(c, "ROLLBACK TO SAVEPOINT register", 0, NULL, PGRES_COMMAND_OK,
		                    "could not roll back to a savepoint", why, sizeof why);
		if (back == NULL)
			return false;
		PQclear(back);
		j->fate = CANNOT_RATE;
		snprintf(j->why, sizeof j->why, "%s", err);
		log_warn("rollup: sandbox %s: %s", j->sandbox, err);
		err[0] = '\0';
		return true;
	}
	*done = strcmp(PQcmdTuples(r), "1") == 0;
	PQclear(r);
	r = rq(c, "RELEASE SAVEPOINT register", 0, NULL, PGRES_COMMAND_OK,
	       "could not release a savepoint", err, errlen);
	if (r == NULL)
		return false;
	PQclear(r);
	if (*done)
		log_info("sandbox %s registered from its cgroup's limits (account %s, %s vCPUs, "
		         "%s GiB)",
		         j->sandbox, account, vcpus, mem);
	return true;
}

/*
 * The statements of a batch. Each takes arrays, one element per sandbox (or
 * per hourly row), so a batch costs the same number of round trips as one
 * sandbox did. They go unnamed (PQexecParams): nothing is left prepared on
 * the connection, so they pass through transaction pooling, and each is
 * planned for its constants (the time bounds prune partitions).
 */
/* clang-format off */

/* The marks, oldest first; taken ones are skipped (another worker has them). Two steps,
 * a read then a lock by key, in meter_rollup_take (migrations/0029_by_key.sql), as Citus needs. */
static const char take_sql[] =
	"SELECT sandbox_id, CASE WHEN from_ts = '-infinity' THEN NULL ELSE " US("from_ts") " END "
	"FROM meter_rollup_take($1)";

/*
 * Shared with other rollups, exclusive to meter_drop_sample_partitions
 * (migrations/0010): the horizon cannot move until this batch commits. Its
 * own statement, so the reads after it have a snapshot taken after the lock.
 */
static const char lock_sql[] =
	"SELECT pg_advisory_xact_lock_shared(hashtext('meter_sample_horizon'))";

/*
 * The horizon (where raw samples begin: meter_drop_sample_partitions moves
 * it) and the sandboxes, by their rank in $1. A statement after the marks'
 * locks and the horizon's: it sees every stop and registration committed
 * with a mark before.
 */
static const char load_sql[] =
	"SELECT j.k, s.account_id, s.vcpus::text, s.memory_gib::text, "
	"  " US("s.started_at") ", " US("s.platform_stopped_at") ", "
	"  (SELECT CASE WHEN raw_from = '-infinity' THEN NULL ELSE " US("raw_from") " END "
	"   FROM sample_horizon) "
	"FROM unnest($1::text[]) WITH ORDINALITY j(id, k) LEFT JOIN sandboxes s ON s.id = j.id";

/*
 * For every sandbox to rate ($1, reading from $2 µs; $5 its mark's from_ts,
 * NULL for "everything"):
 *   - kind 0, one row per incarnation: its first time in the sandbox's whole
 *     history (their order: dropped partitions and late samples included),
 *     and where it stood up to the read's start and at its end (the time of
 *     its last sample and its highest counter: meter_series_resume) from raw
 *     samples after the horizon $4 (late ones before it are never rated),
 *     what dropped partitions knew (sample_seeds) and, when it still holds,
 *     the sandbox's checkpoint (rollup_checkpoints, migrations/0011): then
 *     only the samples after the checkpoint are read, not the whole life;
 *   - kind 1: its samples after the read's start.
 * Kind 0 also carries the incarnation's end seen by the collector
 * (incarnation_ends). For the trial's crossing hour ($6, NULL for a mark's
 * rating), only samples up to the hour's end are read (read_after adds the
 * first one after it). Samples stamped more than an hour ahead of now are
 * never read; kind 3 counts them (the sandbox is rated without them and its
 * mark set aside).
 * $3, the lowest start, is a timestamptz, so the partitions before it are
 * pruned. meter_rollup_read (migrations/0029_by_key.sql) reads one sandbox at
 * a time by its key: an index scan each on PostgreSQL, never a hash join over
 * a month's partition, and one shard each on Citus.
 */
static const char read_sql[] =
	"SELECT * FROM meter_rollup_read($1::text[], $2::bigint[], $3::timestamptz, "
	"  $4::timestamptz, $5::bigint[], $6::bigint[])";

/*
 * The trial's crossing hour: the first sample after the hour's end ($3) of
 * each incarnation ($1 sandbox, $2 incarnation, $4 its job's rank), so an
 * interval that passes the hour's end and its incarnation's end inside the
 * hour is clipped as a whole history clips it (rule 3). One probe of the
 * samples' key each (meter_rollup_after, migrations/0029_by_key.sql).
 */
static const char after_sql[] =
	"SELECT * FROM meter_rollup_after($1::text[], $2::bigint[], $3::bigint[], $4::bigint[])";

/*
 * The checkpoints of the rated sandboxes ($1), replaced: one row per
 * incarnation seen up to the read's start ($2..$7, one element per row).
 */
static const char checkpoint_sql[] =
	"WITH old AS (DELETE FROM rollup_checkpoints WHERE sandbox_id = ANY ($1::text[]) "
	"  AND (sandbox_id, incarnation) NOT IN "
	"    (SELECT * FROM unnest($2::text[], $3::bigint[]))) "
	"INSERT INTO rollup_checkpoints AS c (sandbox_id, incarnation, upto, first_ts, last_ts, "
	"  max_cpu_usage_us) "
	"SELECT s, i, " TS("u") ", " TS("f") ", " TS("l") ", m "
	"FROM unnest($2::text[], $3::bigint[], $4::bigint[], $5::bigint[], $6::bigint[], "
	"  $7::bigint[]) v(s, i, u, f, l, m) "
	"ON CONFLICT (sandbox_id, incarnation) DO UPDATE SET upto = EXCLUDED.upto, "
	"  first_ts = EXCLUDED.first_ts, last_ts = EXCLUDED.last_ts, "
	"  max_cpu_usage_us = EXCLUDED.max_cpu_usage_us";

/*
 * Removes the rated sandboxes' marks ($4) and their hours from their window
 * on ($1 accounts, $2 sandboxes, $3 windows), taking those hours out of
 * sandbox_month, account_day and account_month, and sets aside the marks that
 * cannot be rated ($5, why $6, kind $7: 'unregistered' or 'parked'), keeping
 * when they first waited: two updates of disjoint rows, not coalesce(...,
 * now()), which Citus cannot send to a shard (it evaluates now() apart).
 * Each table is named by its key = ANY (the batch's array) as well as by the
 * join: Citus sends a join with unnest alone to every shard, and this to the
 * batch's shards only.
 */
static const char clear_sql[] =
	"WITH gone AS (DELETE FROM rollup_queue WHERE sandbox_id = ANY ($4::text[])), "
	"parked AS (UPDATE rollup_queue q SET waiting = p.why, waiting_kind = p.kind, "
	"  waiting_since = now(), retry_after = NULL "
	"  FROM unnest($5::text[], $6::text[], $7::text[]) p(id, why, kind) "
	"  WHERE q.sandbox_id = p.id AND q.sandbox_id = ANY ($5::text[]) "
	"  AND q.waiting_since IS NULL), "
	"still AS (UPDATE rollup_queue q SET waiting = p.why, waiting_kind = p.kind, "
	"  retry_after = NULL FROM unnest($5::text[], $6::text[], $7::text[]) p(id, why, kind) "
	"  WHERE q.sandbox_id = p.id AND q.sandbox_id = ANY ($5::text[]) "
	"  AND q.waiting_since IS NOT NULL), "
	"old AS (DELETE FROM usage_hourly u "
	"  USING unnest($1::text[], $2::text[], $3::bigint[]) j(a, s, w) "
	"  WHERE u.account_id = j.a AND u.sandbox_id = j.s AND u.account_id = ANY ($1::text[]) "
	"  AND u.hour > " TS("j.w - 3600000000") " RETURNING u.*), "
	"unpriced AS (DELETE FROM usage_unpriced u "
	"  USING unnest($1::text[], $2::text[], $3::bigint[]) j(a, s, w) "
	"  WHERE u.account_id = j.a AND u.sandbox_id = j.s AND u.account_id = ANY ($1::text[]) "
	"  AND u.hour > " TS("j.w - 3600000000") "), "
	"sagg AS (SELECT account_id, (date_trunc('month', hour AT TIME ZONE 'UTC'))::date m, "
	"  sandbox_id, price_plan_id, sum(cpu_measured_us) a, sum(cpu_billed_us) b, "
	"  sum(busy_us) c, sum(idle_us) d, sum(wall_us) e, sum(memory_mgib_us) f "
	"  FROM old GROUP BY 1, 2, 3, 4), "
	"sm AS (UPDATE sandbox_month t SET cpu_measured_us = t.cpu_measured_us - x.a, "
	"  cpu_billed_us = t.cpu_billed_us - x.b, busy_us = t.busy_us - x.c, "
	"  idle_us = t.idle_us - x.d, wall_us = t.wall_us - x.e, "
	"  memory_mgib_us = t.memory_mgib_us - x.f FROM sagg x "
	"  WHERE t.account_id = x.account_id AND t.month = x.m AND t.sandbox_id = x.sandbox_id "
	"  AND t.price_plan_id = x.price_plan_id AND t.account_id = ANY ($1::text[])), "
	"dagg AS (SELECT account_id, (hour AT TIME ZONE 'UTC')::date dd, price_plan_id, "
	"  sum(cpu_measured_us) a, sum(cpu_billed_us) b, sum(busy_us) c, sum(idle_us) d, "
	"  sum(wall_us) e, sum(memory_mgib_us) f FROM old GROUP BY 1, 2, 3), "
	"ad AS (UPDATE account_day t SET cpu_measured_us = t.cpu_measured_us - x.a, "
	"  cpu_billed_us = t.cpu_billed_us - x.b, busy_us = t.busy_us - x.c, "
	"  idle_us = t.idle_us - x.d, wall_us = t.wall_us - x.e, "
	"  memory_mgib_us = t.memory_mgib_us - x.f FROM dagg x "
	"  WHERE t.account_id = x.account_id AND t.day = x.dd "
	"  AND t.price_plan_id = x.price_plan_id AND t.account_id = ANY ($1::text[])), "
	"agg AS (SELECT account_id, m, price_plan_id, sum(a) a, sum(b) b, sum(c) c, sum(d) d, "
	"  sum(e) e, sum(f) f FROM sagg GROUP BY 1, 2, 3) "
	"UPDATE account_month t SET cpu_measured_us = t.cpu_measured_us - agg.a, "
	"  cpu_billed_us = t.cpu_billed_us - agg.b, busy_us = t.busy_us - agg.c, "
	"  idle_us = t.idle_us - agg.d, wall_us = t.wall_us - agg.e, "
	"  memory_mgib_us = t.memory_mgib_us - agg.f "
	"FROM agg WHERE t.account_id = agg.account_id AND t.month = agg.m "
	"  AND t.price_plan_id = agg.price_plan_id AND t.account_id = ANY ($1::text[])";

/* The new hours' unpriced intervals (rule 6), one array per column. */
static const char unpriced_sql[] =
	"INSERT INTO usage_unpriced (account_id, sandbox_id, hour, intervals, wall_us, "
	"  cpu_measured_us) "
	"SELECT a, s, " TS("h") ", n, w, c FROM unnest($1::text[], $2::text[], $3::bigint[], "
	"  $4::bigint[], $5::bigint[], $6::bigint[]) v(a, s, h, n, w, c)";

/* Inserts the new hours (one array per column) and adds them to sandbox_month,
 * account_day and account_month. */
static const char insert_sql[] =
	"WITH ins AS (INSERT INTO usage_hourly (account_id, sandbox_id, hour, price_plan_id, "
	"  cpu_measured_us, cpu_billed_us, busy_us, idle_us, wall_us, memory_mgib_us, updated_at) "
	"  SELECT a, s, " TS("h") ", p, c1, c2, c3, c4, c5, c6, now() "
	"  FROM unnest($1::text[], $2::text[], $3::bigint[], $4::int[], $5::bigint[], "
	"    $6::bigint[], $7::bigint[], $8::bigint[], $9::bigint[], $10::bigint[]) "
	"    v(a, s, h, p, c1, c2, c3, c4, c5, c6) RETURNING *), "
	"sm AS (INSERT INTO sandbox_month AS t (account_id, month, sandbox_id, price_plan_id, "
	"  cpu_measured_us, cpu_billed_us, busy_us, idle_us, wall_us, memory_mgib_us) "
	"  SELECT account_id, (date_trunc('month', hour AT TIME ZONE 'UTC'))::date, sandbox_id, "
	"    price_plan_id, sum(cpu_measured_us), sum(cpu_billed_us), sum(busy_us), "
	"    sum(idle_us), sum(wall_us), sum(memory_mgib_us) "
	"  FROM ins GROUP BY 1, 2, 3, 4 ORDER BY 1, 2, 3, 4 "
	"  ON CONFLICT (account_id, month, sandbox_id, price_plan_id) DO UPDATE SET "
	"    cpu_measured_us = t.cpu_measured_us + EXCLUDED.cpu_measured_us, "
	"    cpu_billed_us = t.cpu_billed_us + EXCLUDED.cpu_billed_us, "
	"    busy_us = t.busy_us + EXCLUDED.busy_us, idle_us = t.idle_us + EXCLUDED.idle_us, "
	"    wall_us = t.wall_us + EXCLUDED.wall_us, "
	"    memory_mgib_us = t.memory_mgib_us + EXCLUDED.memory_mgib_us), "
	"ad AS (INSERT INTO account_day AS t (account_id, day, price_plan_id, cpu_measured_us, "
	"  cpu_billed_us, busy_us, idle_us, wall_us, memory_mgib_us) "
	"  SELECT account_id, (hour AT TIME ZONE 'UTC')::date, price_plan_id, "
	"    sum(cpu_measured_us), sum(cpu_billed_us), sum(busy_us), "
	"    sum(idle_us), sum(wall_us), sum(memory_mgib_us) "
	"  FROM ins GROUP BY 1, 2, 3 ORDER BY 1, 2, 3 "
	"  ON CONFLICT (account_id, day, price_plan_id) DO UPDATE SET "
	"    cpu_measured_us = t.cpu_measured_us + EXCLUDED.cpu_measured_us, "
	"    cpu_billed_us = t.cpu_billed_us + EXCLUDED.cpu_billed_us, "
	"    busy_us = t.busy_us + EXCLUDED.busy_us, idle_us = t.idle_us + EXCLUDED.idle_us, "
	"    wall_us = t.wall_us + EXCLUDED.wall_us, "
	"    memory_mgib_us = t.memory_mgib_us + EXCLUDED.memory_mgib_us) "
	"INSERT INTO account_month AS t (account_id, month, price_plan_id, cpu_measured_us, "
	"  cpu_billed_us, busy_us, idle_us, wall_us, memory_mgib_us) "
	"SELECT account_id, (date_trunc('month', hour AT TIME ZONE 'UTC'))::date, price_plan_id, "
	"  sum(cpu_measured_us), sum(cpu_billed_us), sum(busy_us), "
	"  sum(idle_us), sum(wall_us), sum(memory_mgib_us) "
	"FROM ins GROUP BY 1, 2, 3 ORDER BY 1, 2, 3 "
	"ON CONFLICT (account_id, month, price_plan_id) DO UPDATE SET "
	"  cpu_measured_us = t.cpu_measured_us + EXCLUDED.cpu_measured_us, "
	"  cpu_billed_us = t.cpu_billed_us + EXCLUDED.cpu_billed_us, "
	"  busy_us = t.busy_us + EXCLUDED.busy_us, idle_us = t.idle_us + EXCLUDED.idle_us, "
	"  wall_us = t.wall_us + EXCLUDED.wall_us, "
	"  memory_mgib_us = t.memory_mgib_us + EXCLUDED.memory_mgib_us";

/*
 * The cost rows of the rated sandboxes ($1 accounts, $2 sandboxes) from the month
 * of their window ($3) on, from sandbox_month (migrations/0019).
 */
static const char month_costs_sql[] =
	"SELECT meter_sandbox_month_costs($1::text[], $2::text[], "
	"  ARRAY(SELECT (date_trunc('month', " TS("w") " AT TIME ZONE 'UTC'))::date "
	"    FROM unnest($3::bigint[]) WITH ORDINALITY x(w, k) ORDER BY k))";

/* clang-format on */

/* Reads the sandboxes of the batch (with again, only those just registered). */
static bool load_rows(PGconn *c, struct job *jobs, size_t n, bool again, int64_t *horizon,
                      char *err, size_t errlen)
{
	struct arr ids = {0};
	size_t *at = calloc(n + 1, sizeof *at), m = 0;
	bool ok = false;
	PGresult *r = NULL;
	if (at == NULL)
		goto oom;
	for (size_t i = 0; i < n; i++)
		if (!again || (jobs[i].fate == NOT_REGISTERED && jobs[i].found)) {
			arr_str(&ids, jobs[i].sandbox);
			at[m++] = i;
		}
	const char *p[] = {arr_end(&ids)};
	if (p[0] == NULL)
		goto oom;
	r = rq(c, load_sql, 1, p, PGRES_TUPLES_OK, "could not read the sandboxes", err, errlen);
	if (r == NULL)
		goto out;
	for (int row = 0; row < PQntuples(r); row++) {
		int64_t k;
		if (row == 0 && !again && !get_int(r, row, 6, horizon)) {
			snprintf(err, errlen, "malformed horizon");
			goto out;
		}
		if (!get_int(r, row, 0, &k) || k < 1 || (size_t)k > m) {
			snprintf(err, errlen, "could not read the sandboxes: a row out of place");
			goto out;
		}
		struct job *j = &jobs[at[k - 1]];
		j->fate = PQgetisnull(r, row, 1) ? NOT_REGISTERED : RATE;
		if (j->fate == NOT_REGISTERED)
			continue;
		snprintf(j->account, sizeof j->account, "%s", PQgetvalue(r, row, 1));
		if (meter_decimal_parse(PQgetvalue(r, row, 2), 3, false, &j->size.vcpu_milli) !=
		            METER_OK ||
		    meter_decimal_parse(PQgetvalue(r, row, 3), 3, false, &j->size.mem_mgib) !=
		            METER_OK ||
		    !get_int(r, row, 4, &j->started) || !get_int(r, row, 5, &j->stopped))
			cannot_rate(j, "the sandbox has a malformed row");
	}
	ok = true;
	goto out;
oom:
	snprintf(err, errlen, "could not read the sandboxes: out of memory");
out:
	PQclear(r);
	arr_free(&ids);
	free(at);
	return ok;
}

/*
 * Loads the batch's sandboxes; one not registered is registered from its
 * cgroup's limits when its path named an account (and read again), else it
 * is set aside with why (auto_register). *horizon: where raw samples begin.
 */
static bool load(PGconn *c, struct job *jobs, size_t n, int64_t *horizon, char *err, size_t errlen)
{
	*horizon = METER_TIME_NONE;
	if (!load_rows(c, jobs, n, false, horizon, err, errlen))
		return false;
	bool any = false;
	for (size_t i = 0; i < n; i++) {
		bool done = false;
		if (jobs[i].fate == NOT_REGISTERED &&
		    !auto_register(c, &jobs[i], &done, err, errlen))
			return false;
		jobs[i].found = done; /* marks the ones load_rows reads again */
		any = any || done;
	}
	if (any && !load_rows(c, jobs, n, true, horizon, err, errlen))
		return false;
	for (size_t i = 0; i < n; i++) /* registered: its account's limits are checked after */
		jobs[i].found = jobs[i].fate != NOT_REGISTERED && jobs[i].account[0];
	return true;
}

/* The window of each sandbox to rate, and where its samples are read from. */
static void windows(struct job *jobs, size_t n, int64_t horizon)
{
	for (size_t i = 0; i < n; i++) {
		struct job *j = &jobs[i];
		j->horizon = horizon;
		if (j->fate != RATE)
			continue;
		/* Intervals ending after the start of the hour that holds from_ts. */
		/* Everything (a new registration): from the epoch, before any sample can be. */
		j->window = j->mark == METER_TIME_NONE || j->mark <= 0 ? 0 : meter_hour_of(j->mark);
		/* The stop interval ends at stopped_at: its hour is re-rated too (its start moves
		 * when samples come after it was rated). */
		if (j->stopped != METER_TIME_NONE && meter_hour_of(j->stopped) < j->window)
			j->window = meter_hour_of(j->stopped) > 0 ? meter_hour_of(j->stopped) : 0;
		/* Hours before the horizon lost their raw samples: they are final as they are. */
		if (horizon != METER_TIME_NONE && j->window < horizon) {
			char h[METER_TIME_BUF];
			meter_time_format(horizon, h, sizeof h);
			if (j->mark != METER_TIME_NONE && j->mark > 0 && j->mark < horizon)
				log_warn("rollup: sandbox %s has samples from before %s, whose raw "
				         "data was dropped: they are not rated on their own (a "
				         "later "
				         "sample carries their CPU)",
				         j->sandbox, h);
			j->window = horizon;
		}
		/* Samples are read after the window's start and the ones before it seed the
		 * series. But a sample stamped before started_at (a clock behind) counts at
		 * started_at: when the sandbox started inside the window, such a sample may be
		 * stamped before the window yet count in it, so it must be read, not seeded (a
		 * seed would swallow its CPU). Such a sandbox lives wholly after the window's
		 * start: all of its samples are read, from the horizon. */
		j->from = j->window;
		if (j->started != METER_TIME_NONE && j->started > j->from)
			j->from = horizon != METER_TIME_NONE ? horizon : 0;
	}
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

/* Where an incarnation stood (a time, raised to started_at, and its highest counter). */
static bool get_seed(const PGresult *r, int row, int col, const struct job *j, int64_t inc,
                     bool *found, struct meter_sample *out)
{
	*found = !PQgetisnull(r, row, col);
	*out = (struct meter_sample){.incarnation = inc};
	if (!*found)
		return true;
	if (!get_int(r, row, col, &out->t_us) || !get_int(r, row, col + 1, &out->cpu_us) ||
	    out->cpu_us == METER_TIME_NONE)
		return false;
	if (j->started != METER_TIME_NONE && out->t_us < j->started)
		out->t_us = j->started;
	return true;
}

/* Reads the history and the window of every sandbox to rate (read_sql) into its job. */
static bool read_samples(PGconn *c, struct job *jobs, size_t n, char *err, size_t errlen)
{
	struct arr ids = {0}, from = {0}, marks = {0}, upto = {0};
	size_t *at = calloc(n + 1, sizeof *at), m = 0;
	int64_t lowest = INT64_MAX, horizon = METER_TIME_NONE;
	PGresult *r = NULL;
	bool ok = false;
	if (at == NULL)
		goto oom;
	for (size_t i = 0; i < n; i++) {
		if (jobs[i].fate != RATE)
			continue;
		arr_str(&ids, jobs[i].sandbox);
		arr_int(&from, jobs[i].from);
		arr_opt(&marks, jobs[i].mark);
		arr_opt(&upto, jobs[i].upto);
		at[m++] = i;
		if (jobs[i].from < lowest)
			lowest = jobs[i].from;
		horizon = jobs[i].horizon;
	}
	if (m == 0) {
		ok = true;
		goto out;
	}
	char low[METER_TIME_BUF], hor[METER_TIME_BUF];
	meter_time_format(lowest, low, sizeof low);
	if (horizon != METER_TIME_NONE)
		meter_time_format(horizon, hor, sizeof hor);
	else
		snprintf(hor, sizeof hor, "-infinity");
	const char *p[] = {arr_end(&ids), arr_end(&from),  low,
	                   hor,           arr_end(&marks), arr_end(&upto)};
	if (p[0] == NULL || p[1] == NULL || p[4] == NULL || p[5] == NULL)
		goto oom;
	r = rq(c, read_sql, 6, p, PGRES_TUPLES_OK, "could not read samples", err, errlen);
	if (r == NULL)
		goto out;
	/* Twice over the rows: count per sandbox, then fill. */
	int rows = PQntuples(r);
	for (int pass = 0; pass < 2; pass++) {
		for (int row = 0; row < rows; row++) {
			int64_t kind, k, inc;
			if (!get_int(r, row, 0, &kind) || !get_int(r, row, 1, &k) || k < 1 ||
			    (size_t)k > m || !get_int(r, row, 2, &inc)) {
				snprintf(err, errlen, "could not read samples: a row out of place");
				goto out;
			}
			struct job *j = &jobs[at[k - 1]];
			if (kind == 3) { /* samples stamped ahead of now */
				j->ahead = inc;
				if (!get_int(r, row, 3, &j->ahead_first))
					j->ahead = 0;
				continue;
			}
			if (pass == 0) {
				kind == 0 ? j->ninc++ : j->n++;
				continue;
			}
			if (j->fate != RATE)
				continue;
			bool good;
			if (kind == 0) {
				struct inc *x = &j->incs[j->ninc++];
				x->inc = inc;
				x->ck_last = x->ck_cpu = METER_TIME_NONE;
				good = get_int(r, row, 3, &x->first) &&
				       get_int(r, row, 8, &x->ended) &&
				       get_seed(r, row, 4, j, inc, &x->at_window, &x->window) &&
				       get_seed(r, row, 6, j, inc, &x->at_end, &x->end) &&
				       (PQgetisnull(r, row, 4) ||
				        (get_int(r, row, 4, &x->ck_last) &&
				         get_int(r, row, 5, &x->ck_cpu)));
			} else {
				struct smp *s = &jobs[at[k - 1]].s[j->n++];
				s->inc = inc;
				good = get_int(r, row, 3, &s->t) && get_int(r, row, 4, &s->cpu) &&
				       s->t != METER_TIME_NONE && s->cpu != METER_TIME_NONE;
			}
			if (!good)
				cannot_rate(j, "malformed samples");
		}
		for (size_t i = 0; pass == 0 && i < m; i++) {
			struct job *j = &jobs[at[i]];
			j->incs = calloc(j->ninc + 1, sizeof *j->incs);
			j->s = calloc(j->n + 1, sizeof *j->s);
			if (j->incs == NULL || j->s == NULL)
				goto oom;
			j->ninc = j->n = 0;
		}
	}
	ok = true;
	goto out;
oom:
	snprintf(err, errlen, "could not read samples: out of memory");
out:
	PQclear(r);
	arr_free(&ids);
	arr_free(&from);
	arr_free(&marks);
	arr_free(&upto);
	free(at);
	return ok;
}

/*
 * For the trial's crossing hour (jobs with upto): adds to each job the first
 * sample after the hour of each of its incarnations (after_sql).
 */
static bool read_after(PGconn *c, struct job *jobs, size_t n, char *err, size_t errlen)
{
	struct arr a[4] = {{0}};
	size_t *at = calloc(n + 1, sizeof *at), m = 0;
	PGresult *r = NULL;
	bool ok = false;
	if (at == NULL)
		goto oom;
	for (size_t i = 0; i < n; i++) {
		if (jobs[i].fate != RATE || jobs[i].upto == METER_TIME_NONE)
			continue;
		at[m++] = i;
		for (size_t k = 0; k < jobs[i].ninc; k++) {
			arr_str(&a[0], jobs[i].sandbox);
			arr_int(&a[1], jobs[i].incs[k].inc);
			arr_int(&a[2], jobs[i].upto);
			arr_int(&a[3], (int64_t)m);
		}
	}
	const char *p[4];
	for (int k = 0; k < 4; k++)
		if ((p[k] = arr_end(&a[k])) == NULL)
			goto oom;
	if (a[0].n == 0) {
		ok = true;
		goto out;
	}
	r = rq(c, after_sql, 4, p, PGRES_TUPLES_OK, "could not read samples after the hour", err,
	       errlen);
	if (r == NULL)
		goto out;
	for (int row = 0; row < PQntuples(r); row++) {
		int64_t k;
		struct smp x = {0};
		if (!get_int(r, row, 0, &k) || k < 1 || (size_t)k > m ||
		    !get_int(r, row, 1, &x.inc) || !get_int(r, row, 2, &x.t) ||
		    !get_int(r, row, 3, &x.cpu) || x.t == METER_TIME_NONE ||
		    x.cpu == METER_TIME_NONE) {
			snprintf(err, errlen,
			         "could not read samples after the hour: a row out of place");
			goto out;
		}
		struct job *j = &jobs[at[k - 1]];
		struct smp *ns = realloc(j->s, (j->n + 2) * sizeof *ns);
		if (ns == NULL)
			goto oom;
		j->s = ns;
		j->s[j->n++] = x;
	}
	ok = true;
	goto out;
oom:
	snprintf(err, errlen, "could not read samples after the hour: out of memory");
out:
	PQclear(r);
	for (int k = 0; k < 4; k++)
		arr_free(&a[k]);
	free(at);
	return ok;
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
static bool rate(struct job *j)
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
			cannot_rate(j, "malformed samples");
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
			cannot_rate(j, "an hour of its usage is out of range (a CPU counter past "
			               "all reason?)");
			return false;
		}
	}
	log_unpriced(j);
	return true;
rule:
	cannot_rate(j, meter_strerror(st));
	return false;
}

/*
 * Replaces the checkpoints of the rated sandboxes: where each incarnation
 * that has a sample (or seed) up to the read's start stood there, so the next
 * rating reads only what came after (read_sql says when it may).
 */
static bool store_checkpoints(PGconn *c, const struct job *jobs, size_t n, char *err, size_t errlen)
{
	struct arr a[7] = {{0}};
	size_t rated = 0;
	for (size_t i = 0; i < n; i++) {
		const struct job *j = &jobs[i];
		if (j->fate != RATE)
			continue;
		arr_str(&a[0], j->sandbox);
		rated++;
		for (size_t k = 0; k < j->ninc; k++) {
			const struct inc *x = &j->incs[k];
			if (x->first > j->from)
				continue; /* nothing of it up to the read's start */
			arr_str(&a[1], j->sandbox);
			arr_int(&a[2], x->inc);
			arr_int(&a[3], j->from);
			arr_int(&a[4], x->first);
			arr_opt(&a[5], x->ck_last);
			arr_opt(&a[6], x->ck_last == METER_TIME_NONE ? METER_TIME_NONE : x->ck_cpu);
		}
	}
	if (rated == 0) {
		for (int k = 0; k < 7; k++)
			arr_free(&a[k]);
		return true;
	}
	return arr_run(c, checkpoint_sql, PGRES_COMMAND_OK, a, 7, "could not store checkpoints",
	               err, errlen);
}

/* Stores the rated sandboxes' unpriced intervals, hour by hour (usually none). */
static bool store_unpriced(PGconn *c, const struct job *jobs, size_t n, char *err, size_t errlen)
{
	struct arr a[6] = {{0}};
	size_t rows = 0;
	for (size_t i = 0; i < n; i++)
		for (size_t k = 0; jobs[i].fate == RATE && k < jobs[i].nb; k++) {
			const struct bucket *b = &jobs[i].b[k];
			if (b->plan != 0)
				continue;
			arr_str(&a[0], jobs[i].account);
			arr_str(&a[1], jobs[i].sandbox);
			arr_int(&a[2], b->hour);
			arr_int(&a[3], b->intervals);
			arr_int(&a[4], (int64_t)b->u.wall_us); /* within 64 bits: rate() checked */
			arr_int(&a[5], (int64_t)b->u.cpu_measured_us);
			rows++;
		}
	if (rows == 0) {
		for (int k = 0; k < 6; k++)
			arr_free(&a[k]);
		return true;
	}
	return arr_run(c, unpriced_sql, PGRES_COMMAND_OK, a, 6,
	               "could not store unpriced intervals", err, errlen);
}

/*
 * Stores the batch: the rated sandboxes' hours replaced from their windows
 * on, account_month kept in step, their marks removed; the others parked.
 */
static bool store(PGconn *c, struct job *jobs, size_t n, char *err, size_t errlen)
{
	struct arr a[10] = {{0}}, gone = {0}, park = {0}, why = {0}, kind = {0};
	PGresult *r = NULL;
	bool ok = false;
	size_t rows = 0;
	for (size_t i = 0; i < n; i++) {
		const struct job *j = &jobs[i];
		if (j->fate != RATE) {
			arr_str(&park, j->sandbox);
			arr_str(&why, j->why[0] ? j->why : "not registered");
			arr_str(&kind, j->fate == NOT_REGISTERED ? "unregistered" : "parked");
			continue;
		}
		if (j->ahead > 0) {
			/* rated without them; its mark stays aside until they are fixed */
			char first[METER_TIME_BUF], text[300];
			meter_time_format(j->ahead_first, first, sizeof first);
			snprintf(
			        text, sizeof text,
			        "%lld sample(s) stamped from %s on, more than an hour ahead of now "
			        "(a clock ahead?), are not rated; the rest is",
			        (long long)j->ahead, first);
			log_warn("rollup: sandbox %s (account %s): %s", j->sandbox, j->account,
			         text);
			arr_str(&park, j->sandbox);
			arr_str(&why, text);
			arr_str(&kind, "parked");
		} else {
			arr_str(&gone, j->sandbox);
		}
		arr_str(&a[0], j->account);
		arr_str(&a[1], j->sandbox);
		arr_int(&a[2], j->window);
	}
	const char *p[10] = {arr_end(&a[0]), arr_end(&a[1]), arr_end(&a[2]), arr_end(&gone),
	                     arr_end(&park), arr_end(&why),  arr_end(&kind)};
	for (int k = 0; k < 7; k++)
		if (p[k] == NULL)
			goto oom;
	r = rq(c, clear_sql, 7, p, PGRES_COMMAND_OK, "could not replace hourly usage", err, errlen);
	if (r == NULL)
		goto out;
	PQclear(r);
	r = NULL;
	for (int k = 0; k < 3; k++)
		arr_free(&a[k]);
	if (!store_unpriced(c, jobs, n, err, errlen))
		goto out;
	for (size_t i = 0; i < n; i++) {
		const struct job *j = &jobs[i];
		for (size_t k = 0; j->fate == RATE && k < j->nb; k++) {
			const struct bucket *b = &j->b[k];
			if (b->plan == 0)
				continue; /* unpriced: store_unpriced */
			arr_str(&a[0], j->account);
			arr_str(&a[1], j->sandbox);
			arr_int(&a[2], b->hour);
			arr_int(&a[3], b->plan);
			/* each within 64 bits: rate() checked */
			arr_int(&a[4], (int64_t)b->u.cpu_measured_us);
			arr_int(&a[5], (int64_t)b->u.cpu_billed_us);
			arr_int(&a[6], (int64_t)b->u.busy_us);
			arr_int(&a[7], (int64_t)b->u.idle_us);
			arr_int(&a[8], (int64_t)b->u.wall_us);
			arr_int(&a[9], (int64_t)b->u.mem_mgib_us);
			rows++;
		}
	}
	if (rows > 0) {
		for (int k = 0; k < 10; k++)
			if ((p[k] = arr_end(&a[k])) == NULL)
				goto oom;
		r = rq(c, insert_sql, 10, p, PGRES_COMMAND_OK, "could not store hourly usage", err,
		       errlen);
		if (r == NULL)
			goto out;
		PQclear(r);
		r = NULL;
	}
	for (int k = 0; k < 10; k++)
		arr_free(&a[k]);
	for (size_t i = 0; i < n; i++)
		if (jobs[i].fate == RATE) {
			arr_str(&a[0], jobs[i].account);
			arr_str(&a[1], jobs[i].sandbox);
			arr_int(&a[2], jobs[i].window);
		}
	if (a[0].n > 0 && !arr_run(c, month_costs_sql, PGRES_TUPLES_OK, a, 3,
	                           "could not rank the sandboxes' months", err, errlen))
		goto out;
	if (!store_checkpoints(c, jobs, n, err, errlen))
		goto out;
	ok = true;
	goto out;
oom:
	snprintf(err, errlen, "could not store hourly usage: out of memory");
out:
	PQclear(r);
	for (int k = 0; k < 10; k++)
		arr_free(&a[k]);
	arr_free(&gone);
	arr_free(&park);
	arr_free(&why);
	arr_free(&kind);
	return ok;
}

/* ---- the trial's crossing hour (rule 8) ---- */

/* Sandboxes of the crossing hour read in one statement. */
#define HOUR_CHUNK 256

/* Rule 8's order: by end; at one end by sandbox id (byte order), then the series' order. */
static int cmp_hour_iv(const void *a, const void *b)
{
	const struct hour_iv *x = a, *y = b;
	if (x->iv.end_us != y->iv.end_us)
		return x->iv.end_us < y->iv.end_us ? -1 : 1;
	if (x->job != y->job)
		return x->job < y->job ? -1 : 1; /* jobs are in the order of their ids */
	return x->seq < y->seq ? -1 : x->seq > y->seq;
}

/*
 * Rates the crossing hour (hour, hour + 1 h] of every sandbox of account with
 * usage in it, from its samples, and covers the hour's intervals in rule 8's
 * order from left_us of the grant, the crossing one in proportion. covered:
 * per plan. A sandbox whose rating a rule refuses (it is parked) adds
 * nothing. False with err when the database failed.
 */
static bool trial_hour_rate(PGconn *c, const char *account, int64_t hour, int64_t horizon,
                            int64_t left_us, const struct meter_plan *plans, size_t nplans,
                            struct plan_sum *cov, size_t *ncov, char *err, size_t errlen)
{
	char h[24];
	snprintf(h, sizeof h, "%lld", (long long)hour);
	const char *p[] = {account, h};
	struct job *jobs = NULL;
	struct hour_iv *all = NULL;
	size_t n = 0, total = 0;
	bool ok = false;
	PGresult *r = rq(c,
	                 "SELECT DISTINCT sandbox_id COLLATE \"C\" FROM usage_hourly "
	                 "WHERE account_id = $1 AND hour = " TS("$2") " ORDER BY 1",
	                 2, p, PGRES_TUPLES_OK, "could not read the crossing hour's sandboxes", err,
	                 errlen);
	if (r == NULL)
		return false;
	n = (size_t)PQntuples(r);
	jobs = calloc(n + 1, sizeof *jobs);
	if (jobs == NULL)
		goto oom;
	for (size_t i = 0; i < n; i++) {
		struct job *j = &jobs[i];
		*j = (struct job){.plans = plans,
		                  .nplans = nplans,
		                  .mark = METER_TIME_NONE,
		                  .upto = hour + METER_US_PER_HOUR};
		snprintf(j->sandbox, sizeof j->sandbox, "%s", PQgetvalue(r, (int)i, 0));
	}
	PQclear(r);
	r = NULL;
	for (size_t at = 0; at < n; at += HOUR_CHUNK) {
		size_t m = n - at < HOUR_CHUNK ? n - at : HOUR_CHUNK;
		struct job *chunk = jobs + at;
		int64_t unused;
		if (!load_rows(c, chunk, m, false, &unused, err, errlen))
			goto out;
		for (size_t i = 0; i < m; i++) {
			struct job *j = &chunk[i];
			j->horizon = horizon;
			j->window = j->from = hour;
			if (j->started != METER_TIME_NONE && j->started > j->from)
				j->from =
				        horizon != METER_TIME_NONE ? horizon : 0; /* as windows() */
		}
		if (!read_samples(c, chunk, m, err, errlen) ||
		    !read_after(c, chunk, m, err, errlen))
			goto out;
		for (size_t i = 0; i < m; i++) {
			struct job *j = &chunk[i];
			if (j->fate == RATE && !rate(j))
				j->niv = 0; /* refused: parked on its own rating too */
			if (j->fate == RATE)
				total += j->niv;
		}
	}
	all = calloc(total + 1, sizeof *all);
	if (all == NULL)
		goto oom;
	total = 0;
	for (size_t i = 0; i < n; i++)
		for (size_t k = 0; jobs[i].fate == RATE && k < jobs[i].niv; k++)
			all[total++] = jobs[i].iv[k];
	qsort(all, total, sizeof *all, cmp_hour_iv);
	*ncov = 0;
	int64_t left = left_us;
	for (size_t i = 0; i < total; i++) {
		struct meter_usage part;
		if (meter_trial_cover(&left, &all[i].job->size, &all[i].iv, &part) != METER_OK ||
		    !plan_sum_add(cov, ncov, MONTH_PLANS_MAX, all[i].plan->id, &part)) {
			snprintf(err, errlen, "the trial's share of hour %s cannot be summed", h);
			goto out;
		}
	}
	ok = true;
	goto out;
oom:
	snprintf(err, errlen, "could not rate the crossing hour: out of memory");
out:
	PQclear(r);
	for (size_t i = 0; jobs && i < n; i++)
		job_free(&jobs[i]);
	free(jobs);
	free(all);
	return ok;
}

/*
 * The hour in which account's grant runs out: the first hour by whose end
 * its sandbox time reaches grant_us (months summed from account_month, then
 * the hours of that month), and *before_us the time before that hour.
 * *hour is METER_TIME_NONE when the grant is not used up.
 */
static bool trial_find_hour(PGconn *c, const char *account, int64_t grant_us, int64_t *hour,
                            int64_t *before_us, char *err, size_t errlen)
{
	char g[24];
	snprintf(g, sizeof g, "%lld", (long long)grant_us);
	const char *p[] = {account, g};
	PGresult *r = rq(
	        c,
	        "WITH m AS (SELECT month, sum(wall_us) w, sum(sum(wall_us)) OVER (ORDER BY month) "
	        "cum "
	        "  FROM account_month WHERE account_id = $1 GROUP BY month), "
	        "mo AS (SELECT month, cum - w before FROM m WHERE cum >= $2::numeric "
	        "  ORDER BY month LIMIT 1), "
	        "h AS (SELECT u.hour, sum(u.wall_us) w FROM usage_hourly u, mo "
	        "  WHERE u.account_id = $1 AND u.hour >= mo.month::timestamp AT TIME ZONE 'UTC' "
	        "  AND u.hour < (mo.month + interval '1 month')::timestamp AT TIME ZONE 'UTC' "
	        "  GROUP BY u.hour), "
	        "hc AS (SELECT hour, w, (SELECT before FROM mo) + sum(w) OVER (ORDER BY hour) cum "
	        "  FROM h) "
	        "SELECT " US("hour") ", cum - w FROM hc WHERE cum >= $2::numeric "
	                             "ORDER BY hour LIMIT 1",
	        2, p, PGRES_TUPLES_OK, "could not find where the trial runs out", err, errlen);
	if (r == NULL)
		return false;
	bool ok = true;
	*hour = METER_TIME_NONE;
	if (PQntuples(r) == 1)
		ok = get_int(r, 0, 0, hour) && get_int(r, 0, 1, before_us) && *before_us >= 0 &&
		     *before_us < grant_us;
	PQclear(r);
	if (!ok)
		snprintf(err, errlen, "could not find where the trial runs out: a malformed sum");
	return ok;
}

/*
 * What the grant covers of an hour whose raw samples were dropped: its sums
 * per plan, in the order of the plans, the crossing one in proportion (the
 * nearest to rule 8 the sums allow).
 */
static bool trial_hour_shared(PGconn *c, const char *account, int64_t hour, int64_t left_us,
                              struct plan_sum *cov, size_t *ncov, char *err, size_t errlen)
{
	char h[24];
	snprintf(h, sizeof h, "%lld", (long long)hour);
	const char *p[] = {account, h};
	PGresult *r = rq(c,
	                 "SELECT price_plan_id, sum(cpu_measured_us), sum(cpu_billed_us), "
	                 "sum(busy_us), sum(idle_us), sum(wall_us), sum(memory_mgib_us) "
	                 "FROM usage_hourly WHERE account_id = $1 AND hour = " TS(
	                         "$2") " "
	                               "GROUP BY price_plan_id ORDER BY price_plan_id",
	                 2, p, PGRES_TUPLES_OK, "could not read the crossing hour", err, errlen);
	if (r == NULL)
		return false;
	bool ok = true;
	*ncov = 0;
	for (int i = 0; ok && i < PQntuples(r); i++) {
		struct meter_usage u, part;
		int64_t plan;
		ok = get_int(r, i, 0, &plan) && db_col_usage(r, i, 1, &u) &&
		     meter_trial_cover_usage(&left_us, &u, &part) == METER_OK &&
		     plan_sum_add(cov, ncov, MONTH_PLANS_MAX, plan, &part);
	}
	PQclear(r);
	if (!ok)
		snprintf(err, errlen, "the trial's share of hour %s cannot be summed", h);
	return ok;
}

/* Replaces account's crossing: none (hour METER_TIME_NONE), or the hour and its cover. */
static bool trial_store(PGconn *c, const char *account, int64_t hour, bool exact,
                        const struct plan_sum *cov, size_t ncov, char *err, size_t errlen)
{
	char h[24];
	snprintf(h, sizeof h, "%lld", (long long)hour);
	const char *p[] = {account, h, exact ? "t" : "f"};
	PGresult *r = rq(c, "DELETE FROM trial_crossing WHERE account_id = $1", 1, p,
	                 PGRES_COMMAND_OK, "could not replace the trial's crossing", err, errlen);
	if (r == NULL)
		return false;
	PQclear(r);
	if (hour == METER_TIME_NONE)
		return true;
	r = rq(c,
	       "INSERT INTO trial_crossing (account_id, hour, exact) VALUES ($1, " TS("$2") ", $3)",
	       3, p, PGRES_COMMAND_OK, "could not store the trial's crossing", err, errlen);
	if (r == NULL)
		return false;
	PQclear(r);
	for (size_t i = 0; i < ncov; i++) {
		char v[7][METER_QTY_BUF];
		const struct meter_usage *u = &cov[i].u;
		snprintf(v[0], sizeof v[0], "%lld", (long long)cov[i].plan_id);
		db_q_text(u->cpu_measured_us, v[1], sizeof v[1]);
		db_q_text(u->cpu_billed_us, v[2], sizeof v[2]);
		db_q_text(u->busy_us, v[3], sizeof v[3]);
		db_q_text(u->idle_us, v[4], sizeof v[4]);
		db_q_text(u->wall_us, v[5], sizeof v[5]);
		db_q_text(u->mem_mgib_us, v[6], sizeof v[6]);
		const char *q[] = {account, v[0], v[1], v[2], v[3], v[4], v[5], v[6]};
		r = rq(c,
		       "INSERT INTO trial_cover VALUES ($1, $2, $3::numeric, $4::numeric, "
		       "$5::numeric, "
		       "$6::numeric, $7::numeric, $8::numeric)",
		       8, q, PGRES_COMMAND_OK, "could not store the trial's cover", err, errlen);
		if (r == NULL)
			return false;
		PQclear(r);
	}
	return true;
}

/*
 * Finds account's crossing again and stores it: none when its grant is not
 * used up (or it has none), else the hour it runs out in and what the grant
 * covers of it, rated from the hour's samples (or shared out from its sums
 * when they were dropped). Inside the caller's transaction, which holds the
 * account's row of trial_queue and the horizon's lock.
 */
static bool trial_update(PGconn *c, const char *account, int64_t horizon,
                         const struct meter_plan *plans, size_t nplans, char *err, size_t errlen)
{
	const char *p[] = {account};
	PGresult *r = rq(c,
	                 "SELECT a.trial_grant_seconds * 1000000, "
	                 "  (SELECT coalesce(sum(wall_us), 0) FROM account_month m "
	                 "   WHERE m.account_id = $1) >= a.trial_grant_seconds * 1000000 "
	                 "FROM accounts a WHERE a.id = $1",
	                 1, p, PGRES_TUPLES_OK, "could not read the trial", err, errlen);
	if (r == NULL)
		return false;
	int64_t grant = 0, hour = METER_TIME_NONE, before = 0;
	bool spent = PQntuples(r) == 1 && strcmp(PQgetvalue(r, 0, 1), "t") == 0;
	bool ok = PQntuples(r) == 0 || get_int(r, 0, 0, &grant);
	PQclear(r);
	if (!ok) {
		snprintf(err, errlen, "account %s has a malformed trial grant", account);
		return false;
	}
	struct plan_sum cov[MONTH_PLANS_MAX];
	size_t ncov = 0;
	if (grant > 0 && spent && !trial_find_hour(c, account, grant, &hour, &before, err, errlen))
		return false;
	bool exact = horizon == METER_TIME_NONE || hour >= horizon;
	if (hour != METER_TIME_NONE &&
	    !(exact ? trial_hour_rate(c, account, hour, horizon, grant - before, plans, nplans, cov,
	                              &ncov, err, errlen)
	            : trial_hour_shared(c, account, hour, grant - before, cov, &ncov, err, errlen)))
		return false;
	if (hour != METER_TIME_NONE && !exact)
		log_warn(
		        "trial: account %s runs out of its grant in an hour whose raw samples were "
		        "dropped: its cover is shared out from the hour's sums",
		        account);
	return trial_store(c, account, hour, exact, cov, ncov, err, errlen);
}

/*
 * In a batch's transaction: queues the accounts whose crossing may have moved,
 * those with a grant whose usage changed at or before the hour it ran out in,
 * or that had not run out and now may have. The next trial_queue_pass finds
 * them again, once per account however many batches changed it. An account
 * already queued and being found right now keeps the batch waiting until it
 * is done, then is queued again (ON CONFLICT DO UPDATE waits for the row).
 */
static bool trial_enqueue(PGconn *c, const struct job *jobs, size_t n, char *err, size_t errlen)
{
	struct arr ids = {0}, win = {0};
	size_t m = 0;
	for (size_t i = 0; i < n; i++)
		if (jobs[i].fate == RATE) {
			arr_str(&ids, jobs[i].account);
			arr_int(&win, jobs[i].window);
			m++;
		}
	const char *p[] = {arr_end(&ids), arr_end(&win)};
	PGresult *r = NULL;
	bool ok = m == 0;
	if (m > 0 && (p[0] == NULL || p[1] == NULL))
		snprintf(err, errlen, "could not queue the trials: out of memory");
	else if (m > 0)
		r = rq(c,
		       "INSERT INTO trial_queue AS q (account_id) "
		       "SELECT a.id FROM (SELECT id, min(w) w FROM unnest($1::text[], "
		       "$2::bigint[]) "
		       "  x(id, w) GROUP BY id) x JOIN accounts a ON a.id = x.id "
		       "LEFT JOIN trial_crossing t ON t.account_id = a.id "
		       "WHERE a.id = ANY ($1::text[]) AND a.trial_grant_seconds > 0 AND (t.hour "
		       ">= " TS(
		               "x.w") " "
		                      "  OR (t.hour IS NULL AND (SELECT coalesce(sum(wall_us), 0) "
		                      "FROM account_month m "
		                      "      WHERE m.account_id = a.id) >= a.trial_grant_seconds * "
		                      "1000000)) "
		                      "ORDER BY 1 ON CONFLICT (account_id) DO UPDATE SET queued_at "
		                      "= q.queued_at",
		       2, p, PGRES_COMMAND_OK, "could not queue the trials", err, errlen);
	ok = ok || r != NULL;
	PQclear(r);
	arr_free(&ids);
	arr_free(&win);
	return ok;
}

/*
 * The accounts of trial_queue, one per transaction, oldest first: their
 * crossings found again after batches changed their usage, a grant changed,
 * or usage rated before the crossing was kept. Returns how many it did, or -1
 * with err when the database failed; one that fails goes to the back of the
 * queue and waits for the next pass.
 */
static int trial_queue_pass(PGconn *c, const struct meter_plan *plans, size_t nplans, char *err,
                            size_t errlen)
{
	int done = 0;
	for (;;) {
		PGresult *r =
		        rq(c, "BEGIN", 0, NULL, PGRES_COMMAND_OK, "could not begin", err, errlen);
		if (r == NULL)
			return -1;
		PQclear(r);
		r = rq(c, "SELECT account_id FROM meter_trial_take()", 0, NULL, PGRES_TUPLES_OK,
		       "could not read the trial queue", err, errlen);
		if (r == NULL || PQntuples(r) == 0) {
			PQclear(r);
			PQclear(PQexec(c, "ROLLBACK"));
			return r == NULL ? -1 : done;
		}
		char id[160];
		snprintf(id, sizeof id, "%s", PQgetvalue(r, 0, 0));
		PQclear(r);
		const char *p[] = {id};
		int64_t horizon = METER_TIME_NONE;
		/* The horizon's lock, then where raw samples begin (as a batch reads them). */
		bool ok = (r = rq(c, lock_sql, 0, NULL, PGRES_TUPLES_OK,
		                  "could not lock the horizon", err, errlen)) != NULL;
		PQclear(r);
		r = ok ? rq(c,
		            "SELECT CASE WHEN raw_from = '-infinity' THEN NULL ELSE " US(
		                    "raw_from") " "
		                                "END FROM sample_horizon",
		            0, NULL, PGRES_TUPLES_OK, "could not read the horizon", err, errlen)
		       : NULL;
		ok = r != NULL && (PQntuples(r) == 0 || get_int(r, 0, 0, &horizon));
		PQclear(r);
		ok = ok && trial_update(c, id, horizon, plans, nplans, err, errlen);
		r = ok ? rq(c, "DELETE FROM trial_queue WHERE account_id = $1", 1, p,
		            PGRES_COMMAND_OK, "could not take a trial off the queue", err, errlen)
		       : NULL;
		PQclear(r);
		r = r ? rq(c, "COMMIT", 0, NULL, PGRES_COMMAND_OK, "could not commit", err, errlen)
		      : NULL;
		PQclear(r);
		if (r == NULL) {
			if (PQstatus(c) != CONNECTION_OK)
				return -1;
			PQclear(PQexec(c, "ROLLBACK"));
			log_warn("trial: account %s: %s; tried again at the next pass", id, err);
			PQclear(PQexecParams(c,
			                     "UPDATE trial_queue SET queued_at = clock_timestamp() "
			                     "WHERE account_id = $1",
			                     1, NULL, p, NULL, NULL, 0));
			return done;
		}
		done++;
	}
}

/*
 * Takes up to max marked sandboxes and rates them in one transaction.
 * Returns how many marks it took (rated or parked), 0 when there was none,
 * -1 with err when the database failed, -2 when a batch of more than one
 * failed on a statement (rolled back: take them one at a time).
 */
static int take(PGconn *c, const struct meter_plan *plans, size_t nplans, int max, char *err,
                size_t errlen)
{
	struct job *jobs = NULL;
	size_t n = 0;
	int result = -1;
	bool may_park = false; /* a failure from here on parks a lone sandbox */
	PGresult *r =
	        db_query(c, "BEGIN", 0, NULL, PGRES_COMMAND_OK, "could not begin", err, errlen);
	if (r == NULL)
		return -1;
	PQclear(r);
	char lim[16];
	snprintf(lim, sizeof lim, "%d", max);
	const char *lp[] = {lim};
	r = rq(c, take_sql, 1, lp, PGRES_TUPLES_OK, "could not read the queue", err, errlen);
	if (r == NULL)
		goto out;
	n = (size_t)PQntuples(r);
	if (n == 0) {
		result = 0;
		goto out;
	}
	jobs = calloc(n, sizeof *jobs);
	if (jobs == NULL) {
		snprintf(err, errlen, "could not take marks: out of memory");
		goto out;
	}
	for (size_t i = 0; i < n; i++) {
		struct job *j = &jobs[i];
		*j = (struct job){.plans = plans, .nplans = nplans, .upto = METER_TIME_NONE};
		snprintf(j->sandbox, sizeof j->sandbox, "%s", PQgetvalue(r, (int)i, 0));
		if (!get_int(r, (int)i, 1, &j->mark)) {
			snprintf(err, errlen, "malformed queue row");
			goto out;
		}
	}
	PQclear(r);
	r = rq(c, lock_sql, 0, NULL, PGRES_TUPLES_OK, "could not lock the horizon", err, errlen);
	if (r == NULL)
		goto failed;
	may_park = true; /* from here, what fails a lone sandbox is its own */
	PQclear(r);
	r = NULL;
	int64_t horizon;
	if (!load(c, jobs, n, &horizon, err, errlen))
		goto failed;
	windows(jobs, n, horizon);
	if (!read_samples(c, jobs, n, err, errlen))
		goto failed;
	for (size_t i = 0; i < n; i++)
		if (jobs[i].fate == RATE)
			rate(&jobs[i]);
	if (!store(c, jobs, n, err, errlen) || !trial_enqueue(c, jobs, n, err, errlen))
		goto failed;
	r = db_query(c, "COMMIT", 0, NULL, PGRES_COMMAND_OK, "could not commit", err, errlen);
	if (r == NULL)
		goto out;
	result = (int)n;
	/* Limits after the commit, once per account, on their own: a failure here is logged
	 * and never holds the rating back (the next rating of the account checks again). */
	for (size_t i = 0; i < n; i++) {
		bool seen = !jobs[i].found;
		for (size_t k = 0; k < i && !seen; k++)
			seen = jobs[k].found && strcmp(jobs[k].account, jobs[i].account) == 0;
		if (seen)
			continue;
		char lerr[512];
		if (!limits_check_usage(c, jobs[i].account, now_realtime_us(), plans, nplans, lerr,
		                        sizeof lerr))
			log_warn("rollup: could not check the limits of account %s: %s",
			         jobs[i].account, lerr);
		if (PQtransactionStatus(c) != PQTRANS_IDLE)
			PQclear(PQexec(c, "ROLLBACK"));
	}
	goto out;
failed:
	if (PQstatus(c) != CONNECTION_OK)
		goto out;
	PQclear(PQexec(c, "ROLLBACK"));
	if (n > 1) {
		log_warn("rollup: a batch of %zu sandboxes failed (%s); taking them one at a time",
		         n, err);
		result = -2;
	} else if (may_park && passing_failure(err)) {
		/* Nothing wrong with this sandbox: its mark waits a moment, never parked (a
		 * stopped sandbox sends no sample to wake it), and the queue goes on. */
		log_warn("rollup: sandbox %s: %s; tried again in 2 s, not parked", jobs[0].sandbox,
		         err);
		const char *q[] = {jobs[0].sandbox};
		r = db_query(c,
		             "UPDATE rollup_queue SET retry_after = clock_timestamp() + "
		             "interval '2 seconds' WHERE sandbox_id = $1",
		             1, q, PGRES_COMMAND_OK, "could not defer a mark", err, errlen);
		if (r)
			result = 1;
	} else if (may_park) {
		/* This sandbox cannot be rated or stored: park its mark with the reason, so the
		 * others go on; new samples, its registration or "meter parked retry" wake it. */
		char why[600];
		snprintf(why, sizeof why, "cannot rate: %s", err);
		log_warn("rollup: sandbox %s %s", jobs[0].sandbox, err);
		const char *q[] = {jobs[0].sandbox, why};
		r = db_query(
		        c,
		        "WITH first AS (UPDATE rollup_queue SET waiting = $2, "
		        "waiting_kind = 'parked', waiting_since = now(), retry_after = NULL "
		        "WHERE sandbox_id = $1 AND waiting_since IS NULL) "
		        "UPDATE rollup_queue SET waiting = $2, waiting_kind = 'parked', "
		        "retry_after = NULL WHERE sandbox_id = $1 AND waiting_since IS NOT NULL",
		        2, q, PGRES_COMMAND_OK, "could not park a mark", err, errlen);
		if (r)
			result = 1;
	}
out:
	PQclear(r);
	for (size_t i = 0; jobs && i < n; i++)
		job_free(&jobs[i]);
	free(jobs);
	if (PQstatus(c) == CONNECTION_OK && PQtransactionStatus(c) != PQTRANS_IDLE)
		PQclear(PQexec(c, "ROLLBACK"));
	return result;
}

int rollup_pass(PGconn *c, char *err, size_t errlen)
{
	struct meter_plan *plans = NULL;
	size_t nplans = 0;
	int done = 0, rc, alone = 0;
	/* Accounts whose crossing must be found again without new usage go first. */
	if (!plans_load(c, &plans, &nplans, err, errlen))
		return -1;
	if (trial_queue_pass(c, plans, nplans, err, errlen) < 0) {
		free(plans);
		return -1;
	}
	/* Plans are read again for every batch: a pass may be long, and a plan added
	 * meanwhile must be known before usage under it is priced. */
	do {
		free(plans);
		plans = NULL;
		if (!plans_load(c, &plans, &nplans, err, errlen))
			return -1;
		rc = take(c, plans, nplans, alone > 0 ? 1 : BATCH, err, errlen);
		if (rc == -2)
			alone = BATCH; /* the failed batch's marks, one per transaction */
		else if (rc > 0) {
			done += rc;
			alone -= alone > 0;
		}
	} while (rc > 0 || rc == -2);
	/* The crossings the batches moved, once per account. */
	if (rc == 0 && trial_queue_pass(c, plans, nplans, err, errlen) < 0)
		rc = -1;
	free(plans);
	return rc < 0 ? -1 : done;
}

/* One statement in a transaction of its own that waits at most 2 s for locks. */
static PGresult *upkeep_step(PGconn *c, const char *sql, int n, const char *const *p, char *err,
                             size_t errlen)
{
	PGresult *r =
	        db_query(c, "BEGIN", 0, NULL, PGRES_COMMAND_OK, "could not begin", err, errlen);
	if (r == NULL)
		return NULL;
	PQclear(r);
	r = db_query(c, "SET LOCAL lock_timeout = '2s'", 0, NULL, PGRES_COMMAND_OK,
	             "could not set a lock timeout", err, errlen);
	if (r)
		PQclear(r);
	r = r ? db_query(c, sql, n, p, PGRES_TUPLES_OK, "partition upkeep failed", err, errlen)
	      : NULL;
	PGresult *done = r ? db_query(c, "COMMIT", 0, NULL, PGRES_COMMAND_OK, "could not commit",
	                              err, errlen)
	                   : NULL;
	if (done == NULL) {
		PQclear(r);
		PQclear(PQexec(c, "ROLLBACK"));
		return NULL;
	}
	PQclear(done);
	return r;
}

bool rollup_upkeep(PGconn *c, int64_t retention_us, int64_t grace_us, char *err, size_t errlen)
{
	/* Invoices due are made final even when nobody asks for them: invoice.finalized is
	 * announced, and the raw partitions of their month may go. At most 1,000 at a time:
	 * the rest wait for the next hour, so a backlog never holds the queue up for long. */
	int made = 0;
	if (grace_us >= 0 &&
	    !invoices_finalize_due(c, now_realtime_us(), grace_us, 1000, &made, err, errlen))
		return false;
	if (made > 0)
		log_info("invoices: made %d invoice(s) final", made);
	PGresult *r = upkeep_step(
	        c, "SELECT meter_ensure_sample_partitions(now(), now() + interval '3 months')", 0,
	        NULL, err, errlen);
	if (r == NULL)
		return false;
	if (strcmp(PQgetvalue(r, 0, 0), "0") != 0)
		log_info("partitions: made %s monthly partition(s) of samples ahead",
		         PQgetvalue(r, 0, 0));
	PQclear(r);
	/* Usage listings (GET /v1/accounts/{id}/usage pages) are kept a day. */
	r = upkeep_step(c,
	                "WITH gone AS (DELETE FROM usage_listings "
	                "WHERE created_at < now() - interval '1 day' RETURNING 1) "
	                "SELECT count(*) FROM gone",
	                0, NULL, err, errlen);
	if (r == NULL)
		return false;
	PQclear(r);
	/* Webhook deliveries done with are kept 30 days, for GET .../deliveries. */
	r = upkeep_step(c,
	                "WITH gone AS (DELETE FROM webhook_deliveries WHERE state <> 'pending' "
	                "AND created_at < now() - interval '30 days' RETURNING 1) "
	                "SELECT count(*) FROM gone",
	                0, NULL, err, errlen);
	if (r == NULL)
		return false;
	PQclear(r);
	/* Sessions and login links past their time, and links used, are deleted. */
	r = upkeep_step(c,
	                "WITH gone AS (DELETE FROM sessions WHERE expires_at < now() "
	                "OR used_at IS NOT NULL RETURNING 1) SELECT count(*) FROM gone",
	                0, NULL, err, errlen);
	if (r == NULL)
		return false;
	PQclear(r);
	if (retention_us <= 0)
		return true;
	char keep[48];
	snprintf(keep, sizeof keep, "%lld microseconds", (long long)retention_us);
	const char *p[] = {keep};
	r = upkeep_step(c,
	                "SELECT array_to_string(meter_drop_sample_partitions($1::interval), ', ')",
	                1, p, err, errlen);
	if (r == NULL)
		return false;
	if (PQgetvalue(r, 0, 0)[0])
		log_info(
		        "partitions: dropped %s (rolled up, invoiced as final, past the retention)",
		        PQgetvalue(r, 0, 0));
	PQclear(r);
	/* Parked marks keep their samples: say so, or the disk fills without a word. */
	r = db_query(c,
	             "SELECT count(*), min(sandbox_id), min(waiting) FROM rollup_queue "
	             "WHERE waiting IS NOT NULL AND from_ts < now() - $1::interval",
	             1, p, PGRES_TUPLES_OK, "could not read the parked marks", err, errlen);
	if (r == NULL)
		return false;
	if (strcmp(PQgetvalue(r, 0, 0), "0") != 0)
		log_warn("partitions: %s parked sandbox(es) keep raw samples past the retention "
		         "(sandbox %s: %s); register the sandbox, or fix what keeps it from "
		         "being rated, and its next sample rates it",
		         PQgetvalue(r, 0, 0), PQgetvalue(r, 0, 1), PQgetvalue(r, 0, 2));
	PQclear(r);
	return true;
}

struct rollup {
	pthread_t thread;
	atomic_bool stop;
	char *url;
	int idle_ms;
	int64_t retention_us, grace_us;
};

static int64_t mono_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec;
}

static void *worker(void *arg)
{
	struct rollup *w = arg;
	PGconn *c = NULL;
	char err[512];
	bool warned = false;
	int64_t next_upkeep = 0; /* at the start, then every hour */
	while (!atomic_load(&w->stop)) {
		if (c == NULL || PQstatus(c) != CONNECTION_OK) {
			if (c)
				PQfinish(c);
			c = db_connect(w->url, err, sizeof err);
			if (c == NULL && !warned)
				log_warn("rollup: %s; retrying", err);
			warned = c == NULL;
		}
		if (c && mono_s() >= next_upkeep) {
			next_upkeep = mono_s() + 3600;
			if (!rollup_upkeep(c, w->retention_us, w->grace_us, err, sizeof err)) {
				log_warn("%s; tried again in a minute", err);
				next_upkeep = mono_s() + 60;
			}
		}
		if (c) {
			int n = rollup_pass(c, err, sizeof err);
			if (n < 0)
				log_warn("rollup: %s", err);
			else if (n > 0)
				log_debug("rollup: rated %d sandboxes", n);
		}
		struct timespec ts = {w->idle_ms / 1000, (long)(w->idle_ms % 1000) * 1000000};
		nanosleep(&ts, NULL);
	}
	if (c)
		PQfinish(c);
	return NULL;
}

struct rollup *rollup_start(const char *url, int idle_ms, int64_t raw_retention_us,
                            int64_t invoice_grace_us)
{
	struct rollup *w = calloc(1, sizeof *w);
	if (w == NULL)
		return NULL;
	w->url = url ? strdup(url) : NULL;
	w->idle_ms = idle_ms;
	w->retention_us = raw_retention_us;
	w->grace_us = invoice_grace_us;
	if (pthread_create(&w->thread, NULL, worker, w) != 0) {
		free(w->url);
		free(w);
		return NULL;
	}
	return w;
}

void rollup_stop(struct rollup *w)
{
	if (w == NULL)
		return;
	atomic_store(&w->stop, true);
	pthread_join(w->thread, NULL);
	free(w->url);
	free(w);
}
