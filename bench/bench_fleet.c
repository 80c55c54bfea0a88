/*
 * bench_fleet: a realistic month of a sandbox fleet, ingested through the
 * collector's own write path, beside psql's \copy of the same rows into the
 * same table in the same run (the ceiling); then the rollup of it all.
 *
 *   build/bench_fleet [--accounts N] [--sandboxes N] [--batch ROWS] [--writers N]
 *                     [--repeat N] [--seed N] [--no-rollup] [--queries] [--plans FILE]
 *                     [--keep]
 *
 * The month is November 2026, samples every 10 s, drawn with a fixed seed:
 *   - accounts: a third of the sandboxes belong to the largest account
 *     (acct-0000); the rest go to account floor(N x u^2) (a few large, many
 *     small);
 *   - sandboxes start uniformly over the month and run 2 to 10 minutes
 *     (uniform); 1 vCPU (50 %), 2 (35 %) or 4 (15 %), 2 GiB per vCPU;
 *   - busy fraction: 20 % idle (1 %), 50 % uniform 10-60 %, 30 % busy 80-100 %;
 *     each sample adds busy x vCPUs x 10 s of CPU, +-10 % noise.
 * The fleet runs on --writers hosts (default 2, one a core here), each with its
 * collector: sandbox i is on host i mod N. Rows are made in time order, round
 * by round, with collector/batch.c, and each host's are written in batches of
 * --batch rows (default 5,000: a collector's round on a large host, or a spool
 * replay) with collector/writer.c, the hosts at once, a connection each: COPY
 * into a staging table, INSERT ... ON CONFLICT DO NOTHING into the partitioned
 * samples table and its key. The same bytes go to psql \copy straight into
 * samples, one psql a host, all at once.
 * Between runs samples is truncated and a CHECKPOINT taken; with --repeat N
 * the two alternate N times and medians are printed. The rollup then rates
 * every sandbox with the worker's own code (one worker, as one meter-api).
 *
 * With --queries, on the database it filled and rolled up, it starts the real
 * meter-api (beside it in the build folder) and times the largest account's
 * hot requests over loopback HTTP (quota check, trial, the month's draft
 * invoice and usage, a sandbox's usage: p50 and p99 of many), then starts a
 * second meter-api whose sessions log the plan of every statement they run
 * (auto_explain with ANALYZE and BUFFERS, as warnings into its log) while it
 * answers each request again and its rollup worker re-rates marked sandboxes
 * (whole, from a late sample, and one registered from its first sample). It
 * prints, per hot statement, how it read samples, and fails when any plan
 * reads samples or a partition of it with a Seq Scan; --plans FILE (implies
 * --queries) writes the slowest plan of each statement there. auto_explain is set
 * with session_preload_libraries, so the database user must be a superuser
 * (the private cluster's is).
 *
 * Every figure is also printed as a "RESULT name=value ..." line for
 * bench/table.sh.
 *
 * Uses DATABASE_URL's server or the private cluster, in a database of its own
 * dropped at the end (--keep leaves it, for a look at it with psql; the next
 * run of a test or benchmark drops it). Never a test: it prints figures and exits 0 unless it
 * could not run (or, with --queries, a plan reads samples with a Seq Scan).
 */
#include <errno.h>
#include <pthread.h>
#include <sys/wait.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "api/cursor.h"
#include "rollup/rollup.h"
#include "collector/batch.h"
#include "collector/writer.h"
#include "common/keys.h"
#include "common/log.h"
#include "meter/timefmt.h"
#include "tests/support/cluster.h"
#include "tests/support/http.h"
#include "tests/support/testdb.h"

struct sandbox {
	int account;
	int64_t start_us, end_us, phase_us;
	int vcpus;
	int busy_ppm;
	int64_t cpu_us;
};

