/*
 * tests/support/cluster.h: a PostgreSQL cluster of a test's own
 * (scripts/pg.sh with METER_PG_DIR in a temporary folder), for tests that
 * stop, kill or restart the database under our programs without disturbing
 * the shared one.
 */
#ifndef TESTS_SUPPORT_CLUSTER_H
#define TESTS_SUPPORT_CLUSTER_H

#include <stdbool.h>
#include <stddef.h>

/* Makes a temporary folder /tmp/meter-TAG-XXXXXX that the cluster's server (user postgres) can
 * enter. */
bool test_tmpdir(char *path, size_t len, const char *tag);

/* Runs "scripts/pg.sh CMD" ("start", "stop --immediate", ...) for the cluster in dir. */
bool cluster_pg(const char *dir, const char *cmd);

/* Starts the cluster in dir and migrates it with meter_bin; writes its DATABASE_URL. */
bool cluster_start_migrated(const char *dir, const char *meter_bin, char *url, size_t len);

/* Stops the cluster and removes its folder (quietly when there is none). */
void cluster_destroy(const char *dir);

/* Sleeps ms milliseconds, through signals. */
void sleep_ms(int ms);

#endif
