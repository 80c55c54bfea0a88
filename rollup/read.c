/*
 * rollup/read.c: what a rating reads, for a batch of marks and for the
 * trial's crossing hour alike.
 *
 * The batch's sandboxes (those not registered go through register.c), the
 * horizon where raw samples begin, the window of each to re-rate (from the
 * hour holding its mark's from_ts, or its stop), and its samples: the whole
 * history's order of incarnations, where each stood before the window
 * (seeds, dropped partitions' sample_seeds, rollup_checkpoints) and the
 * samples in it, all in one statement per batch (meter_rollup_read,
 * migrations/functions/meter_rollup_read.sql). Samples stamped over an hour ahead of now are
 * counted, never read.
 */
#include <stdio.h>
#include <stdlib.h>

#include "common/log.h"
#include "meter/decimal.h"
#include "meter/timefmt.h"
#include "rollup/internal.h"

/* clang-format off */

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
 * rating), only samples up to the hour's end are read (ru_read_after adds the
 * first one after it). Samples stamped more than an hour ahead of now are
 * never read; kind 3 counts them (the sandbox is rated without them and its
 * mark set aside).
 * $3, the lowest start, is a timestamptz, so the partitions before it are
 * pruned. meter_rollup_read (migrations/functions/) reads one sandbox at
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
 * samples' key each (migrations/functions/meter_rollup_after.sql).
 */
static const char after_sql[] =
	"SELECT * FROM meter_rollup_after($1::text[], $2::bigint[], $3::bigint[], $4::bigint[])";

/* clang-format on */

/* Reads the sandboxes of the batch (with again, only those just registered). */
bool ru_load_rows(PGconn *c, struct job *jobs, size_t n, bool again, int64_t *horizon, char *err,
                  size_t errlen)
{
	struct arr ids = {0};
	size_t *at = calloc(n + 1, sizeof *at), m = 0;
	bool ok = false;
	PGresult *r = NULL;
	if (at == NULL)
		goto oom;
	for (size_t i = 0; i < n; i++)
		if (!again || (jobs[i].fate == NOT_REGISTERED && jobs[i].found)) {
			ru_arr_str(&ids, jobs[i].sandbox);
			at[m++] = i;
		}
	const char *p[] = {ru_arr_end(&ids)};
	if (p[0] == NULL)
		goto oom;
	r = ru_query(c, load_sql, 1, p, PGRES_TUPLES_OK, "could not read the sandboxes", err,
	             errlen);
	if (r == NULL)
		goto out;
	for (int row = 0; row < PQntuples(r); row++) {
		int64_t k;
		if (row == 0 && !again && !ru_get_int(r, row, 6, horizon)) {
			snprintf(err, errlen, "malformed horizon");
			goto out;
		}
		if (!ru_get_int(r, row, 0, &k) || k < 1 || (size_t)k > m) {
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
		    !ru_get_int(r, row, 4, &j->started) || !ru_get_int(r, row, 5, &j->stopped))
			ru_cannot_rate(j, "the sandbox has a malformed row");
	}
	ok = true;
	goto out;
oom:
	snprintf(err, errlen, "could not read the sandboxes: out of memory");
out:
	PQclear(r);
	ru_arr_free(&ids);
	free(at);
	return ok;
}

/*
 * Loads the batch's sandboxes; one not registered is registered from its
 * cgroup's limits when its path named an account (and read again), else it
 * is set aside with why (ru_auto_register). *horizon: where raw samples begin.
 */
bool ru_load(PGconn *c, struct job *jobs, size_t n, int64_t *horizon, char *err, size_t errlen)
{
	*horizon = METER_TIME_NONE;
	if (!ru_load_rows(c, jobs, n, false, horizon, err, errlen))
		return false;
	bool any = false;
	for (size_t i = 0; i < n; i++) {
		bool done = false;
		if (jobs[i].fate == NOT_REGISTERED &&
		    !ru_auto_register(c, &jobs[i], &done, err, errlen))
			return false;
		jobs[i].found = done; /* marks the ones ru_load_rows reads again */
		any = any || done;
	}
	if (any && !ru_load_rows(c, jobs, n, true, horizon, err, errlen))
		return false;
	for (size_t i = 0; i < n; i++) /* registered: its account's limits are checked after */
		jobs[i].found = jobs[i].fate != NOT_REGISTERED && jobs[i].account[0];
	return true;
}

/* The window of each sandbox to rate, and where its samples are read from. */
void ru_windows(struct job *jobs, size_t n, int64_t horizon)
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

/* Where an incarnation stood (a time, raised to started_at, and its highest counter). */
static bool get_seed(const PGresult *r, int row, int col, const struct job *j, int64_t inc,
                     bool *found, struct meter_sample *out)
{
	*found = !PQgetisnull(r, row, col);
	*out = (struct meter_sample){.incarnation = inc};
	if (!*found)
		return true;
	if (!ru_get_int(r, row, col, &out->t_us) || !ru_get_int(r, row, col + 1, &out->cpu_us) ||
	    out->cpu_us == METER_TIME_NONE)
		return false;
	if (j->started != METER_TIME_NONE && out->t_us < j->started)
		out->t_us = j->started;
	return true;
}

