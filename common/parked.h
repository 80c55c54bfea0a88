/*
 * common/parked.h: the rollup's marks that are set aside, for the operator.
 *
 * No sandbox holds up another (rule 10): a sandbox the rollup cannot rate is
 * set aside with its reason (rollup/store.c, rollup/take.c, migrations/0014)
 * and the queue goes on. Its samples are kept; new samples, its registration
 * or a retry here wake it, and it is rated as soon as what stopped it is
 * fixed.
 */
#ifndef COMMON_PARKED_H
#define COMMON_PARKED_H

#include <libpq-fe.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct parked_row {
	char sandbox[160];
	char account[160]; /* "" when neither a registration nor a sample names one */
	char kind[16];     /* "unregistered" or "parked" */
	char reason[600];
	int64_t since_us;
	int64_t samples; /* samples from the mark on, waiting to be rated */
};

/* Every mark set aside, oldest first; *rows malloc'd (free it), *n of them. */
bool parked_list(PGconn *c, struct parked_row **rows, size_t *n, char *err, size_t errlen);

/*
 * Wakes the mark of sandbox (NULL: every one set aside) for the rollup's next
 * pass; *woken says how many. A sandbox with no mark set aside wakes nothing.
 */
bool parked_retry(PGconn *c, const char *sandbox, int64_t *woken, char *err, size_t errlen);

#endif