static uint64_t rng_state;
static uint64_t rnd64(void)
{
	uint64_t x = rng_state;
	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	return rng_state = x;
}
static double unit(void)
{
	return (double)(rnd64() >> 11) / 9007199254740992.0;
}

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int cmp_start(const void *a, const void *b)
{
	const struct sandbox *x = a, *y = b;
	return (x->start_us > y->start_us) - (x->start_us < y->start_us);
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

static double median(double *v, int n)
{
	qsort(v, (size_t)n, sizeof *v, cmp_double);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static bool exec(PGconn *c, const char *sql)
{
	PGresult *r = PQexec(c, sql);
	bool ok = PQresultStatus(r) == PGRES_COMMAND_OK || PQresultStatus(r) == PGRES_TUPLES_OK;
	if (!ok)
		fprintf(stderr, "bench_fleet: %s: %s", sql, PQerrorMessage(c));
	PQclear(r);
	return ok;
}

/* COPY text rows into table (cols), from a buffer. */
static bool copy_in(PGconn *c, const char *table_cols, const char *data, size_t len)
{
	char sql[256];
	snprintf(sql, sizeof sql, "COPY %s FROM STDIN", table_cols);
	PGresult *r = PQexec(c, sql);
	bool ok = PQresultStatus(r) == PGRES_COPY_IN;
	PQclear(r);
	ok = ok && PQputCopyData(c, data, (int)len) == 1 && PQputCopyEnd(c, NULL) == 1;
	while ((r = PQgetResult(c)) != NULL) {
		ok = ok && PQresultStatus(r) == PGRES_COMMAND_OK;
		PQclear(r);
	}
	if (!ok)
		fprintf(stderr, "bench_fleet: COPY %s: %s", table_cols, PQerrorMessage(c));
	return ok;
}

static long count(PGconn *c, const char *sql)
{
	PGresult *r = PQexec(c, sql);
	long v = PQresultStatus(r) == PGRES_TUPLES_OK ? strtol(PQgetvalue(r, 0, 0), NULL, 10) : -1;
	PQclear(r);
	return v;
}

/* Writes a batch to the file as one chunk (its length remembered) and empties it. */
static bool spill(struct batch *b, FILE *out, size_t **chunk, size_t *n, size_t *cap)
{
	if (*n == *cap) {
		size_t c = *cap ? *cap * 2 : 1024;
		size_t *nc = realloc(*chunk, c * sizeof *nc);
		if (nc == NULL)
			return false;
		*chunk = nc;
		*cap = c;
	}
	(*chunk)[(*n)++] = b->len;
	bool ok = fwrite(b->buf, 1, b->len, out) == b->len;
	batch_clear(b);
	if (!ok)
		fprintf(stderr, "bench_fleet: cannot write the samples file: %s\n",
		        strerror(errno));
	return ok;
}

/*
 * One collector's share of the fleet: the sandboxes i % writers == w, on a host
 * of its own, its batches in a file of its own. A fleet's hosts each run a
 * collector and write at once; two shares on this 2-core machine, one a core.
 */
#define WRITERS_MAX 16

struct share {
	char path[32];
	FILE *out;
	size_t *chunk, nchunks, capchunks, maxchunk;
	struct batch b;
	char host[32];
	/* the ingest (ingest_share) */
	const char *url;
	long inserted;
	bool ok;
	char err[512];
};

/* Writes the share's batches in order through the collector's write path, on a
 * connection of its own. */
static void *ingest_share(void *arg)
{
	struct share *s = arg;
	s->ok = false;
	s->inserted = 0;
	PGconn *c = PQconnectdb(s->url);
	char *buf = malloc(s->maxchunk + 1);
	if (PQstatus(c) != CONNECTION_OK || buf == NULL) {
		snprintf(s->err, sizeof s->err, "cannot connect: %s", PQerrorMessage(c));
		goto out;
	}
	rewind(s->out);
	for (size_t k = 0; k < s->nchunks; k++) {
		long ins = 0;
		if (fread(buf, 1, s->chunk[k], s->out) != s->chunk[k]) {
			snprintf(s->err, sizeof s->err, "cannot read %s", s->path);
			goto out;
		}
		if (!writer_write(c, "meter_collector", buf, s->chunk[k], &ins, s->err,
		                  sizeof s->err))
			goto out;
		s->inserted += ins;
	}
	s->ok = true;
out:
	free(buf);
	PQfinish(c);
	return NULL;
}

/* ---- query latency at fleet scale, and the plans of the hot statements ---- */

#define FLEET_MONTH_FROM "2026-11-01T00:00:00Z"
#define FLEET_MONTH_TO   "2026-12-01T00:00:00Z"

static int cmp_ms(const void *a, const void *b)
{
	return cmp_double(a, b);
}

/* The p-th percentile (0 < p <= 1) of n sorted values: the value at rank ceil(p x n). */
static double pct(const double *v, int n, double p)
{
	int k = (int)((double)n * p + 0.999999);
	return v[k < 1 ? 0 : k > n ? n - 1 : k - 1];
}

struct latency {
	const char *name;
	double p50, p99, max;
	int n;
};

/* The latencies ms (n, when ok) into out; frees ms; ok. */
static bool summed(double *ms, int n, bool ok, struct latency *out)
{
	if (ok) {
		qsort(ms, (size_t)n, sizeof *ms, cmp_ms);
		out->p50 = pct(ms, n, 0.5);
		out->p99 = pct(ms, n, 0.99);
		out->max = ms[n - 1];
		out->n = n;
	}
	free(ms);
	return ok;
}

/*
 * Sends n requests one after the other (a new loopback connection each, as
 * tests/support/http.c does) and keeps the wall time of each. paths holds
 * npaths paths used in turn. False when any answer is not 200.
 */
static bool measure(int port, const char *key, const char *method, char (*paths)[256], int npaths,
                    const char *body, int n, struct latency *out)
{
	double *ms = calloc((size_t)n, sizeof *ms);
	bool ok = ms != NULL;
	for (int i = 0; ok && i < n; i++) {
		struct http_res res;
		const char *path = paths[i % npaths];
		double s = now_s();
		http_do(port, method, path, key, body, body ? strlen(body) : 0, &res);
		ms[i] = (now_s() - s) * 1000.0;
		if (res.status != 200) {
			fprintf(stderr, "bench_fleet: %s %s answered %d: %.300s\n", method, path,
			        res.status, res.body ? res.body : "");
			ok = false;
		}
		http_free(&res);
	}
	return summed(ms, n, ok, out);
}

/*
 * n new listings: each time a first page (not timed), then the page its
 * next_cursor names, timed: the request that orders the listing (once a
 * listing; the pages after it read the order).
 */
static bool second_pages(int port, const char *key, const char *first, int n, struct latency *out)
{
	double *ms = calloc((size_t)n, sizeof *ms);
	bool ok = ms != NULL;
	for (int i = 0; ok && i < n; i++) {
		struct http_res res;
		http_do(port, "GET", first, key, NULL, 0, &res);
		cJSON *doc = http_json(&res);
		const char *next = cJSON_GetStringValue(cJSON_GetObjectItem(doc, "next_cursor"));
		char path[512];
		ok = res.status == 200 && next != NULL &&
		     snprintf(path, sizeof path, "%s&cursor=%s", first, next) < (int)sizeof path;
		cJSON_Delete(doc);
		http_free(&res);
		if (!ok)
			break;
		double t = now_s();
		http_do(port, "GET", path, key, NULL, 0, &res);
		ms[i] = (now_s() - t) * 1000.0;
		ok = res.status == 200;
		http_free(&res);
	}
	if (!ok)
		fprintf(stderr, "bench_fleet: a listing's second page could not be read\n");
	return summed(ms, n, ok, out);
}

/* Where each hot statement lives, told by a piece of its text (the first match names it). */
static const struct hot {
	const char *where, *frag;
	bool must; /* the run must have exercised it */
} hot[] = {
        {"api/queries.c Q_AUTH", "FROM api_keys", false},
        {"api/queries.c Q_STATE (quota, trial)", "FROM sandboxes s WHERE s.account_id = $1", true},
        {"common/invoicedb.c account name", "SELECT name FROM accounts", true},
        {"api/queries.c Q_ACCOUNT", "FROM accounts WHERE id = $1", true},
        {"api/queries.c Q_USAGE_OF (a page's sandboxes)",
         "FROM usage_hourly WHERE account_id = $1 AND sandbox_id = ANY", true},
        {"api/queries.c Q_RANK_MONTH (a month's first page)",
         "FROM sandbox_month_cost WHERE account_id = $1 AND month = $2::date ORDER BY", true},
        {"api/queries.c Q_LISTING_NEW (a listing's first page)", "INSERT INTO usage_listings",
         true},
        {"api/queries.c Q_LISTING_FILL_MONTH (a month's listing ordered)",
         "UPDATE usage_listings l SET ids", true},
        {"api/queries.c Q_COUNT_MONTH (a month's sandboxes)", "FROM account_month_sandboxes", true},
        {"api/queries.c Q_LISTING_PAGE (a page of a listing)", "FROM usage_listings WHERE", true},
        {"api/queries.c Q_USAGE_MONTH_TOTALS",
         "busy_us, idle_us, wall_us, memory_mgib_us FROM "
         "account_month",
         true},
        {"api/queries.c Q_DATA_AS_OF", "FROM rollup_queue q", true},
        {"api/queries.c Q_SANDBOX", "SELECT id, account_id, vcpus::text", true},
        {"api/queries.c Q_SANDBOX_HOURS", "AND sandbox_id = $2 AND hour >=", true},
        {"api/queries.c Q_SANDBOX_PEAK (samples)", "memory_peak_bytes", true},
        {"api/queries.c Q_DAILY", "FROM account_day", true},
        {"common/ledgerdb.c accounts", "FROM accounts a LEFT JOIN trial_crossing t", true},
        {"common/ledgerdb.c months' usage",
         "memory_mgib_us FROM account_month WHERE account_id = ANY ($1::text[]) AND month <=",
         true},
        {"common/ledgerdb.c part of a month", "UNION ALL SELECT account_id, $2::bigint", false},
        {"common/ledgerdb.c final invoices", "FROM invoice_quantities WHERE account_id = ANY",
         true},
        {"common/ledgerdb.c the trial's crossing",
         "JOIN usage_hourly u ON u.account_id = t.account_id", true},
        {"common/invoicedb.c stored invoice", "SELECT body_json", true},
        {"common/limits.c limits_read", "sum(wall_us) wall_us FROM account_month", true},
        {"rollup/take.c take marks", "FROM meter_rollup_take(", true},
        /* the samples' trigger registers a sandbox whose path names an account at its first
         * sample (migrations/0017); the rollup does when the account came later */
        {"rollup/register.c auto_register (samples)", "SELECT s.account_id, s.cpu_limit_millicores",
         false},
        {"rollup/read.c load sandboxes, horizon", "LEFT JOIN sandboxes s ON s.id = j.id", true},
        {"rollup/read.c read: seeds and window (samples)", "FROM meter_rollup_read(", true},
        {"rollup/store.c clear: marks, old hours", "WITH gone AS (DELETE FROM rollup_queue", true},
        {"rollup/store.c insert: new hours", "WITH ins AS (INSERT INTO usage_hourly", true},
        {"rollup/store.c checkpoints", "INSERT INTO rollup_checkpoints", true},
        {"rollup/store.c sandboxes' months", "meter_sandbox_month_costs", true},
        {"rollup/take.c park a mark", "UPDATE rollup_queue SET waiting", false},
        {"rollup/crossing.c trial: queue the accounts", "INSERT INTO trial_queue AS q", true},
        {"rollup/crossing.c trial: find the crossing hour", "OVER (ORDER BY month) cum", false},
        {"rollup/crossing.c trial: the crossing hour's sandboxes",
         "SELECT DISTINCT sandbox_id COLLATE", false},
};
#define NHOT (sizeof hot / sizeof hot[0])

/* What the plans of one statement showed, over all its runs. */
struct seen {
	char where[96];
	int calls;
	double max_ms;
	int seq_samples;      /* Seq Scans of samples or a partition of it */
	char samples_by[256]; /* how samples were read: node and index, distinct */
	char seq_other[256];  /* Seq Scans of other tables (information) */
	char *bad_plan;       /* the first plan with a Seq Scan of samples */
	char *slowest;        /* the slowest run's plan */
};

static void add_word(char *list, size_t len, const char *w)
{
	if (strstr(list, w) != NULL)
		return;
	size_t o = strlen(list);
	snprintf(list + o, len - o, "%s%s", o ? ", " : "", w);
}

static bool is_samples(const char *rel)
{
	return rel && (strcmp(rel, "samples") == 0 || strncmp(rel, "samples_", 8) == 0);
}

/* Walks a plan node and its children. */
static void walk(const cJSON *node, struct seen *s, bool *bad)
{
	const char *type = cJSON_GetStringValue(cJSON_GetObjectItem(node, "Node Type"));
	const char *rel = cJSON_GetStringValue(cJSON_GetObjectItem(node, "Relation Name"));
	const char *index = cJSON_GetStringValue(cJSON_GetObjectItem(node, "Index Name"));
	if (type && strcmp(type, "Seq Scan") == 0) {
		if (is_samples(rel)) {
			*bad = true;
			char w[128];
			snprintf(w, sizeof w, "SEQ SCAN %s", rel);
			add_word(s->samples_by, sizeof s->samples_by, w);
		} else if (rel) {
			add_word(s->seq_other, sizeof s->seq_other, rel);
		}
	} else if (type && is_samples(rel)) {
		char w[160];
		snprintf(w, sizeof w, "%s %s", type, index ? index : rel);
		add_word(s->samples_by, sizeof s->samples_by, w);
	}
	const cJSON *kid;
	cJSON_ArrayForEach(kid, cJSON_GetObjectItem(node, "Plans")) walk(kid, s, bad);
}

/*
 * Reads auto_explain's plans (JSON, one WARNING each) from a meter-api log and
 * sums them up per statement into seen[] (NHOT + 1: the last is "other"); a plan
 * that is not whole JSON is counted in unreadable.
 */
static void read_plans(const char *log, struct seen *seen, int *unreadable)
{
	const char *mark = "WARNING:  duration: ";
	for (const char *p = strstr(log, mark); p != NULL; p = strstr(p, mark)) {
		double ms = strtod(p + strlen(mark), NULL);
		const char *j = strchr(p, '{'), *end = NULL;
		p += strlen(mark);
		if (j == NULL)
			break;
		cJSON *doc = cJSON_ParseWithOpts(j, &end, false);
		if (doc == NULL) {
			(*unreadable)++;
			continue;
		}
		p = end;
		const char *text = cJSON_GetStringValue(cJSON_GetObjectItem(doc, "Query Text"));
		char flat[4096] = "";
		/* the text on one line, runs of blanks as one space */
		for (size_t o = 0; text && *text && o + 1 < sizeof flat; text++) {
			char ch = (*text == '\n' || *text == '\t') ? ' ' : *text;
			if (ch == ' ' && o > 0 && flat[o - 1] == ' ')
				continue;
			flat[o++] = ch;
			flat[o] = '\0';
		}
		size_t k = 0;
		while (k < NHOT && strstr(flat, hot[k].frag) == NULL)
			k++;
		struct seen *s = &seen[k];
		if (k == NHOT && s->calls == 0)
			snprintf(s->where, sizeof s->where, "other statements");
		else if (k < NHOT)
			snprintf(s->where, sizeof s->where, "%s", hot[k].where);
		s->calls++;
		if (s->slowest == NULL || ms > s->max_ms) {
			s->max_ms = ms;
			free(s->slowest);
			s->slowest = cJSON_Print(doc);
		}
		bool bad = false;
		walk(cJSON_GetObjectItem(doc, "Plan"), s, &bad);
		if (bad) {
			s->seq_samples++;
			if (s->bad_plan == NULL)
				s->bad_plan = cJSON_Print(doc);
		}
		cJSON_Delete(doc);
	}
}

static char *slurp(const char *path)
{
	FILE *f = fopen(path, "r");
	char *buf = NULL;
	size_t len = 0, cap = 0;
	if (f == NULL)
		return NULL;
	for (;;) {
		if (cap - len < 65536) {
			char *nb = realloc(buf, cap = cap * 2 + 65536);
			if (nb == NULL) {
				free(buf);
				fclose(f);
				return NULL;
			}
			buf = nb;
		}
		size_t r = fread(buf + len, 1, cap - len - 1, f);
		len += r;
		if (r == 0)
			break;
	}
	buf[len] = '\0';
	fclose(f);
	return buf;
}

/* meter-api beside this program (both in the build folder). */
static bool api_binary(char *out, size_t len)
{
	char self[4096];
	ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
	if (n <= 0)
		return false;
	self[n] = '\0';
	char *slash = strrchr(self, '/');
	if (slash == NULL)
		return false;
	*slash = '\0';
	if ((size_t)snprintf(out, len, "%s/meter-api", self) >= len)
		return false;
	return access(out, X_OK) == 0;
}

/*
 * On the database the fleet filled and rolled up: the latency of the hot
 * requests of the largest account through a real meter-api on loopback, then
 * the plans of every statement meter-api runs for them and for its rollup
 * worker (auto_explain, ANALYZE and BUFFERS, in a second meter-api). False
 * when it could not run, a request failed, or a plan reads samples with a
 * Seq Scan.
 */
/* ---- the largest account: dashboards and exports under load ---- */

/* meter-api's resident memory, KiB (VmRSS), or -1. */
static long rss_kib(pid_t pid)
{
	char path[64], line[256];
	long v = -1;
	snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
	FILE *f = fopen(path, "r");
	while (f && fgets(line, sizeof line, f))
		if (sscanf(line, "VmRSS: %ld kB", &v) == 1)
			break;
	if (f)
		fclose(f);
	return v;
}

struct loader {
	int port;
	const char *key, *path;
	atomic_bool *stop;
	atomic_int *finished; /* counts the loaders done, when set */
	int runs, failures;
	size_t bytes;
	double seconds;
};

/* Requests path again and again until *stop (or once, when stop is NULL). */
static void *load(void *arg)
{
	struct loader *l = arg;
	do {
		struct http_res res;
		double t = now_s();
		http_do(l->port, "GET", l->path, l->key, NULL, 0, &res);
		l->seconds += now_s() - t;
		l->runs++;
		l->failures += res.status != 200 || res.cut;
		l->bytes += res.len;
		http_free(&res);
	} while (l->stop && !atomic_load(l->stop));
	if (l->finished)
		atomic_fetch_add(l->finished, 1);
	return NULL;
}

/*
 * The largest account's dashboard of the month; its FOCUS export (rows a
 * second, and meter-api's memory while four run at once); the quota check
 * while eight dashboards of that account load at once.
 */
static bool large_account(const struct api_proc *api, const char *key)
{
	char dash[1][256], focus[128];
	snprintf(dash[0], sizeof dash[0], "/dashboard?account=acct-0000&month=2026-11");
	snprintf(focus, sizeof focus, "/v1/accounts/acct-0000/exports/2026-11?format=focus");
	struct latency d = {.name = "GET /dashboard (acct-0000, 2026-11)"}, q = {0};
	if (!measure(api->port, key, "GET", dash, 1, NULL, 5, &d) ||
	    !measure(api->port, key, "GET", dash, 1, NULL, 100, &d))
		return false;
	/* one export alone: its rows a second */
	struct loader one = {.port = api->port, .key = key, .path = focus};
	load(&one);
	/* four at once: the memory meter-api grows by */
	long base = rss_kib(api->pid), peak = base;
	struct loader four[4];
	pthread_t th[8];
	atomic_int finished = 0;
	for (int i = 0; i < 4; i++) {
		four[i] = (struct loader){
		        .port = api->port, .key = key, .path = focus, .finished = &finished};
		pthread_create(&th[i], NULL, load, &four[i]);
	}
	atomic_bool done = false;
	while (atomic_load(&finished) < 4) {
		long v = rss_kib(api->pid);
		peak = v > peak ? v : peak;
		struct timespec ts = {0, 20000000};
		nanosleep(&ts, NULL);
	}
	for (int i = 0; i < 4; i++)
		pthread_join(th[i], NULL);
	/* eight dashboards at once, and the quota check beside them */
	struct loader eight[8];
	for (int i = 0; i < 8; i++) {
		eight[i] = (struct loader){
		        .port = api->port, .key = key, .path = dash[0], .stop = &done};
		pthread_create(&th[i], NULL, load, &eight[i]);
	}
	char qpath[1][256] = {"/v1/quota/check"};
	const char *qbody = "{\"account_id\":\"acct-0000\",\"vcpus\":2,\"memory_gib\":4}";
	bool ok = measure(api->port, key, "POST", qpath, 1, qbody, 2000, &q);
	atomic_store(&done, true);
	int dashes = 0, failed = one.failures;
	for (int i = 0; i < 8; i++) {
		pthread_join(th[i], NULL);
		dashes += eight[i].runs;
		failed += eight[i].failures;
	}
	for (int i = 0; i < 4; i++)
		failed += four[i].failures;
	long rows = 0;
	{
		struct http_res res;
		http_do(api->port, "GET", focus, key, NULL, 0, &res);
		for (const char *p = res.body; p && (p = strstr(p, "\r\n")) != NULL; p += 2)
			rows++;
		http_free(&res);
	}
	double rps = one.seconds > 0 ? (double)rows / one.seconds : 0;
	printf("\nthe largest account, acct-0000:\n\n| figure | value | goal |\n|---|---|---|\n");
	printf("| dashboard of 2026-11, p50 / p99 | %.2f / %.2f ms | p99 <= 100 ms |\n", d.p50,
	       d.p99);
	printf("| FOCUS export, %ld rows, %.1f MB | %.0f rows/s | >= 100,000 rows/s |\n", rows,
	       (double)one.bytes / 1e6, rps);
	printf("| meter-api RSS while 4 exports run at once | +%.1f MiB (from %.1f MiB) | <= 32 "
	       "MiB more |\n",
	       (double)(peak - base) / 1024, (double)base / 1024);
	printf("| quota check while 8 dashboards load (%d loads), p50 / p99 | %.2f / %.2f ms | "
	       "p99 <= 5 ms |\n",
	       dashes, q.p50, q.p99);
	printf("RESULT fleet_dashboard_p50_ms=%.3f fleet_dashboard_p99_ms=%.3f "
	       "fleet_export_rows=%ld fleet_export_rows_per_s=%.0f "
	       "fleet_export_rss_growth_mib=%.1f "
	       "fleet_quota_under_dashboards_p99_ms=%.3f\n",
	       d.p50, d.p99, rows, rps, (double)(peak - base) / 1024, q.p99);
	if (failed)
		fprintf(stderr, "bench_fleet: %d of the loads failed or were cut short\n", failed);
	return ok && failed == 0;
}

static bool queries(struct testdb *db, double scale, const char *plans_file)
{
	PGconn *c = db->conn;
	char bin[4096], key[KEY_LEN + 1], v[64], sbpath[100][256], path[1][256];
	struct api_proc api = {0};
	struct seen seen[NHOT + 1];
	char *log = NULL;
	bool ok = false, plans_ok = true;
	memset(seen, 0, sizeof seen);
	if (!api_binary(bin, sizeof bin)) {
		fprintf(stderr, "bench_fleet: no meter-api beside bench_fleet (build it)\n");
		return false;
	}
	/* What autovacuum would have done by now: statistics of the tables that changed
	 * (the empty partitions it never analyzes are left as they are). */
	if (!exec(c, "ANALYZE samples_202611") || !exec(c, "ANALYZE usage_hourly") ||
	    !exec(c, "ANALYZE account_month") || !exec(c, "ANALYZE sandboxes") ||
	    !exec(c, "ANALYZE accounts"))
		return false;
	long nsb = count(c, "SELECT count(*) FROM sandboxes WHERE account_id = 'acct-0000'");
	double hours = 0;
	if (testdb_value(db,
	                 "SELECT coalesce(sum(wall_us), 0) / 3600e6 FROM account_month WHERE "
	                 "account_id = 'acct-0000' AND month = '2026-11-01'",
	                 v, sizeof v) != NULL)
		hours = strtod(v, NULL);
	printf("\nlargest account acct-0000: %ld sandboxes, %.0f sandbox-hours in 2026-11 (the "
	       "full "
	       "fleet, 2,000 accounts and 300,000 sandboxes, gives it about 104,000 sandboxes and "
	       "10,000 sandbox-hours; a tenth, 200 and 30,000, about 1,000)\n",
	       nsb, hours);
	printf("RESULT fleet_largest_sandboxes=%ld fleet_largest_sandbox_hours=%.0f "
	       "fleet_scale=%.4f\n",
	       nsb, hours, scale);
	/* sandboxes of acct-0000 for the sandbox usage, taken in turn */
	PGresult *r = PQexec(c, "SELECT id FROM sandboxes WHERE account_id = 'acct-0000' ORDER BY "
	                        "md5(id) LIMIT 100");
	int nids = PQresultStatus(r) == PGRES_TUPLES_OK ? PQntuples(r) : 0;
	for (int i = 0; i < nids; i++)
		snprintf(sbpath[i], sizeof sbpath[i],
		         "/v1/sandboxes/%s/usage?from=" FLEET_MONTH_FROM "&to=" FLEET_MONTH_TO,
		         PQgetvalue(r, i, 0));
	PQclear(r);
	if (nids == 0 || !testdb_key(db, "acct-0000", key))
		return false;

	/* The November invoice stays a draft whatever today is (grace: 90 days), and no
	 * partition is dropped under the benchmark. */
	setenv("METER_INVOICE_GRACE", "2160h", 1);
	setenv("METER_RAW_RETENTION", "0", 1);
	if (!api_start(&api, bin, db->url, "--no-rollup")) {
		fprintf(stderr, "bench_fleet: could not start meter-api\n");
		return false;
	}
	const char *quota = "{\"account_id\":\"acct-0000\",\"vcpus\":2,\"memory_gib\":4}";
	struct latency lat[7] = {
	        {.name = "POST /v1/quota/check (acct-0000)"},
	        {.name = "GET /v1/accounts/acct-0000/trial"},
	        {.name = "GET /v1/accounts/acct-0000/invoices/2026-11 (draft)"},
	        {.name = "GET /v1/accounts/acct-0000/usage (the month, first page of 100)"},
	        {.name = "GET /v1/sandboxes/{id}/usage (the month)"},
	        {.name = "GET /v1/accounts/acct-0000/usage (the month, a middle page of 100)"},
	        {.name = "GET /v1/accounts/acct-0000/usage (the month, a new listing's second "
	                 "page: "
	                 "orders it, once a listing)"},
	};
	/* a few of each first: keys cached, plans made, pages read */
	snprintf(path[0], sizeof path[0], "/v1/quota/check");
	bool m = measure(api.port, key, "POST", path, 1, quota, 200, &lat[0]) &&
	         measure(api.port, key, "POST", path, 1, quota, 5000, &lat[0]);
	snprintf(path[0], sizeof path[0], "/v1/accounts/acct-0000/trial");
	m = m && measure(api.port, key, "GET", path, 1, NULL, 50, &lat[1]) &&
	    measure(api.port, key, "GET", path, 1, NULL, 1000, &lat[1]);
	snprintf(path[0], sizeof path[0], "/v1/accounts/acct-0000/invoices/2026-11");
	m = m && measure(api.port, key, "GET", path, 1, NULL, 5, &lat[2]) &&
	    measure(api.port, key, "GET", path, 1, NULL, 200, &lat[2]);
	snprintf(path[0], sizeof path[0],
	         "/v1/accounts/acct-0000/usage?from=" FLEET_MONTH_FROM "&to=" FLEET_MONTH_TO);
	m = m && measure(api.port, key, "GET", path, 1, NULL, 3, &lat[3]) &&
	    measure(api.port, key, "GET", path, 1, NULL, 50, &lat[3]);
	m = m && measure(api.port, key, "GET", sbpath, nids, NULL, 20, &lat[4]) &&
	    measure(api.port, key, "GET", sbpath, nids, NULL, 1000, &lat[4]);
	/* a page from the middle of the listing the first page kept */
	char middle[1][256] = {""};
	if (m) {
		struct http_res res;
		http_do(api.port, "GET", path[0], key, NULL, 0, &res);
		cJSON *doc = http_json(&res);
		const char *next = cJSON_GetStringValue(cJSON_GetObjectItem(doc, "next_cursor"));
		cJSON *count = cJSON_GetObjectItem(doc, "sandbox_count");
		int64_t listing, offset;
		char cur[CURSOR_BUF];
		if (next && cJSON_IsNumber(count) && cursor_listing_read(next, &listing, &offset)) {
			cursor_listing(listing, (int64_t)count->valuedouble / 2, cur, sizeof cur);
			char whole[512];
			int k = snprintf(whole, sizeof whole, "%s&cursor=%s", path[0], cur);
			if (k > 0 && (size_t)k < sizeof middle[0])
				memcpy(middle[0], whole, (size_t)k + 1);
		}
		cJSON_Delete(doc);
		http_free(&res);
		m = middle[0][0] && measure(api.port, key, "GET", middle, 1, NULL, 5, &lat[5]) &&
		    measure(api.port, key, "GET", middle, 1, NULL, 200, &lat[5]);
	}
	m = m && second_pages(api.port, key, path[0], 20, &lat[6]);
	{
		struct http_res res;
		http_do(api.port, "GET", "/v1/accounts/acct-0000/invoices/2026-11", key, NULL, 0,
		        &res);
		cJSON *doc = http_json(&res);
		const char *status = cJSON_GetStringValue(cJSON_GetObjectItem(doc, "status"));
		printf("the invoice of acct-0000 for 2026-11: status %s, total %s, %zu bytes\n",
		       status ? status : "?",
		       cJSON_GetStringValue(cJSON_GetObjectItem(doc, "total"))
		               ? cJSON_GetStringValue(cJSON_GetObjectItem(doc, "total"))
		               : "?",
		       res.len);
		cJSON_Delete(doc);
		http_free(&res);
		http_do(api.port, "GET", path[0], key, NULL, 0, &res);
		printf("the usage of acct-0000 for 2026-11: %zu bytes\n", res.len);
		http_free(&res);
	}
	m = m && large_account(&api, key);
	api_stop(&api);
	if (!m)
		return false;
	printf("\nlatency over loopback HTTP, one client, a new connection per request, "
	       "meter-api against this database:\n\n");
	printf("| request | requests | p50 ms | p99 ms | max ms | goal "
	       "|\n|---|---|---|---|---|---|\n");
	const char *goal[7] = {"p99 <= 2 ms",  "", "<= 50 ms", "p99 <= 50 ms", "",
	                       "p99 <= 50 ms", ""};
	const char *tag[7] = {"quota",         "trial",        "invoice",     "usage",
	                      "sandbox_usage", "usage_middle", "usage_second"};
	for (int i = 0; i < 7; i++)
		printf("| %s | %d | %.2f | %.2f | %.2f | %s |\n", lat[i].name, lat[i].n, lat[i].p50,
		       lat[i].p99, lat[i].max, goal[i]);
	for (int i = 0; i < 7; i++)
		printf("RESULT fleet_%s_p50_ms=%.3f fleet_%s_p99_ms=%.3f\n", tag[i], lat[i].p50,
		       tag[i], lat[i].p99);
	fflush(stdout);

	/* The plans: a second meter-api whose sessions send every plan (auto_explain, as
	 * EXPLAIN (ANALYZE, BUFFERS), in JSON) to it as warnings (common/db.c sets
	 * client_min_messages to warning); libpq prints them on its stderr, the log. Its rollup
	 * worker re-rates marked sandboxes meanwhile. */
	char url[sizeof db->url + 512];
	snprintf(url, sizeof url,
	         "%s options='-c session_preload_libraries=auto_explain "
	         "-c auto_explain.log_min_duration=0 -c auto_explain.log_analyze=on "
	         "-c auto_explain.log_buffers=on -c auto_explain.log_nested_statements=on "
	         "-c auto_explain.log_format=json -c auto_explain.log_level=warning'",
	         db->url);
	/* three sandboxes re-rated whole, three from a late sample in mid-life, and a
	 * sample of an unregistered sandbox whose cgroup path named acct-0000 */
	if (!exec(c,
	          "INSERT INTO rollup_queue (sandbox_id, from_ts, queued_at) "
	          "(SELECT id, '-infinity'::timestamptz, clock_timestamp() FROM sandboxes "
	          " WHERE account_id = 'acct-0000' ORDER BY md5(id) LIMIT 3) UNION ALL "
	          "(SELECT id, started_at + interval '3 minutes', clock_timestamp() FROM "
	          " sandboxes WHERE account_id = 'acct-0000' ORDER BY md5(id) OFFSET 3 LIMIT 3)"))
		return false;
	{
		struct batch b = {0};
		struct cg_reading rd = {.cpu_usage_us = 5000000,
		                        .mem_current = INT64_C(1) << 30,
		                        .mem_peak = INT64_C(1) << 30,
		                        .mem_anon_kernel = CG_ABSENT,
		                        .mem_limit = INT64_C(2) << 30,
		                        .cpu_limit_millicores = 1000};
		int64_t ts;
		meter_time_parse("2026-11-15T12:00:05Z", &ts);
		char err[512];
		long ins = 0;
		bool w = batch_add(&b, "sb-unregistered", "acct-0000", 99, ts, "fleet-host", &rd) &&
		         writer_write(c, "meter_collector", b.buf, b.len, &ins, err, sizeof err);
		batch_free(&b);
		if (!w) {
			fprintf(stderr, "bench_fleet: a late sample: %s\n", err);
			return false;
		}
	}
	if (!api_start(&api, bin, url, NULL)) {
		fprintf(stderr,
		        "bench_fleet: could not start meter-api with auto_explain (it needs "
		        "a superuser to set session_preload_libraries)\n");
		return false;
	}
	/* The worker's rating first, until it has taken every mark (and checked the limits
	 * after it), then the requests: plans from two threads at once could interleave in
	 * the log, and a plan cut in two is not read. */
	for (int i = 0; i < 600 && count(c, "SELECT count(*) FROM rollup_queue") != 0; i++)
		sleep_ms(100);
	sleep_ms(500);
	/* each request seven times: prepared statements switch to a generic plan after five */
	for (int i = 0; i < 7; i++) {
		struct latency l;
		snprintf(path[0], sizeof path[0], "/v1/quota/check");
		plans_ok = plans_ok && measure(api.port, key, "POST", path, 1, quota, 1, &l);
		const char *get[] = {
		        "/v1/accounts/acct-0000/trial",
		        "/v1/accounts/acct-0000/invoices/2026-11",
		        "/v1/accounts/acct-0000/usage?from=" FLEET_MONTH_FROM "&to=" FLEET_MONTH_TO,
		        "/v1/accounts/acct-0000/forecast?month=2026-11",
		        "/v1/accounts/acct-0000",
		};
		for (size_t k = 0; k < sizeof get / sizeof get[0]; k++) {
			snprintf(path[0], sizeof path[0], "%s", get[k]);
			plans_ok = plans_ok && measure(api.port, key, "GET", path, 1, NULL, 1, &l);
		}
		plans_ok = plans_ok &&
		           measure(api.port, key, "GET", sbpath + i % nids, 1, NULL, 1, &l) &&
		           second_pages(api.port, key,
		                        "/v1/accounts/acct-0000/usage?from=" FLEET_MONTH_FROM
		                        "&to=" FLEET_MONTH_TO,
		                        1, &l);
	}
	long left = count(c, "SELECT count(*) FROM rollup_queue");
	log = slurp(api.log);
	api_stop(&api);
	if (!plans_ok || log == NULL || left != 0) {
		fprintf(stderr, "bench_fleet: the plans could not be taken (%ld marks left)\n",
		        left);
		goto out;
	}
	int bad = 0, missing = 0, total = 0, unreadable = 0;
	read_plans(log, seen, &unreadable);
	printf("\nplans of the statements meter-api ran for these requests and its rollup "
	       "(auto_explain: EXPLAIN (ANALYZE, BUFFERS) of every run):\n\n");
	printf("| statement | runs | max ms | how samples were read | Seq Scan of samples | "
	       "Seq Scans of other tables |\n|---|---|---|---|---|---|\n");
	for (size_t k = 0; k <= NHOT; k++) {
		struct seen *s = &seen[k];
		total += s->calls;
		if (k < NHOT && s->calls == 0) {
			if (hot[k].must) {
				printf("| %s | 0 | | NOT EXERCISED | | |\n", hot[k].where);
				missing++;
			}
			continue;
		}
		if (s->calls == 0)
			continue;
		printf("| %s | %d | %.2f | %s | %s | %s |\n", s->where, s->calls, s->max_ms,
		       s->samples_by[0] ? s->samples_by : "-", s->seq_samples ? "**YES**" : "no",
		       s->seq_other[0] ? s->seq_other : "");
		bad += s->seq_samples > 0;
	}
	if (unreadable > 0)
		printf("\n%d plan(s) in the log were not whole JSON (two threads' plans "
		       "interleaved?) and were not read\n",
		       unreadable);
	printf("RESULT fleet_explain_statements=%d fleet_explain_plans=%d "
	       "fleet_explain_samples_seqscans=%d fleet_explain_not_exercised=%d "
	       "fleet_explain_unreadable=%d\n",
	       (int)NHOT, total, bad, missing, unreadable);
	for (size_t k = 0; k <= NHOT; k++)
		if (seen[k].bad_plan) {
			printf("\nSEQ SCAN OF SAMPLES in %s; its plan:\n%s\n", seen[k].where,
			       seen[k].bad_plan);
		}
	if (plans_file != NULL) {
		FILE *f = fopen(plans_file, "w");
		for (size_t k = 0; f != NULL && k <= NHOT; k++)
			if (seen[k].slowest)
				fprintf(f, "== %s: %d runs, the slowest (%.3f ms):\n%s\n\n",
				        seen[k].where, seen[k].calls, seen[k].max_ms,
				        seen[k].slowest);
		if (f == NULL || fclose(f) != 0)
			fprintf(stderr, "bench_fleet: could not write %s: %s\n", plans_file,
			        strerror(errno));
		else
			printf("the slowest plan of each statement: %s\n", plans_file);
	}
	if (bad || missing)
		fprintf(stderr,
		        "bench_fleet: FAILED: %d statement(s) read samples with a Seq Scan, %d hot "
		        "statement(s) not exercised\n",
		        bad, missing);
	ok = bad == 0 && missing == 0;
out:
	for (size_t k = 0; k <= NHOT; k++)
		free(seen[k].bad_plan), free(seen[k].slowest);
	free(log);
	return ok;
}

int main(int argc, char **argv)
{
	int naccounts = 2000, nsandboxes = 300000, batch_rows = 5000, repeat = 1, writers = 2;
	bool rollup = true, with_queries = false, keep = false;
	const char *plans_file = NULL;
	rng_state = 20261201;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (strcmp(a, "--no-rollup") == 0) {
			rollup = false;
			continue;
		}
		if (strcmp(a, "--keep") == 0) {
			keep = true;
			continue;
		}
		if (strcmp(a, "--queries") == 0) {
			with_queries = true;
			continue;
		}
		if (strcmp(a, "--plans") == 0 && v != NULL) {
			plans_file = v;
			with_queries = true;
			i++;
			continue;
		}
		if (v == NULL || atol(v) <= 0) {
			fprintf(stderr,
			        "usage: bench_fleet [--accounts N] [--sandboxes N] [--batch ROWS] "
			        "[--writers N (at most 16)] [--repeat N] [--seed N] [--no-rollup] "
			        "[--queries] [--plans FILE]\n");
			return 2;
		}
		if (strcmp(a, "--accounts") == 0)
			naccounts = atoi(v);
		else if (strcmp(a, "--sandboxes") == 0)
			nsandboxes = atoi(v);
		else if (strcmp(a, "--batch") == 0)
			batch_rows = atoi(v);
		else if (strcmp(a, "--writers") == 0 && atoi(v) <= WRITERS_MAX)
			writers = atoi(v);
		else if (strcmp(a, "--repeat") == 0)
			repeat = atoi(v);
		else if (strcmp(a, "--seed") == 0)
			rng_state = (uint64_t)atol(v);
		else {
			fprintf(stderr, "bench_fleet: unknown option \"%s\"\n", a);
			return 2;
		}
		i++;
	}
	if (with_queries && !rollup) {
		fprintf(stderr, "bench_fleet: --queries needs the rollup (drop --no-rollup)\n");
		return 2;
	}
	log_init("bench_fleet", LOG_WARN, false);

	/* The fleet. */
	int64_t month, next;
	meter_time_parse("2026-11-01T00:00:00Z", &month);
	meter_time_parse("2026-12-01T00:00:00Z", &next);
	struct sandbox *sb = calloc((size_t)nsandboxes, sizeof *sb);
	if (sb == NULL)
		return 1;
	for (int i = 0; i < nsandboxes; i++) {
		double u = unit();
		sb[i].account = i % 3 == 0 ? 0 : (int)((double)naccounts * u * u);
		int64_t dur = 120000000 + (int64_t)(unit() * 480000000.0);
		sb[i].start_us = month + (int64_t)(unit() * (double)(next - month - dur));
		sb[i].end_us = sb[i].start_us + dur;
		sb[i].phase_us = (int64_t)(unit() * 10000000.0);
		double r = unit();
		sb[i].vcpus = r < 0.5 ? 1 : r < 0.85 ? 2 : 4;
		r = unit();
		sb[i].busy_ppm = r < 0.2   ? 10000
		                 : r < 0.7 ? 100000 + (int)(unit() * 500000)
		                           : 800000 + (int)(unit() * 200000);
	}
	qsort(sb, (size_t)nsandboxes, sizeof *sb, cmp_start);

	struct testdb db = {0};
	if (!testdb_create_migrated(&db, "fleet"))
		return 1;
	PGconn *c = db.conn;
	int rc = 1;
	struct share share[WRITERS_MAX] = {0};
	for (int w = 0; w < writers; w++) {
		snprintf(share[w].path, sizeof share[w].path, "/tmp/meter-fleet-XXXXXX");
		int fd = mkstemp(share[w].path);
		share[w].out = fd >= 0 ? fdopen(fd, "w+") : NULL;
		if (share[w].out == NULL) {
			fprintf(stderr, "bench_fleet: cannot make %s: %s\n", share[w].path,
			        strerror(errno));
			goto done;
		}
		snprintf(share[w].host, sizeof share[w].host, "fleet-host-%d", w);
		share[w].url = db.url;
	}

	/* Accounts and sandboxes, by COPY. */
	{
		size_t cap = (size_t)nsandboxes * 160 + (size_t)naccounts * 64, len = 0;
		char *t = malloc(cap);
		if (t == NULL)
			goto done;
		for (int a = 0; a < naccounts; a++)
			len += (size_t)snprintf(t + len, cap - len, "acct-%04d\tAccount %d\tpaid\n",
			                        a, a);
		if (!copy_in(c, "accounts (id, name, plan)", t, len))
			goto done;
		len = 0;
		for (int i = 0; i < nsandboxes; i++) {
			char s[METER_TIME_BUF], e[METER_TIME_BUF];
			meter_time_format(sb[i].start_us, s, sizeof s);
			meter_time_format(sb[i].end_us, e, sizeof e);
			len += (size_t)snprintf(t + len, cap - len,
			                        "sb-%06d\tacct-%04d\t%d\t%d\t%s\t%s\n", i,
			                        sb[i].account, sb[i].vcpus, 2 * sb[i].vcpus, s, e);
		}
		bool ok = copy_in(c,
		                  "sandboxes (id, account_id, vcpus, memory_gib, started_at, "
		                  "stopped_at)",
		                  t, len);
		free(t);
		if (!ok)
			goto done;
	}

	/* Samples, round by round, in batches as each share's collector makes them. */
	double t0 = now_s();
	long rows = 0;
	size_t first = 0, active_end = 0;
	struct cg_reading rd = {.mem_current = CG_ABSENT,
	                        .mem_peak = CG_ABSENT,
	                        .mem_anon_kernel = CG_ABSENT,
	                        .mem_limit = CG_ABSENT,
	                        .cpu_limit_millicores = CG_ABSENT};
	for (int64_t round = month; round < next; round += 10000000) {
		while (active_end < (size_t)nsandboxes &&
		       sb[active_end].start_us < round + 10000000)
			active_end++;
		while (first < active_end && sb[first].end_us < round - 600000000)
			first++; /* nothing older than 10 minutes can still run */
		for (size_t i = first; i < active_end; i++) {
			int64_t ts = round + sb[i].phase_us;
			if (ts <= sb[i].start_us || ts > sb[i].end_us)
				continue;
			double noise = 0.9 + 0.2 * unit();
			sb[i].cpu_us +=
			        (int64_t)((double)sb[i].busy_ppm / 1e6 * sb[i].vcpus * 1e7 * noise);
			char id[32], acct[32];
			snprintf(id, sizeof id, "sb-%06zu", i);
			snprintf(acct, sizeof acct, "acct-%04d", sb[i].account);
			rd.cpu_usage_us = sb[i].cpu_us;
			rd.mem_current = (int64_t)sb[i].vcpus << 30;
			rd.mem_peak = rd.mem_current;
			rd.mem_limit = (int64_t)sb[i].vcpus << 31;
			struct share *sh = &share[i % (size_t)writers];
			if (!batch_add(&sh->b, id, acct, 4242 + (int64_t)i, ts, sh->host, &rd))
				goto done;
			rows++;
			if ((int)sh->b.rows >= batch_rows &&
			    !spill(&sh->b, sh->out, &sh->chunk, &sh->nchunks, &sh->capchunks))
				goto done;
		}
	}
	long bytes = 0;
	for (int w = 0; w < writers; w++) {
		struct share *sh = &share[w];
		if (sh->b.rows && !spill(&sh->b, sh->out, &sh->chunk, &sh->nchunks, &sh->capchunks))
			goto done;
		batch_free(&sh->b);
		fflush(sh->out);
		bytes += ftell(sh->out);
		for (size_t k = 0; k < sh->nchunks; k++)
			if (sh->chunk[k] > sh->maxchunk)
				sh->maxchunk = sh->chunk[k];
	}
	printf("bench_fleet: %d accounts, %d sandboxes, %ld samples (%.0f MiB of COPY text) "
	       "made in %.1f s; batches of %d rows from %d collectors at once\n",
	       naccounts, nsandboxes, rows, (double)bytes / 1048576.0, now_s() - t0, batch_rows,
	       writers);
	fflush(stdout);

	double *meter_s = calloc((size_t)repeat, sizeof(double)),
	       *copy_s = calloc((size_t)repeat, sizeof(double));
	if (meter_s == NULL || copy_s == NULL)
		goto done;
	for (int r = 0; r < repeat; r++) {
		/* the ceiling: psql \copy of the same rows into the same table, one psql a share,
		 * all at once */
		if (!exec(c, "TRUNCATE samples, rollup_queue") || !exec(c, "CHECKPOINT"))
			goto done;
		double s = now_s();
		pid_t pids[WRITERS_MAX];
		int started = 0;
		bool copied = true;
		for (int w = 0; w < writers; w++) {
			char cmd[8192];
			snprintf(cmd, sizeof cmd,
			         "psql -X -q -v ON_ERROR_STOP=1 -d \"%s\" -c \"\\\\copy samples "
			         "(" BATCH_COLUMNS ") FROM '%s'\"",
			         db.url, share[w].path);
			pids[w] = fork();
			if (pids[w] == 0) {
				execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
				_exit(127);
			}
			if (pids[w] < 0) {
				copied = false;
				break;
			}
			started++;
		}
		for (int w = 0; w < started; w++) {
			int st;
			if (waitpid(pids[w], &st, 0) != pids[w] || !WIFEXITED(st) ||
			    WEXITSTATUS(st) != 0)
				copied = false;
		}
		if (!copied) {
			fprintf(stderr, "bench_fleet: psql \\copy failed\n");
			goto done;
		}
		copy_s[r] = now_s() - s;
		if (count(c, "SELECT count(*) FROM samples") != rows) {
			fprintf(stderr, "bench_fleet: psql \\copy did not load every row\n");
			goto done;
		}
		/* meter: the collector's write path, batch by batch, a thread a share */
		if (!exec(c, "TRUNCATE samples, rollup_queue") || !exec(c, "CHECKPOINT"))
			goto done;
		long inserted_all = 0;
		pthread_t th[WRITERS_MAX];
		s = now_s();
		for (int w = 0; w < writers; w++)
			if (pthread_create(&th[w], NULL, ingest_share, &share[w]) != 0) {
				fprintf(stderr, "bench_fleet: cannot start a writer\n");
				for (int x = 0; x < w; x++)
					pthread_join(th[x], NULL);
				goto done;
			}
		bool written = true;
		for (int w = 0; w < writers; w++) {
			pthread_join(th[w], NULL);
			if (!share[w].ok) {
				fprintf(stderr, "bench_fleet: writer %d: %s\n", w, share[w].err);
				written = false;
			}
			inserted_all += share[w].inserted;
		}
		meter_s[r] = now_s() - s;
		if (!written)
			goto done;
		if (inserted_all != rows) {
			fprintf(stderr, "bench_fleet: the write path inserted %ld of %ld rows\n",
			        inserted_all, rows);
			goto done;
		}
		printf("run %d: psql \\copy %.1f s (%.0f samples/s), meter %.1f s (%.0f "
		       "samples/s)\n",
		       r + 1, copy_s[r], (double)rows / copy_s[r], meter_s[r],
		       (double)rows / meter_s[r]);
		fflush(stdout);
	}
	double mc = median(copy_s, repeat), mm = median(meter_s, repeat);
	printf("\n| figure | meter | psql \\copy (ceiling) | ratio | goal "
	       "|\n|---|---|---|---|---|\n");
	printf("| ingest, samples/s (median of %d) | %.0f | %.0f | %.2f | >= 0.8 x and >= 100000 "
	       "|\n",
	       repeat, (double)rows / mm, (double)rows / mc, mc / mm);
	printf("RESULT fleet_samples=%ld fleet_ingest_sps=%.0f fleet_copy_sps=%.0f "
	       "fleet_writers=%d\n",
	       rows, (double)rows / mm, (double)rows / mc, writers);

	if (rollup) {
		/* Every sandbox was marked by the last ingest: rate them all, as one worker. */
		long marked = count(c, "SELECT count(*) FROM rollup_queue");
		char err[512];
		double s = now_s();
		int n = 0, done_now;
		while ((done_now = rollup_pass(c, err, sizeof err)) > 0)
			n += done_now;
		double took = now_s() - s;
		if (done_now < 0) {
			fprintf(stderr, "bench_fleet: rollup: %s\n", err);
			goto done;
		}
		printf("| rollup, samples/s (one worker; %d of %ld sandboxes) | %.0f | | | |\n", n,
		       marked, (double)rows / took);
		long left = count(c, "SELECT count(*) FROM rollup_queue");
		long hours = count(c, "SELECT count(*) FROM usage_hourly");
		printf("rollup: %.1f s, %ld hourly rows, %ld marks left\n", took, hours, left);
		printf("RESULT fleet_rollup_sps=%.0f fleet_rollup_sandboxes_per_s=%.1f\n",
		       (double)rows / took, (double)n / took);
		fflush(stdout);
	}
	if (with_queries && !queries(&db, (double)nsandboxes / 300000.0, plans_file))
		goto done;
	rc = 0;
done:
	for (int w = 0; w < writers; w++) {
		if (share[w].out)
			fclose(share[w].out);
		if (share[w].path[0])
			unlink(share[w].path);
		free(share[w].chunk);
		batch_free(&share[w].b);
	}
	free(sb);
	if (keep && db.conn != NULL) {
		printf("the database is kept: %s\n", db.url);
		PQfinish(db.conn);
	} else {
		testdb_drop(&db);
	}
	return rc;
}
