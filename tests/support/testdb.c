#include "tests/support/testdb.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/db.h"
#include "common/keys.h"
#include "migrations/migrate.h"

static PGconn *admin_connect(void)
{
	char err[1024];
	PGconn *c = db_connect(NULL, err, sizeof err);
	if (c == NULL)
		fprintf(stderr, "testdb: %s\n", err);
	return c;
}

/* Drops databases of earlier test processes that are gone. */
static void drop_stale(PGconn *c)
{
	PGresult *r = PQexec(c, "SELECT datname FROM pg_database WHERE datname LIKE 'meter_t_%'");
	if (PQresultStatus(r) != PGRES_TUPLES_OK) {
		PQclear(r);
		return;
	}
	for (int i = 0; i < PQntuples(r); i++) {
		const char *name = PQgetvalue(r, i, 0);
		long pid = strtol(name + strlen("meter_t_"), NULL, 10);
		if (pid > 0 && kill((pid_t)pid, 0) != 0 && errno == ESRCH) {
			char sql[256];
			snprintf(sql, sizeof sql, "DROP DATABASE IF EXISTS \"%s\" WITH (FORCE)",
			         name);
			PQclear(PQexec(c, sql));
		}
	}
	PQclear(r);
}

static void append_kv(char *buf, size_t len, const char *k, const char *v)
{
	size_t o = strlen(buf);
	o += (size_t)snprintf(buf + o, len - o, "%s%s='", o ? " " : "", k);
	for (; *v && o + 3 < len; v++) {
		if (*v == '\'' || *v == '\\')
			buf[o++] = '\\';
		buf[o++] = *v;
	}
	snprintf(buf + o, len - o, "'");
}

/*
 * On a Citus cluster (METER_TEST_CITUS_WORKERS: the workers' connection
 * strings, one per line, as scripts/citus.sh workers prints them; DATABASE_URL
 * the coordinator), a test database is a database of that name on every node,
 * the extension in each, the workers added to the coordinator's: Citus keeps
 * its metadata per database. meter migrate then places the tables.
 */
static const char *citus_workers(void)
{
	const char *w = getenv("METER_TEST_CITUS_WORKERS");
	return w && *w ? w : NULL;
}

/* Runs sql in database db of the server conninfo names (db NULL: its own). */
static bool on_node(const char *conninfo, const char *db, const char *sql)
{
	char url[4096] = "";
	PGconn *base = PQconnectdb(conninfo);
	bool ok = PQstatus(base) == CONNECTION_OK;
	if (ok && db) {
		PQconninfoOption *opts = PQconninfo(base);
		for (PQconninfoOption *o = opts; o && o->keyword; o++)
			if (o->val && *o->val && strcmp(o->keyword, "dbname") != 0)
				append_kv(url, sizeof url, o->keyword, o->val);
		PQconninfoFree(opts);
		append_kv(url, sizeof url, "dbname", db);
	}
	PGconn *c = ok && db ? PQconnectdb(url) : base;
	ok = ok && PQstatus(c) == CONNECTION_OK;
	PGresult *r = ok ? PQexec(c, sql) : NULL;
	ok = ok && (PQresultStatus(r) == PGRES_COMMAND_OK || PQresultStatus(r) == PGRES_TUPLES_OK);
	if (!ok)
		fprintf(stderr, "testdb: on %s: %s: %s", conninfo, sql,
		        PQerrorMessage(PQstatus(c) == CONNECTION_OK ? c : base));
	PQclear(r);
	if (c != base)
		PQfinish(c);
	PQfinish(base);
	return ok;
}

/* Each line of the workers' list in turn: f(line, arg); false at the first that fails. */
static bool each_worker(bool (*f)(const char *, void *), void *arg)
{
	const char *w = citus_workers();
	while (w && *w) {
		size_t n = strcspn(w, "\n");
		char line[1024];
		snprintf(line, sizeof line, "%.*s", (int)(n < sizeof line ? n : sizeof line - 1),
		         w);
		if (line[0] && !f(line, arg))
			return false;
		w += n + (w[n] == '\n');
	}
	return true;
}

