#include "migrations/migrate.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/db.h"
#include "common/paths.h"
#include "meter/decimal.h"

/* pg_advisory_lock key of the runner: "meter" in ASCII. */
#define MIGRATE_LOCK "435761734770"

#define MIGRATE_MAX_FILES 1000

struct mfile {
	int version;
	char name[256];
	char checksum[65];
	char *sql;
};

const char *migrate_default_dir(void)
{
	return paths_migrations_dir();
}

/* NNNN_[a-z0-9_]+.sql: the version, or -1 for a name of another shape. */
static int file_version(const char *name)
{
	size_t len = strlen(name);
	if (len < 10 || strcmp(name + len - 4, ".sql") != 0 || name[4] != '_')
		return -1;
	for (size_t i = 5; i < len - 4; i++)
		if (!((name[i] >= 'a' && name[i] <= 'z') || (name[i] >= '0' && name[i] <= '9') ||
		      name[i] == '_'))
			return -1;
	int v = 0;
	for (int i = 0; i < 4; i++) {
		if (name[i] < '0' || name[i] > '9')
			return -1;
		v = v * 10 + (name[i] - '0');
	}
	return v;
}

static bool read_file(const char *dir, const char *name, char **out, char *err, size_t errlen)
{
	char path[4096];
	struct stat st;
	char *buf = NULL;
	bool ok = false;
	snprintf(path, sizeof path, "%s/%s", dir, name);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0 || fstat(fd, &st) != 0) {
		snprintf(err, errlen, "could not open migration \"%s\": %s", path, strerror(errno));
		goto out;
	}
	if (st.st_size > MIGRATE_FILE_MAX) {
		snprintf(err, errlen, "migration \"%s\" is larger than %d bytes", path,
		         MIGRATE_FILE_MAX);
		goto out;
	}
	buf = malloc((size_t)st.st_size + 1);
	if (buf == NULL) {
		snprintf(err, errlen, "could not read migration \"%s\": out of memory", path);
		goto out;
	}
	size_t got = 0;
	while (got < (size_t)st.st_size) {
		ssize_t n = read(fd, buf + got, (size_t)st.st_size - got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			snprintf(err, errlen, "could not read migration \"%s\": %s", path,
			         n < 0 ? strerror(errno) : "file shrank while being read");
			goto out;
		}
		got += (size_t)n;
	}
	buf[got] = '\0';
	if (strlen(buf) != got) {
		snprintf(err, errlen, "migration \"%s\" contains a NUL byte", path);
		goto out;
	}
	*out = buf;
	buf = NULL;
	ok = true;
out:
	free(buf);
	if (fd >= 0)
		close(fd);
	return ok;
}

static int cmp_mfile(const void *a, const void *b)
{
	return ((const struct mfile *)a)->version - ((const struct mfile *)b)->version;
}

static void free_files(struct mfile *f, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(f[i].sql);
	free(f);
}

