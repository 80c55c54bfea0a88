/*
 * api/queries.h: every statement the API runs, prepared on each pooled
 * connection. Parameters always go as $n; times go in and out as µs since
 * the epoch (exact, no float), money and sizes as numeric text.
 */
#ifndef API_QUERIES_H
#define API_QUERIES_H

#include <libpq-fe.h>
#include <stdbool.h>
#include <stddef.h>

enum query {
	Q_AUTH,          /* key -> role, account_id, id (a live key), its use due to be noted */
	Q_KEY_USED,      /* key id -> notes its use (last_used_at), at most once a minute */
	Q_PLANS,         /* every price plan */
	Q_ACCOUNT,       /* id -> the account */
	Q_ACCOUNT_LOCK,  /* id -> the account, locked FOR UPDATE */
	Q_ACCOUNT_NEW,   /* id, name, plan, cap, collector_registration -> the account */
	Q_ACCOUNT_PATCH, /* id, cap given, cap, max_concurrent, plan, collector_registration
	                  * (NULL: kept) -> the account */
	Q_STATE, /* account, month start µs -> account, running, trial used µs, month to date kept
	          */
	Q_STATE_KEYED,    /* account, month start µs, key -> the same, and no row for a key that
	                   * may not see the account (the quota check's, after Q_AUTH) */
	Q_SANDBOX,        /* id -> the sandbox */
	Q_SANDBOX_NEW,    /* id, account, vcpus, memory, started µs -> the sandbox */
	Q_SANDBOX_ADOPT,  /* id, account, vcpus, memory, started µs -> the sandbox the collector
	                     found */
	Q_RUNNING_OTHERS, /* account, id -> how many of its sandboxes run besides that one */
	Q_SANDBOX_STOP,   /* id, stopped µs -> id, when the platform's stop moved */
	Q_SANDBOX_ENDS,   /* -> stopped_at, ended_by of sandbox $1 from its stops and ends */
	Q_MARK,           /* sandbox, from µs (NULL: everything) -> queue a re-rating */
	Q_USAGE_TOTALS,   /* account, from µs, to µs -> per plan sums */
	Q_USAGE_MONTH_TOTALS, /* account, month (date) -> per plan sums (account_month) */
	Q_USAGE_OF,     /* account, from µs, to µs, ids -> per sandbox and plan sums of those */
	Q_RANK_RANGE,   /* account, from µs, to µs, n -> the n costliest sandboxes (then id),
	                 * and how many there are */
	Q_RANK_MONTH,   /* account, month (date), n -> the same from sandbox_month_cost, ids
	                 * only */
	Q_COUNT_MONTH,  /* account, month (date) -> its sandboxes (account_month_sandboxes) */
	Q_TOP_MONTH,    /* account, month (date), n -> the costliest: id, cost nano, measured,
	                 * billed µs */
	Q_LISTING_NEW,  /* account, from µs, to µs, first page's ids -> a listing's id */
	Q_LISTING_TRIM, /* account, how many to keep -> its older listings past them deleted */
	Q_LISTING_FILL_RANGE, /* account, from µs, to µs, listing -> its order, made once */
	Q_LISTING_FILL_MONTH, /* account, listing, month (date) -> the same from a month's costs */
	Q_LISTING_PAGE,  /* account, listing, offset, n -> its range and count (NULL: not ordered
	                  * yet), then its ids */
	Q_SANDBOX_LIST,  /* account, after id, n, status, from µs, to µs -> sandboxes by id */
	Q_DATA_AS_OF,    /* account -> oldest pending mark of its sandboxes, or now (µs) */
	Q_SANDBOX_HOURS, /* account, sandbox, from µs, to µs -> per hour and plan sums */
	Q_SANDBOX_PEAK,  /* sandbox, from µs, to µs -> peak memory bytes and the last limit */
	Q_RUNNING_COUNT, /* account -> running sandboxes */
	Q_DAILY,         /* account, from µs, to µs (whole UTC days) -> per day and plan sums, in
	                  * order (account_day) */
	Q_ROLLUP_STATS,  /* -> pending marks, unregistered, age of the oldest (µs), parked,
	                  *    unpriced intervals, webhook deliveries pending and failed,
	                  *    ends estimated and ends at the last reading (incarnation_ends) */
	Q_COUNT
};

/* The text of statement q ($n for its parameters); NULL for no such statement. */
const char *q_sql(enum query q);

/* Prepares every statement on c; false with err. */
bool queries_prepare(PGconn *c, char *err, size_t errlen);

/* Runs a prepared statement with text parameters (NULL for SQL NULL). */
PGresult *q_exec(PGconn *c, enum query q, int nparams, const char *const *params);
/* The same, sent only (PQsendQueryPrepared): for a pipeline. 1 when sent. */
int q_send(PGconn *c, enum query q, int nparams, const char *const *params);

/*
 * The same statement, planned for these parameters: for queries over many
 * rows whose best plan depends on the range asked (usage), where PostgreSQL's
 * generic plan for a prepared statement is several times slower; and a
 * sandbox's hours, whose generic plan takes the (account_id, hour) index and
 * filters the whole account's month down to one sandbox (bench_fleet
 * --queries: 12,433 rows read for a few dozen at a tenth of the fleet).
 */
PGresult *q_exec_planned(PGconn *c, enum query q, int nparams, const char *const *params);

#endif
