#include "api/plancache.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "api/queries.h"
#include "common/clock.h"
#include "common/db.h"
#include "common/plans.h"

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static struct meter_plan *cached;
static size_t ncached;
static int64_t loaded_ms = -1;

bool plancache_get(PGconn *c, struct meter_plan **out, size_t *n, char *err, size_t errlen)
{
	bool ok = false;
	pthread_mutex_lock(&mu);
	if (loaded_ms < 0 || clock_us(CLOCK_MONOTONIC) / 1000 - loaded_ms > PLANCACHE_TTL_MS) {
		PGresult *r = q_exec(c, Q_PLANS, 0, NULL);
		struct meter_plan *fresh = NULL;
		size_t nf = 0;
		if (db_check(r, PGRES_TUPLES_OK, "could not read price plans", err, errlen) &&
		    plans_from_result(r, &fresh, &nf, err, errlen)) {
			free(cached);
			cached = fresh;
			ncached = nf;
			loaded_ms = clock_us(CLOCK_MONOTONIC) / 1000;
		}
		PQclear(r);
	}
	if (loaded_ms >= 0) {
		*out = malloc((ncached ? ncached : 1) * sizeof **out);
		if (*out) {
			memcpy(*out, cached, ncached * sizeof **out);
			*n = ncached;
			ok = true;
		}
	}
	pthread_mutex_unlock(&mu);
	return ok;
}