/* Lists, reads and sorts the migration files of dir. */
static bool load_files(const char *dir, struct mfile **out, size_t *nout, char *err, size_t errlen)
{
	DIR *d = opendir(dir);
	struct mfile *files = NULL;
	size_t n = 0;
	bool ok = false;
	if (d == NULL) {
		snprintf(err, errlen, "could not open migrations folder \"%s\": %s", dir,
		         strerror(errno));
		return false;
	}
	files = calloc(MIGRATE_MAX_FILES, sizeof *files);
	if (files == NULL) {
		snprintf(err, errlen, "could not list migrations: out of memory");
		goto out;
	}
	struct dirent *e;
	while ((e = readdir(d)) != NULL) {
		size_t len = strlen(e->d_name);
		if (len < 4 || strcmp(e->d_name + len - 4, ".sql") != 0)
			continue;
		int v = file_version(e->d_name);
		if (v < 0) {
			snprintf(err, errlen,
			         "migration file \"%s\" is not named NNNN_name.sql (four digits, "
			         "then lowercase letters, digits and _)",
			         e->d_name);
			goto out;
		}
		if (n == MIGRATE_MAX_FILES || len >= sizeof files[n].name) {
			snprintf(err, errlen, "too many migrations in \"%s\"", dir);
			goto out;
		}
		files[n].version = v;
		memcpy(files[n].name, e->d_name, len + 1);
		n++;
		if (!read_file(dir, e->d_name, &files[n - 1].sql, err, errlen))
			goto out;
	}
	qsort(files, n, sizeof *files, cmp_mfile);
	for (size_t i = 1; i < n; i++)
		if (files[i].version == files[i - 1].version) {
			snprintf(err, errlen, "migrations \"%s\" and \"%s\" have the same number",
			         files[i - 1].name, files[i].name);
			goto out;
		}
	*out = files;
	*nout = n;
	files = NULL;
	ok = true;
out:
	if (files)
		free_files(files, n);
	closedir(d);
	return ok;
}

/* The SHA-256 of each file, computed by the server (no crypto code of ours). */
static bool checksum(PGconn *c, struct mfile *f, char *err, size_t errlen)
{
	const char *params[] = {f->sql};
	int lens[] = {(int)strlen(f->sql)};
	int fmts[] = {1};
	PGresult *r = PQexecParams(c, "SELECT encode(sha256($1::bytea), 'hex')", 1, NULL, params,
	                           lens, fmts, 0);
	bool ok = db_check(r, PGRES_TUPLES_OK, "could not compute a checksum", err, errlen);
	if (ok)
		snprintf(f->checksum, sizeof f->checksum, "%s", PQgetvalue(r, 0, 0));
	PQclear(r);
	return ok;
}

/* Line number of a 1-based character position in sql, for error messages. */
static int line_of(const char *sql, const char *pos)
{
	int64_t p = 0;
	if (pos == NULL || meter_decimal_parse(pos, 0, false, &p) != METER_OK)
		return 0;
	int line = 1;
	for (int64_t i = 0; i < p - 1 && sql[i]; i++)
		if (sql[i] == '\n')
			line++;
	return line;
}

static bool apply(PGconn *c, const struct mfile *f, char *err, size_t errlen)
{
	char what[512];
	PGresult *r = NULL;
	bool ok = false;
	if (!db_exec(c, "BEGIN", err, errlen))
		return false;
	r = PQexec(c, f->sql);
	if (r == NULL ||
	    (PQresultStatus(r) != PGRES_COMMAND_OK && PQresultStatus(r) != PGRES_TUPLES_OK)) {
		int line = line_of(f->sql,
		                   r ? PQresultErrorField(r, PG_DIAG_STATEMENT_POSITION) : NULL);
		if (line)
			snprintf(what, sizeof what, "migration %s failed at line %d", f->name,
			         line);
		else
			snprintf(what, sizeof what, "migration %s failed", f->name);
		db_check(r, PGRES_COMMAND_OK, what, err, errlen);
		goto out;
	}
	if (PQtransactionStatus(c) != PQTRANS_INTRANS) {
		snprintf(err, errlen,
		         "migration %s ended its transaction itself; migrations must not "
		         "contain BEGIN, COMMIT or ROLLBACK",
		         f->name);
		goto out;
	}
	PQclear(r);
	char version[16];
	snprintf(version, sizeof version, "%d", f->version);
	const char *params[] = {version, f->name, f->checksum};
	r = PQexecParams(c,
	                 "INSERT INTO meter_migrations (version, name, checksum) "
	                 "VALUES ($1, $2, $3)",
	                 3, NULL, params, NULL, NULL, 0);
	snprintf(what, sizeof what, "could not record migration %s", f->name);
	if (!db_check(r, PGRES_COMMAND_OK, what, err, errlen))
		goto out;
	PQclear(r);
	r = NULL;
	ok = db_exec(c, "COMMIT", err, errlen);
out:
	PQclear(r);
	if (!ok && PQtransactionStatus(c) != PQTRANS_IDLE) {
		PGresult *rb = PQexec(c, "ROLLBACK");
		PQclear(rb);
	}
	return ok;
}

