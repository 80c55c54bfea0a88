/*
 * rollup/internal.h: what the files of rollup/ share, and nothing outside
 * rollup/ may use (the interface is rollup/rollup.h).
 *
 * A pass (worker.c) takes batches of marks (take.c): for each, read.c
 * reads the sandboxes (registering those not registered, register.c), their
 * windows and samples into a struct job each, rate.c rates every job with
 * the meter/ library, store.c writes the hours and removes or sets aside the
 * marks, and crossing.c queues the accounts whose trial crossing may have moved,
 * then finds those crossings again (rule 8), reading and rating the crossing
 * hour with the same functions. upkeep.c keeps partitions, invoices and old
 * rows; sql.c is what every statement goes through.
 *
 * Functions shared between these files carry the prefix ru_.
 */
#ifndef ROLLUP_INTERNAL_H
#define ROLLUP_INTERNAL_H

#include <libpq-fe.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "common/clock.h"
#include "meter/plan.h"
#include "meter/rating.h"

#define US(col) "(extract(epoch FROM " col ") * 1000000)::bigint"
/* meter_ts (migrations/functions/meter_ts.sql): immutable, so Citus sends what uses it to shards */
#define TS(n) "meter_ts((" n ")::bigint)"

/*
 * The statements of a batch. Each takes arrays, one element per sandbox (or
 * per hourly row), so a batch costs the same number of round trips as one
 * sandbox did. They go unnamed (PQexecParams): nothing is left prepared on
 * the connection, so they pass through transaction pooling, and each is
 * planned for its constants (the time bounds prune partitions).
 */

/*
 * Shared with other rollups, exclusive to meter_drop_sample_partitions
 * (migrations/functions/meter_drop_sample_partitions.sql): the horizon cannot move until this batch
 * commits. Its own statement, so the reads after it have a snapshot taken after the lock.
 */
#define HORIZON_LOCK_SQL "SELECT pg_advisory_xact_lock_shared(hashtext('meter_sample_horizon'))"

/*
 * The price plans, read in the rating's transaction after HORIZON_LOCK_SQL (plans_load,
 * common/plans.h): its snapshot then holds every plan committed before the transaction
 * began. A plan takes effect at least an hour after it is published (plan_add), and
 * samples are rated up to an hour ahead of the transaction's start (meter_rollup_read),
 * so no interval rated under an older list ends after a plan it does not know (rule 6,
 * whatever the order samples and plans arrive in). *plans is the caller's to free.
 */
bool ru_plans(PGconn *c, struct meter_plan **plans, size_t *nplans, char *err, size_t errlen);

/* ---- sql.c ---- */

/* A PostgreSQL array literal ("{...}") being built; failed once it could not grow. */
struct arr {
	char *s;
	size_t len, cap, n;
	bool failed;
};

/* Appends a text element, quoted. */
void ru_arr_str(struct arr *a, const char *v);
/* Appends an integer element. */
void ru_arr_int(struct arr *a, int64_t v);
/* An integer element, or NULL for METER_TIME_NONE. */
void ru_arr_opt(struct arr *a, int64_t v);
/* The literal, or NULL when it could not be built; a stays the owner. */
const char *ru_arr_end(struct arr *a);
void ru_arr_free(struct arr *a);

/* A field as an integer, METER_TIME_NONE when NULL; false when malformed. */
bool ru_get_int(const PGresult *r, int row, int col, int64_t *out);
/* db_query whose failure's message ends in "(SQLSTATE xxxxx)". */
PGresult *ru_query(PGconn *c, const char *sql, int n, const char *const *params,
                   ExecStatusType want, const char *what, char *err, size_t errlen);
/* Runs sql with the n arrays as its parameters, then frees them. */
bool ru_arr_run(PGconn *c, const char *sql, ExecStatusType want, struct arr *a, int n,
                const char *what, char *err, size_t errlen);
/* True when err (from ru_query) is a failure that says nothing about the sandbox. */
bool ru_passing_failure(const char *err);

/* ---- a sandbox being rated ---- */

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
	bool sharded; /* Citus placed the tables (ru_sharded) */
	struct inc *incs;
	size_t ninc;
	struct smp *s;
	size_t n;
	struct bucket *b;
	size_t nb, capb;
	/* The trial's crossing hour (trial_hour_rate): upto is the hour's end, the intervals
	 * ending in (window, upto] are kept in iv instead of summed. */
	int64_t upto;                   /* METER_TIME_NONE: a rating of the mark, not of an hour */
	int64_t ahead, ahead_first;     /* samples stamped over an hour ahead of now, the first */
	int64_t foreign, foreign_first; /* samples whose cgroup named another account, the first */
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

/* ---- register.c ---- */

/* Registers j's sandbox from its cgroup's limits (*done), or says why not in j. */
bool ru_auto_register(PGconn *c, struct job *j, bool *done, char *err, size_t errlen);

/* ---- read.c ---- */

/* Reads the sandboxes of the batch (with again, only those just registered). */
bool ru_load_rows(PGconn *c, struct job *jobs, size_t n, bool again, int64_t *horizon, char *err,
                  size_t errlen);
/* Loads the batch's sandboxes, registering those it can; *horizon: where raw samples begin. */
bool ru_load(PGconn *c, struct job *jobs, size_t n, int64_t *horizon, char *err, size_t errlen);
/* The window of each sandbox to rate, and where its samples are read from. */
void ru_windows(struct job *jobs, size_t n, int64_t horizon);
/* Reads the history and the window of every sandbox to rate into its job. */
bool ru_read_samples(PGconn *c, struct job *jobs, size_t n, char *err, size_t errlen);
/* For the trial's crossing hour: the first sample after the hour of each incarnation. */
bool ru_read_after(PGconn *c, struct job *jobs, size_t n, char *err, size_t errlen);

/* ---- rate.c ---- */

/* Rates j's window into j->b (or j->iv); false, j parked with the reason, when refused. */
bool ru_rate(struct job *j);
/* Parks j with why, logged. */
void ru_cannot_rate(struct job *j, const char *why);
/* Frees what j holds (not j itself). */
void ru_job_free(struct job *j);

/* ---- store.c ---- */

/* Whether Citus placed the tables the batches write (store.c says why it matters). */
bool ru_sharded(PGconn *c, bool *sharded, char *err, size_t errlen);
/* Stores the batch's hours, removes its rated marks and sets the others aside. */
bool ru_store(PGconn *c, struct job *jobs, size_t n, char *err, size_t errlen);

/* ---- take.c ---- */

/* Takes up to max marks and rates them in one transaction: how many, 0, -1 or -2. */
int ru_take(PGconn *c, bool sharded, int max, char *err, size_t errlen);

/* ---- crossing.c ---- */

/* In a batch's transaction: queues the accounts whose crossing may have moved. */
bool ru_trial_enqueue(PGconn *c, const struct job *jobs, size_t n, char *err, size_t errlen);
/* Finds the queued accounts' crossings again, one per transaction: how many, or -1. */
int ru_trial_queue_pass(PGconn *c, char *err, size_t errlen);

#endif
