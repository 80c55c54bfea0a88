/*
 * bench_fleet: a realistic month of a sandbox fleet, ingested through the
 * collector's own write path, beside psql's \copy of the same rows into the
 * same table in the same run (the ceiling); then the rollup of it all.
 *
 *   build/bench_fleet [--accounts N] [--sandboxes N] [--batch ROWS] [--repeat N]
 *                     [--seed N] [--no-rollup]
 *
 * The month is November 2026, samples every 10 s, drawn with a fixed seed:
 *   - accounts: a third of the sandboxes belong to the largest account
 *     (acct-0000); the rest go to account floor(N x u^2) (a few large, many
 *     small);
 *   - sandboxes start uniformly over the month and run 2 to 10 minutes
 *     (uniform); 1 vCPU (50 %), 2 (35 %) or 4 (15 %), 2 GiB per vCPU;
 *   - busy fraction: 20 % idle (1 %), 50 % uniform 10-60 %, 30 % busy 80-100 %;
 *     each sample adds busy x vCPUs x 10 s of CPU, +-10 % noise.
 * Rows are made in time order, round by round, with collector/batch.c, and
 * written in batches of --batch rows (default 5,000: a collector's round on a
 * large host, or a spool replay) with collector/writer.c: COPY into a staging
 * table, INSERT ... ON CONFLICT DO NOTHING into the partitioned samples table
 * and its unique key. The same bytes go to psql \copy straight into samples.
 * Between runs samples is truncated and a CHECKPOINT taken; with --repeat N
 * the two alternate N times and medians are printed. The rollup then rates
 * every sandbox with the worker's own code (one worker, as one meter-api).
 *
 * Uses DATABASE_URL's server or the private cluster, in a database of its own
 * dropped at the end. Never a test: it prints figures and exits 0 unless it
 * could not run.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "api/rollup.h"
#include "collector/batch.h"
#include "collector/writer.h"
#include "common/log.h"
#include "meter/timefmt.h"
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

int main(int argc, char **argv)
{
	int naccounts = 2000, nsandboxes = 300000, batch_rows = 5000, repeat = 1;
	bool rollup = true;
	rng_state = 20261201;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (strcmp(a, "--no-rollup") == 0) {
			rollup = false;
			continue;
		}
		if (v == NULL || atol(v) <= 0) {
			fprintf(stderr,
			        "usage: bench_fleet [--accounts N] [--sandboxes N] [--batch ROWS] "
			        "[--repeat N] [--seed N] [--no-rollup]\n");
			return 2;
		}
		if (strcmp(a, "--accounts") == 0)
			naccounts = atoi(v);
		else if (strcmp(a, "--sandboxes") == 0)
			nsandboxes = atoi(v);
		else if (strcmp(a, "--batch") == 0)
			batch_rows = atoi(v);
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
	char path[] = "/tmp/meter-fleet-XXXXXX";
	int fd = mkstemp(path);
	FILE *out = fd >= 0 ? fdopen(fd, "w+") : NULL;
	size_t *chunk = NULL, nchunks = 0, capchunks = 0;
	char *buf = NULL;
	if (out == NULL) {
		fprintf(stderr, "bench_fleet: cannot make %s: %s\n", path, strerror(errno));
		goto done;
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

	/* Samples, round by round, in batches as the collector makes them. */
	double t0 = now_s();
	struct batch b = {0};
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
			if (!batch_add(&b, id, acct, 4242 + (int64_t)i, ts, "fleet-host", &rd))
				goto done;
			rows++;
			if ((int)b.rows >= batch_rows &&
			    !spill(&b, out, &chunk, &nchunks, &capchunks))
				goto done;
		}
	}
	if (b.rows && !spill(&b, out, &chunk, &nchunks, &capchunks))
		goto done;
	batch_free(&b);
	fflush(out);
	long bytes = ftell(out);
	printf("bench_fleet: %d accounts, %d sandboxes, %ld samples (%.0f MiB of COPY text) "
	       "made in %.1f s; batches of %d rows\n",
	       naccounts, nsandboxes, rows, (double)bytes / 1048576.0, now_s() - t0, batch_rows);
	fflush(stdout);

	double *meter_s = calloc((size_t)repeat, sizeof(double)),
	       *copy_s = calloc((size_t)repeat, sizeof(double));
	size_t maxchunk = 0;
	for (size_t k = 0; k < nchunks; k++)
		if (chunk[k] > maxchunk)
			maxchunk = chunk[k];
	buf = malloc(maxchunk + 1);
	if (meter_s == NULL || copy_s == NULL || buf == NULL)
		goto done;
	char cmd[8192];
	snprintf(cmd, sizeof cmd,
	         "psql -X -q -v ON_ERROR_STOP=1 -d \"%s\" -c \"\\\\copy samples (" BATCH_COLUMNS
	         ") FROM '%s'\"",
	         db.url, path);
	for (int r = 0; r < repeat; r++) {
		/* the ceiling: psql \copy of the same rows into the same table */
		if (!exec(c, "TRUNCATE samples, rollup_queue") || !exec(c, "CHECKPOINT"))
			goto done;
		double s = now_s();
		if (system(cmd) != 0) {
			fprintf(stderr, "bench_fleet: psql \\copy failed\n");
			goto done;
		}
		copy_s[r] = now_s() - s;
		if (count(c, "SELECT count(*) FROM samples") != rows) {
			fprintf(stderr, "bench_fleet: psql \\copy did not load every row\n");
			goto done;
		}
		/* meter: the collector's write path, batch by batch */
		if (!exec(c, "TRUNCATE samples, rollup_queue") || !exec(c, "CHECKPOINT"))
			goto done;
		rewind(out);
		long inserted_all = 0;
		s = now_s();
		for (size_t k = 0; k < nchunks; k++) {
			char err[512];
			long ins = 0;
			if (fread(buf, 1, chunk[k], out) != chunk[k] ||
			    !writer_write(c, "meter_collector", buf, chunk[k], &ins, err,
			                  sizeof err)) {
				fprintf(stderr, "bench_fleet: batch %zu: %s\n", k, err);
				goto done;
			}
			inserted_all += ins;
		}
		meter_s[r] = now_s() - s;
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
	}
	rc = 0;
done:
	if (out)
		fclose(out);
	unlink(path);
	free(buf);
	free(chunk);
	free(sb);
	testdb_drop(&db);
	return rc;
}
