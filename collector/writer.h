/*
 * collector/writer.h: writing a batch to PostgreSQL, idempotently.
 *
 * One transaction: SET LOCAL ROLE to the collector role, COPY the rows into a
 * temporary staging table (dropped at commit, so it also works through a
 * transaction-pooling PgBouncer), then INSERT ... ON CONFLICT DO NOTHING
 * into samples. A batch written twice counts once.
 */
#ifndef COLLECTOR_WRITER_H
#define COLLECTOR_WRITER_H

#include <libpq-fe.h>
#include <stdbool.h>
#include <stddef.h>

/* Statement and lock timeout of a write, in seconds. */
#define WRITER_TIMEOUT_S 10

/*
 * Writes len bytes of COPY text. role is the role to write as ("" to keep the
 * session's). *inserted gets the rows that were new. On failure rolls back,
 * writes err, and returns false: nothing of the batch is in the database.
 * After a failure the caller should drop the connection: it may be unusable.
 */
bool writer_write(PGconn *c, const char *role, const char *data, size_t len, long *inserted,
                  char *err, size_t errlen);

#endif