static bool worker_create(const char *conninfo, void *name)
{
	char sql[256];
	snprintf(sql, sizeof sql, "CREATE DATABASE \"%s\"", (const char *)name);
	return on_node(conninfo, NULL, sql) && on_node(conninfo, name, "CREATE EXTENSION citus");
}

static bool worker_add(const char *conninfo, void *coordinator)
{
	PGconn *w = PQconnectdb(conninfo);
	bool ok = PQstatus(w) == CONNECTION_OK;
	char sql[256];
	if (ok)
		snprintf(sql, sizeof sql, "SELECT citus_add_node('127.0.0.1', %s)", PQport(w));
	PQfinish(w);
	return ok && testdb_exec(coordinator, sql);
}

static bool worker_drop(const char *conninfo, void *name)
{
	char sql[256];
	snprintf(sql, sizeof sql, "DROP DATABASE IF EXISTS \"%s\" WITH (FORCE)",
	         (const char *)name);
	return on_node(conninfo, NULL, sql);
}

/* The new database t, made a Citus coordinator of databases of its name on the workers. */
static bool citus_join(struct testdb *t)
{
	char sql[256];
	snprintf(sql, sizeof sql, "SELECT citus_set_coordinator_host('127.0.0.1', %s)",
	         PQport(t->conn));
	return each_worker(worker_create, t->name) && testdb_exec(t, "CREATE EXTENSION citus") &&
	       testdb_exec(t, sql) && each_worker(worker_add, t);
}

static bool create(struct testdb *t, const char *tag, const char *template_name)
{
	static int seq;
	memset(t, 0, sizeof *t);
	PGconn *admin = admin_connect();
	if (admin == NULL)
		return false;
	drop_stale(admin);
	snprintf(t->name, sizeof t->name, "meter_t_%d_%s_%d", (int)getpid(), tag, seq++);
	if (citus_workers())
		template_name = NULL; /* a copy would carry the template's placement */
	char sql[256];
	snprintf(sql, sizeof sql, "CREATE DATABASE \"%s\"%s%s%s", t->name,
	         template_name ? " TEMPLATE \"" : "", template_name ? template_name : "",
	         template_name ? "\"" : "");
	PGresult *r = PQexec(admin, sql);
	bool ok = PQresultStatus(r) == PGRES_COMMAND_OK;
	if (!ok)
		fprintf(stderr, "testdb: could not create database %s: %s", t->name,
		        PQerrorMessage(admin));
	PQclear(r);
	if (ok) {
		/* Same server and user, the new database. */
		PQconninfoOption *opts = PQconninfo(admin);
		for (PQconninfoOption *o = opts; o && o->keyword; o++) {
			if (o->val == NULL || *o->val == '\0' || strcmp(o->keyword, "dbname") == 0)
				continue;
			append_kv(t->url, sizeof t->url, o->keyword, o->val);
			if (strcmp(o->keyword, "user") != 0)
				append_kv(t->api_url, sizeof t->api_url, o->keyword, o->val);
		}
		PQconninfoFree(opts);
		append_kv(t->url, sizeof t->url, "dbname", t->name);
		append_kv(t->api_url, sizeof t->api_url, "dbname", t->name);
		append_kv(t->api_url, sizeof t->api_url, "user", "meter_api");
	}
	PQfinish(admin);
	if (!ok)
		return false;
	char err[1024];
	t->conn = db_connect(t->url, err, sizeof err);
	if (t->conn == NULL) {
		fprintf(stderr, "testdb: %s\n", err);
		testdb_drop(t);
		return false;
	}
	if (citus_workers() && !citus_join(t)) {
		testdb_drop(t);
		return false;
	}
	return true;
}

bool testdb_create(struct testdb *t, const char *tag)
{
	return create(t, tag, NULL);
}

