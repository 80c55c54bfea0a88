#include "api/replica.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "api/pool.h"
#include "common/clock.h"
#include "common/log.h"

#define CHECK_EVERY_NS INT64_C(1000000000)

struct replica {
	struct pool *pool;
	int64_t max_lag_us;
	pthread_mutex_t mu;
	struct replica_status st; /* under mu */
	int64_t next_check_ns;    /* under mu; 0: at once */
	bool checking;            /* under mu: one request checks at a time */
};

/*
 * The replica's delay behind its primary in µs: 0 when it is not in recovery
 * (a primary named as the read database) or streams and has replayed all it
 * received; else the age of the last transaction replayed (NULL: none yet).
 * Without pg_read_all_stats the WAL receiver's status reads as NULL and counts
 * as streaming.
 */
static const char lag_sql[] =
        "SELECT CASE WHEN NOT pg_is_in_recovery() THEN 0 "
        "WHEN pg_last_wal_receive_lsn() = pg_last_wal_replay_lsn() AND EXISTS (SELECT 1 FROM "
        "pg_stat_wal_receiver WHERE coalesce(status, 'streaming') = 'streaming') THEN 0 "
        "ELSE greatest(0, (extract(epoch FROM clock_timestamp() - "
        "pg_last_xact_replay_timestamp()) * 1000000)::bigint) END";

const char *replica_state_name(enum replica_state s)
{
	switch (s) {
	case REPLICA_OK:
		return "ok";
	case REPLICA_DOWN:
		return "unavailable";
	case REPLICA_BEHIND:
		return "behind";
	case REPLICA_UNKNOWN:
		break;
	}
	return "unknown";
}

struct replica *replica_new(const char *url, size_t pool_size, int64_t max_lag_us)
{
	struct replica *rp = calloc(1, sizeof *rp);
	if (rp == NULL)
		return NULL;
	rp->pool = pool_new(url, pool_size);
	if (rp->pool == NULL) {
		free(rp);
		return NULL;
	}
	rp->max_lag_us = max_lag_us;
	rp->st = (struct replica_status){.state = REPLICA_UNKNOWN, .lag_us = -1};
	snprintf(rp->st.detail, sizeof rp->st.detail, "not checked yet");
	pthread_mutex_init(&rp->mu, NULL);
	return rp;
}

void replica_free(struct replica *rp)
{
	if (rp == NULL)
		return;
	pool_free(rp->pool);
	pthread_mutex_destroy(&rp->mu);
	free(rp);
}

/* Records a new state (under mu), logging when reads move between the databases. */
static void set_state(struct replica *rp, enum replica_state state, int64_t lag_us,
                      const char *detail)
{
	enum replica_state was = rp->st.state;
	rp->st.state = state;
	rp->st.lag_us = lag_us;
	/* cut to the field (a connection error can be longer) */
	snprintf(rp->st.detail, sizeof rp->st.detail, "%.*s", (int)sizeof rp->st.detail - 1,
	         detail);
	if (state == REPLICA_OK && was != REPLICA_OK)
		log_info("read replica: %s; reads go to it", detail);
	else if (state != REPLICA_OK && was != state)
		log_warn("read replica %s: %s; reads go to the primary", replica_state_name(state),
		         detail);
}

/* Checks the replica on c (NULL: it could not be reached, err says why); the caller
 * set rp->checking. */
static void check(struct replica *rp, PGconn *c, const char *err)
{
	enum replica_state state;
	int64_t lag = -1;
	char detail[256];
	if (c == NULL) {
		state = REPLICA_DOWN;
		/* cut to the field (a connection error can be longer) */
		snprintf(detail, sizeof detail, "%.*s", (int)sizeof detail - 1, err);
	} else {
		PGresult *r = PQexec(c, lag_sql);
		if (PQresultStatus(r) != PGRES_TUPLES_OK || PQntuples(r) != 1) {
			state = REPLICA_DOWN;
			snprintf(detail, sizeof detail, "its state could not be read: %s",
			         PQerrorMessage(c));
			detail[strcspn(detail, "\n")] = '\0';
		} else if (PQgetisnull(r, 0, 0)) {
			state = REPLICA_BEHIND;
			snprintf(detail, sizeof detail,
			         "it has replayed no transaction since it started");
		} else {
			lag = strtoll(PQgetvalue(r, 0, 0), NULL, 10);
			state = lag <= rp->max_lag_us ? REPLICA_OK : REPLICA_BEHIND;
			snprintf(detail, sizeof detail,
			         "%.3f s behind the primary (at most %.3f s allowed)",
			         (double)lag / 1e6, (double)rp->max_lag_us / 1e6);
		}
		PQclear(r);
	}
	pthread_mutex_lock(&rp->mu);
	set_state(rp, state, lag, detail);
	rp->checking = false;
	rp->next_check_ns = clock_ns(CLOCK_MONOTONIC) + CHECK_EVERY_NS;
	pthread_mutex_unlock(&rp->mu);
}

PGconn *replica_take(struct replica *rp)
{
	int64_t now = clock_ns(CLOCK_MONOTONIC);
	pthread_mutex_lock(&rp->mu);
	bool due = !rp->checking && now >= rp->next_check_ns;
	if (due)
		rp->checking = true;
	bool usable = rp->st.state == REPLICA_OK;
	pthread_mutex_unlock(&rp->mu);
	if (!due && !usable)
		return NULL;
	char err[512];
	bool unreachable;
	PGconn *c = pool_take_ex(rp->pool, 200, true, &unreachable, err, sizeof err);
	if (c == NULL) {
		if (unreachable && due) {
			check(rp, NULL, err);
		} else if (unreachable) {
			/* Gone since its last check: no request tries it again before the next. */
			pthread_mutex_lock(&rp->mu);
			set_state(rp, REPLICA_DOWN, -1, err);
			rp->next_check_ns = clock_ns(CLOCK_MONOTONIC) + CHECK_EVERY_NS;
			pthread_mutex_unlock(&rp->mu);
		} else if (due) {
			/* A full pool says nothing of the replica: check it on a later request. */
			pthread_mutex_lock(&rp->mu);
			rp->checking = false;
			pthread_mutex_unlock(&rp->mu);
		}
		return NULL;
	}
	if (due)
		check(rp, c, NULL);
	pthread_mutex_lock(&rp->mu);
	usable = rp->st.state == REPLICA_OK;
	pthread_mutex_unlock(&rp->mu);
	if (!usable) {
		pool_give(rp->pool, c);
		return NULL;
	}
	return c;
}

void replica_give(struct replica *rp, PGconn *c)
{
	if (c == NULL)
		return;
	if (PQstatus(c) != CONNECTION_OK) {
		pthread_mutex_lock(&rp->mu);
		set_state(rp, REPLICA_DOWN, -1, "a connection to it broke");
		rp->next_check_ns = clock_ns(CLOCK_MONOTONIC) + CHECK_EVERY_NS;
		pthread_mutex_unlock(&rp->mu);
	}
	pool_give(rp->pool, c);
}

void replica_status(struct replica *rp, struct replica_status *out)
{
	pthread_mutex_lock(&rp->mu);
	*out = rp->st;
	pthread_mutex_unlock(&rp->mu);
}

bool replica_set_timeout(struct replica *rp, PGconn *c, unsigned ms, char *err, size_t errlen)
{
	return pool_set_timeout(rp->pool, c, ms, err, errlen);
}