/* Checks the applied migrations against the files; none may differ or be missing. */
static bool verify_applied(PGconn *c, struct mfile *files, size_t n, bool *applied, int *current,
                           char *err, size_t errlen)
{
	PGresult *r = PQexec(c, "SELECT version, name, checksum FROM meter_migrations "
	                        "ORDER BY version");
	bool ok = false;
	if (!db_check(r, PGRES_TUPLES_OK, "could not read applied migrations", err, errlen))
		goto out;
	for (int i = 0; i < PQntuples(r); i++) {
		int64_t v = 0;
		(void)meter_decimal_parse(PQgetvalue(r, i, 0), 0, false, &v);
		size_t k;
		for (k = 0; k < n && files[k].version != v; k++)
			;
		if (k == n) {
			snprintf(err, errlen,
			         "the database has migration %s applied, which is not among the "
			         "files; is this meter older than the database?",
			         PQgetvalue(r, i, 1));
			goto out;
		}
		if (strcmp(files[k].checksum, PQgetvalue(r, i, 2)) != 0) {
			snprintf(err, errlen,
			         "migration %s was changed after it was applied (recorded "
			         "checksum %.12s, file now %.12s); put the change in a new "
			         "migration instead",
			         files[k].name, PQgetvalue(r, i, 2), files[k].checksum);
			goto out;
		}
		applied[k] = true;
		(*current)++;
	}
	ok = true;
out:
	PQclear(r);
	return ok;
}

/*
 * The end of the statement that starts at sql: past its ';', or the end of
 * the text. Quotes ('...', "..."), dollar quotes ($$...$$, $tag$...$tag$) and
 * comments (-- to the line's end) are skipped, so a ';' in them ends nothing.
 */
static const char *statement_end(const char *sql)
{
	const char *p = sql;
	while (*p) {
		if (p[0] == '-' && p[1] == '-') {
			p += strcspn(p, "\n");
		} else if (*p == '\'' || *p == '"') {
			const char *q = strchr(p + 1, *p);
			p = q ? q + 1 : p + strlen(p);
		} else if (*p == '$') {
			size_t n = 1 + strspn(p + 1, "abcdefghijklmnopqrstuvwxyz_");
			if (p[n] != '$') {
				p++;
				continue;
			}
			char tag[40];
			if (n + 2 > sizeof tag)
				return p + strlen(p);
			memcpy(tag, p, n + 1);
			tag[n + 1] = '\0';
			const char *q = strstr(p + n + 1, tag);
			p = q ? q + n + 1 : p + strlen(p);
		} else if (*p++ == ';') {
			return p;
		}
	}
	return p;
}

/*
 * On a Citus coordinator with workers, meter's tables are placed once, after
 * the numbered migrations (citus/place.sql of dir, in one transaction): when
 * the citus extension is there, a worker is added, and accounts is not
 * distributed yet. Anywhere else, nothing. *placed says whether it did.
 */
