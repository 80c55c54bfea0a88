/*
 * api/plancache.h: the price plans, read from the database at most every few
 * seconds and shared by the request threads. A new plan is seen within
 * PLANCACHE_TTL_MS of its insertion.
 */
#ifndef API_PLANCACHE_H
#define API_PLANCACHE_H

#include <libpq-fe.h>
#include <stdbool.h>
#include <stddef.h>

#include "meter/plan.h"

#define PLANCACHE_TTL_MS 5000

/* A copy of the plans (caller frees), sorted by effective_from; false with err. */
bool plancache_get(PGconn *c, struct meter_plan **out, size_t *n, char *err, size_t errlen);

#endif