/* Reads the history and the window of every sandbox to rate (read_sql) into its job. */
bool ru_read_samples(PGconn *c, struct job *jobs, size_t n, char *err, size_t errlen)
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
		ru_arr_str(&ids, jobs[i].sandbox);
		ru_arr_int(&from, jobs[i].from);
		ru_arr_opt(&marks, jobs[i].mark);
		ru_arr_opt(&upto, jobs[i].upto);
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
	const char *p[] = {ru_arr_end(&ids),   ru_arr_end(&from), low, hor,
	                   ru_arr_end(&marks), ru_arr_end(&upto)};
	if (p[0] == NULL || p[1] == NULL || p[4] == NULL || p[5] == NULL)
		goto oom;
	r = ru_query(c, read_sql, 6, p, PGRES_TUPLES_OK, "could not read samples", err, errlen);
	if (r == NULL)
		goto out;
	/* Twice over the rows: count per sandbox, then fill. */
	int rows = PQntuples(r);
	for (int pass = 0; pass < 2; pass++) {
		for (int row = 0; row < rows; row++) {
			int64_t kind, k, inc;
			if (!ru_get_int(r, row, 0, &kind) || !ru_get_int(r, row, 1, &k) || k < 1 ||
			    (size_t)k > m || !ru_get_int(r, row, 2, &inc)) {
				snprintf(err, errlen, "could not read samples: a row out of place");
				goto out;
			}
			struct job *j = &jobs[at[k - 1]];
			if (kind == 3) { /* samples stamped ahead of now */
				j->ahead = inc;
				if (!ru_get_int(r, row, 3, &j->ahead_first))
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
				good = ru_get_int(r, row, 3, &x->first) &&
				       ru_get_int(r, row, 8, &x->ended) &&
				       get_seed(r, row, 4, j, inc, &x->at_window, &x->window) &&
				       get_seed(r, row, 6, j, inc, &x->at_end, &x->end) &&
				       (PQgetisnull(r, row, 4) ||
				        (ru_get_int(r, row, 4, &x->ck_last) &&
				         ru_get_int(r, row, 5, &x->ck_cpu)));
			} else {
				struct smp *s = &jobs[at[k - 1]].s[j->n++];
				s->inc = inc;
				good = ru_get_int(r, row, 3, &s->t) &&
				       ru_get_int(r, row, 4, &s->cpu) && s->t != METER_TIME_NONE &&
				       s->cpu != METER_TIME_NONE;
				if (good && !PQgetisnull(r, row, 6) &&
				    (j->foreign++ == 0 || s->t < j->foreign_first))
					j->foreign_first = s->t;
			}
			if (!good)
				ru_cannot_rate(j, "malformed samples");
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
	/* A sandbox id taken by a cgroup under another account: never billed to
	 * the sandbox's own account, set aside until those samples are gone. */
	for (size_t i = 0; i < m; i++) {
		struct job *j = &jobs[at[i]];
		if (j->fate != RATE || j->foreign == 0)
			continue;
		char first[METER_TIME_BUF], why[400];
		meter_time_format(j->foreign_first, first, sizeof first);
		snprintf(why, sizeof why,
		         "%lld sample(s) from %s on come from a cgroup whose path names another "
		         "account than its own, %s: a sandbox id taken under two accounts is not "
		         "billed to either; remove those samples (or the cgroup) and retry",
		         (long long)j->foreign, first, j->account);
		ru_cannot_rate(j, why);
	}
	ok = true;
	goto out;
oom:
	snprintf(err, errlen, "could not read samples: out of memory");
out:
	PQclear(r);
	ru_arr_free(&ids);
	ru_arr_free(&from);
	ru_arr_free(&marks);
	ru_arr_free(&upto);
	free(at);
	return ok;
}

/*
 * For the trial's crossing hour (jobs with upto): adds to each job the first
 * sample after the hour of each of its incarnations (after_sql).
 */
bool ru_read_after(PGconn *c, struct job *jobs, size_t n, char *err, size_t errlen)
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
			ru_arr_str(&a[0], jobs[i].sandbox);
			ru_arr_int(&a[1], jobs[i].incs[k].inc);
			ru_arr_int(&a[2], jobs[i].upto);
			ru_arr_int(&a[3], (int64_t)m);
		}
	}
	const char *p[4];
	for (int k = 0; k < 4; k++)
		if ((p[k] = ru_arr_end(&a[k])) == NULL)
			goto oom;
	if (a[0].n == 0) {
		ok = true;
		goto out;
	}
	r = ru_query(c, after_sql, 4, p, PGRES_TUPLES_OK, "could not read samples after the hour",
	             err, errlen);
	if (r == NULL)
		goto out;
	for (int row = 0; row < PQntuples(r); row++) {
		int64_t k;
		struct smp x = {0};
		if (!ru_get_int(r, row, 0, &k) || k < 1 || (size_t)k > m ||
		    !ru_get_int(r, row, 1, &x.inc) || !ru_get_int(r, row, 2, &x.t) ||
		    !ru_get_int(r, row, 3, &x.cpu) || x.t == METER_TIME_NONE ||
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
		ru_arr_free(&a[k]);
	free(at);
	return ok;
}