bool testdb_create_from(struct testdb *t, const char *tag, const char *template_name)
{
	if (citus_workers())
		return testdb_create_migrated(t, tag);
	return create(t, tag, template_name);
}

bool testdb_create_migrated(struct testdb *t, const char *tag)
{
	char err[1024];
	if (!testdb_create(t, tag))
		return false;
	if (!migrate_run(t->conn, migrate_default_dir(), NULL, NULL, err, sizeof err)) {
		fprintf(stderr, "testdb: %s\n", err);
		testdb_drop(t);
		return false;
	}
	return true;
}

void testdb_drop(struct testdb *t)
{
	if (t->conn)
		PQfinish(t->conn);
	t->conn = NULL;
	if (t->name[0] == '\0')
		return;
	PGconn *admin = admin_connect();
	if (admin) {
		char sql[256];
		snprintf(sql, sizeof sql, "DROP DATABASE IF EXISTS \"%s\" WITH (FORCE)", t->name);
		PGresult *r = PQexec(admin, sql);
		if (PQresultStatus(r) != PGRES_COMMAND_OK)
			fprintf(stderr, "testdb: could not drop %s: %s", t->name,
			        PQerrorMessage(admin));
		PQclear(r);
		PQfinish(admin);
	}
	each_worker(worker_drop, t->name);
	t->name[0] = '\0';
}

/*
 * Runs sql; a deadlock aborts one side, and the statement runs again when it ran on its own
 * (no transaction left open), as the collector's writer sends a batch again. The other
 * side is meter-api's own work (its rollup, its partition upkeep) on the rows a test reads
 * or writes.
 */
static PGresult *exec_again_on_deadlock(struct testdb *t, const char *sql)
{
	PGresult *r = PQexec(t->conn, sql);
	for (int i = 0; i < 3 && PQresultStatus(r) == PGRES_FATAL_ERROR &&
	                PQtransactionStatus(t->conn) == PQTRANS_IDLE;
	     i++) {
		const char *code = PQresultErrorField(r, PG_DIAG_SQLSTATE);
		if (code == NULL || strcmp(code, "40P01") != 0)
			break;
		fprintf(stderr, "deadlock, ran again: %.200s\n", sql);
		PQclear(r);
		r = PQexec(t->conn, sql);
	}
	return r;
}

char *testdb_value(struct testdb *t, const char *sql, char *buf, size_t len)
{
	PGresult *r = exec_again_on_deadlock(t, sql);
	char *out = NULL;
	if (PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) > 0) {
		snprintf(buf, len, "%s", PQgetvalue(r, 0, 0));
		out = buf;
	} else if (PQresultStatus(r) != PGRES_TUPLES_OK) {
		fprintf(stderr, "testdb: %s: %s", sql, PQerrorMessage(t->conn));
	}
	PQclear(r);
	return out;
}

const char *testdb_sqlstate(struct testdb *t, const char *sql, char *buf, size_t len)
{
	PGresult *r = PQexec(t->conn, sql);
	ExecStatusType st = PQresultStatus(r);
	if (st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK)
		snprintf(buf, len, "%s", "");
	else
		snprintf(buf, len, "%s", db_sqlstate(r));
	PQclear(r);
	return buf;
}

bool testdb_exec(struct testdb *t, const char *sql)
{
	PGresult *r = exec_again_on_deadlock(t, sql);
	ExecStatusType st = PQresultStatus(r);
	bool ok = st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK;
	if (!ok)
		fprintf(stderr, "%s: %s", sql, PQerrorMessage(t->conn));
	PQclear(r);
	return ok;
}

bool testdb_key(struct testdb *t, const char *account, char *key)
{
	char err[256];
	int64_t id;
	if (key_create(t->conn, account ? "account" : "admin", account, key, &id, err, sizeof err))
		return true;
	fprintf(stderr, "%s\n", err);
	return false;
}