static bool citus_place(PGconn *c, const char *dir, bool *placed, char *err, size_t errlen)
{
	*placed = false;
	PGresult *r =
	        PQexec(c, "SELECT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'citus')");
	if (!db_check(r, PGRES_TUPLES_OK, "could not look for Citus", err, errlen)) {
		PQclear(r);
		return false;
	}
	bool citus = strcmp(PQgetvalue(r, 0, 0), "t") == 0;
	PQclear(r);
	if (!citus)
		return true;
	r = PQexec(c, "SELECT EXISTS (SELECT 1 FROM pg_dist_node WHERE groupid > 0 "
	              "AND noderole = 'primary') AND NOT EXISTS (SELECT 1 FROM pg_dist_partition "
	              "WHERE logicalrelid = 'accounts'::regclass)");
	if (!db_check(r, PGRES_TUPLES_OK, "could not read Citus's nodes and tables", err, errlen)) {
		PQclear(r);
		return false;
	}
	bool due = strcmp(PQgetvalue(r, 0, 0), "t") == 0;
	PQclear(r);
	if (!due)
		return true;
	char sub[4096], *sql = NULL;
	snprintf(sub, sizeof sub, "%s/citus", dir);
	if (!read_file(sub, "place.sql", &sql, err, errlen))
		return false;
	/* Statement by statement, as Citus wants its calls (it cannot place every table in
	 * one transaction): a failure leaves the tables placed so far, and says where. */
	bool ok = true;
	for (const char *at = sql; ok && *at;) {
		const char *end = statement_end(at);
		char *one = strndup(at, (size_t)(end - at));
		if (one == NULL) {
			snprintf(err, errlen, "could not place the tables on Citus: out of memory");
			ok = false;
			break;
		}
		r = PQexec(c, one);
		ExecStatusType st = PQresultStatus(r);
		ok = st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK || st == PGRES_EMPTY_QUERY;
		if (!ok) {
			int line = 1;
			for (const char *p = sql; p < at + strspn(at, " \t\n"); p++)
				line += *p == '\n';
			char what[128];
			snprintf(what, sizeof what,
			         "placing the tables on Citus (citus/place.sql) failed at line %d",
			         line);
			db_check(r, PGRES_COMMAND_OK, what, err, errlen);
		}
		PQclear(r);
		free(one);
		at = end;
	}
	free(sql);
	*placed = ok;
	return ok;
}

bool migrate_run(PGconn *c, const char *dir, FILE *progress, struct migrate_result *res, char *err,
                 size_t errlen)
{
	struct mfile *files = NULL;
	bool *applied = NULL, locked = false, ok = false;
	size_t n = 0;
	struct migrate_result out = {0};

	if (!load_files(dir, &files, &n, err, errlen))
		return false;
	applied = calloc(n ? n : 1, sizeof *applied);
	if (applied == NULL) {
		snprintf(err, errlen, "could not run migrations: out of memory");
		goto out;
	}
	for (size_t i = 0; i < n; i++)
		if (!checksum(c, &files[i], err, errlen))
			goto out;
	PGresult *lr = PQexec(c, "SELECT pg_advisory_lock(" MIGRATE_LOCK ")");
	locked = db_check(lr, PGRES_TUPLES_OK, "could not take the migration lock", err, errlen);
	PQclear(lr);
	if (!locked)
		goto out;
	if (!db_exec(c,
	             "CREATE TABLE IF NOT EXISTS meter_migrations ("
	             " version integer PRIMARY KEY,"
	             " name text NOT NULL,"
	             " checksum text NOT NULL,"
	             " applied_at timestamptz NOT NULL DEFAULT now())",
	             err, errlen))
		goto out;
	if (!verify_applied(c, files, n, applied, &out.current, err, errlen))
		goto out;
	for (size_t i = 0; i < n; i++) {
		if (applied[i])
			continue;
		if (!apply(c, &files[i], err, errlen))
			goto out;
		out.applied++;
		if (progress)
			fprintf(progress, "applied %s\n", files[i].name);
	}
	bool placed;
	if (!citus_place(c, dir, &placed, err, errlen))
		goto out;
	if (placed && progress)
		fprintf(progress, "placed the tables on Citus (citus/place.sql)\n");
	if (res)
		*res = out;
	ok = true;
out:
	if (locked) {
		PGresult *r = PQexec(c, "SELECT pg_advisory_unlock(" MIGRATE_LOCK ")");
		PQclear(r);
	}
	free(applied);
	free_files(files, n);
	return ok;
}
