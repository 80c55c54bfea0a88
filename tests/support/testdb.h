/*
 * tests/support/testdb.h: a fresh, empty database per test program, in the
 * PostgreSQL that DATABASE_URL (or the private cluster) names, dropped at the
 * end. Databases left by a test that crashed are dropped by the next run:
 * their names carry the pid of the process that made them.
 */
#ifndef TESTS_SUPPORT_TESTDB_H
#define TESTS_SUPPORT_TESTDB_H

#include <libpq-fe.h>
#include <stdbool.h>

struct testdb {
	char name[64];
	char url[4096]; /* keyword/value connection string of the new database */
	/* the same as meter_api, the role meter-api logs in as (migration 0043): the
	 * cluster must let it in as it lets the owner (trust on the private cluster's
	 * socket) */
	char api_url[4096];
	PGconn *conn; /* a connection to it, as the owner */
};

/* Creates the database; prints why and returns false when it cannot. */
bool testdb_create(struct testdb *t, const char *tag);

/*
 * Creates it as a copy of the database named template (which must have no
 * connection open): a migrated one copied in a fraction of migrating.
 */
bool testdb_create_from(struct testdb *t, const char *tag, const char *template_name);

/* Creates and migrates it with the checkout's migrations. */
bool testdb_create_migrated(struct testdb *t, const char *tag);

/* Closes the connection and drops the database. Safe on a zeroed struct. */
void testdb_drop(struct testdb *t);

/* Runs SQL on t->conn; prints the error and returns false when it fails. */
bool testdb_exec(struct testdb *t, const char *sql);

/* Makes an API key (admin when account is NULL) into key (KEY_LEN + 1 bytes). */
bool testdb_key(struct testdb *t, const char *account, char *key);

/* Runs SQL on t->conn and returns the first column of the first row, or NULL. */
char *testdb_value(struct testdb *t, const char *sql, char *buf, size_t len);

/* The SQLSTATE running sql gives ("" when it succeeds). */
const char *testdb_sqlstate(struct testdb *t, const char *sql, char *buf, size_t len);

#endif
