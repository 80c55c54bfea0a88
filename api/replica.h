/*
 * api/replica.h: the read replica (meter-api --read-database-url).
 *
 * Reads that may be a little behind (usage, draft invoices, the dashboard,
 * the forecast, exports) go to a streaming replica while it answers and is at
 * most max_lag behind the primary; otherwise, and when none is configured,
 * they go to the primary like everything else. Writes, authentication, the
 * quota check and the trial balance always use the primary: they must see
 * committed state.
 *
 * The replica's state is checked at most once a second by the request that
 * finds the check due, with one query on a pooled replica connection: its
 * delay behind the primary is 0 while its WAL receiver streams and it has
 * replayed all it received, else the age of the last transaction it replayed.
 * A replica found down is tried again a second later; meanwhile no request
 * waits for it.
 */
#ifndef API_REPLICA_H
#define API_REPLICA_H

#include <libpq-fe.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct replica;

enum replica_state {
	REPLICA_UNKNOWN, /* not checked yet */
	REPLICA_OK,      /* reads go to it */
	REPLICA_DOWN,    /* it cannot be reached: reads go to the primary */
	REPLICA_BEHIND,  /* more than max_lag behind: reads go to the primary */
};

struct replica_status {
	enum replica_state state;
	int64_t lag_us; /* -1 when not known */
	char detail[256];
};

/* A replica at url with at most pool_size connections; none opened yet. */
struct replica *replica_new(const char *url, size_t pool_size, int64_t max_lag_us);
void replica_free(struct replica *rp);

/* A replica connection for one request, or NULL when reads must go to the primary. */
PGconn *replica_take(struct replica *rp);

/* Gives it back; a broken connection marks the replica down until the next check. */
void replica_give(struct replica *rp, PGconn *c);

/* pool_set_timeout for a connection of replica_take. */
bool replica_set_timeout(struct replica *rp, PGconn *c, unsigned ms, char *err, size_t errlen);

void replica_status(struct replica *rp, struct replica_status *out);

const char *replica_state_name(enum replica_state s);

#endif
