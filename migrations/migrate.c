#include "migrations/migrate.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/db.h"
#include "common/paths.h"
#include "meter/decimal.h"

/* pg_advisory_lock key of the runner: "meter" in ASCII. */
#define MIGRATE_LOCK "435761734770"

#define MIGRATE_MAX_FILES 1000

struct mfile {
	int version; /* a numbered file's; -1 for a function file */
	char name[256];
	char checksum[65];
	char *sql;
	bool mentioned; /* scratch: a function file named by the file being applied */
};

/* A numbered file's checksum as a release applied it, before it was rewritten (0040
 * moved every function definition out of the numbered files into functions/). */
struct history_sum {
	int version;
	char checksum[65];
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

/* [a-z0-9_]+.sql: a function file's name, or NULL for a name of another shape. */
static bool function_name(const char *name)
{
	size_t len = strlen(name);
	if (len < 5 || strcmp(name + len - 4, ".sql") != 0)
		return false;
	for (size_t i = 0; i < len - 4; i++)
		if (!((name[i] >= 'a' && name[i] <= 'z') || (name[i] >= '0' && name[i] <= '9') ||
		      name[i] == '_'))
			return false;
	return true;
}

/* Lists and reads the function files of dir/functions, sorted by name; none when the
 * folder is not there. */
static int cmp_name(const void *a, const void *b)
{
	return strcmp(((const struct mfile *)a)->name, ((const struct mfile *)b)->name);
}

static bool load_functions(const char *dir, struct mfile **out, size_t *nout, char *err,
                           size_t errlen)
{
	char sub[4096];
	snprintf(sub, sizeof sub, "%s/functions", dir);
	*out = NULL;
	*nout = 0;
	DIR *d = opendir(sub);
	if (d == NULL && errno == ENOENT)
		return true;
	if (d == NULL) {
		snprintf(err, errlen, "could not open the functions folder \"%s\": %s", sub,
		         strerror(errno));
		return false;
	}
	struct mfile *files = calloc(MIGRATE_MAX_FILES, sizeof *files);
	size_t n = 0;
	bool ok = files != NULL;
	if (!ok)
		snprintf(err, errlen, "could not list functions: out of memory");
	for (struct dirent *e; ok && (e = readdir(d)) != NULL;) {
		size_t len = strlen(e->d_name);
		if (e->d_name[0] == '.' || len < 4 || strcmp(e->d_name + len - 4, ".sql") != 0)
			continue;
		if (!function_name(e->d_name) || len - 4 >= sizeof files[n].name) {
			snprintf(err, errlen,
			         "function file \"%s\" is not named NAME.sql (lowercase letters, "
			         "digits and _): the name of the function it defines",
			         e->d_name);
			ok = false;
		} else if (n == MIGRATE_MAX_FILES) {
			snprintf(err, errlen, "too many function files in \"%s\"", sub);
			ok = false;
		} else {
			files[n].version = -1;
			memcpy(files[n].name, e->d_name, len - 4);
			files[n].name[len - 4] = '\0';
			ok = read_file(sub, e->d_name, &files[n++].sql, err, errlen);
		}
	}
	closedir(d);
	if (!ok) {
		if (files)
			free_files(files, n);
		return false;
	}
	qsort(files, n, sizeof *files, cmp_name);
	*out = files;
	*nout = n;
	return true;
}

/* The lines "NNNN CHECKSUM NAME" of dir/history.sums; none when there is no such file. */
static bool load_history(const char *dir, struct history_sum **out, size_t *nout, char *err,
                         size_t errlen)
{
	char path[4096], *text = NULL;
	struct stat st;
	*out = NULL;
	*nout = 0;
	snprintf(path, sizeof path, "%s/history.sums", dir);
	if (stat(path, &st) != 0 && errno == ENOENT)
		return true;
	if (!read_file(dir, "history.sums", &text, err, errlen))
		return false;
	struct history_sum *h = calloc(MIGRATE_MAX_FILES, sizeof *h);
	size_t n = 0;
	bool ok = h != NULL;
	int line = 0;
	for (char *save = NULL, *l = ok ? strtok_r(text, "\n", &save) : NULL; ok && l;
	     l = strtok_r(NULL, "\n", &save)) {
		line++;
		if (l[0] == '#' || l[0] == '\0')
			continue;
		int v = 0;
		char sum[65] = "";
		if (n == MIGRATE_MAX_FILES || sscanf(l, "%4d %64[0-9a-f]", &v, sum) != 2 ||
		    strlen(sum) != 64) {
			snprintf(err, errlen, "\"%s\" line %d is not \"NNNN SHA-256 NAME\"", path,
			         line);
			ok = false;
			break;
		}
		h[n].version = v;
		memcpy(h[n++].checksum, sum, 65);
	}
	if (h == NULL)
		snprintf(err, errlen, "could not read \"%s\": out of memory", path);
	free(text);
	if (!ok) {
		free(h);
		return false;
	}
	*out = h;
	*nout = n;
	return true;
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

/* Whether sql names name as a word outside its "--" comments. */
static bool mentions(const char *sql, const char *name)
{
	size_t n = strlen(name);
	for (const char *p = sql; *p;) {
		if (p[0] == '-' && p[1] == '-') {
			p += strcspn(p, "\n");
			continue;
		}
		bool word = (p == sql || !(isalnum((unsigned char)p[-1]) || p[-1] == '_')) &&
		            strncmp(p, name, n) == 0 &&
		            !(isalnum((unsigned char)p[n]) || p[n] == '_');
		if (word)
			return true;
		p++;
	}
	return false;
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
 * Runs one file's SQL, statement by statement in the caller's transaction;
 * false with err naming it and the line that failed. One statement at a time
 * because Citus passes the text of a command it forwards to its workers, and
 * a text of several commands is refused there ("cannot insert multiple
 * commands into a prepared statement").
 */
static bool run_sql(PGconn *c, const char *label, const char *sql, char *err, size_t errlen)
{
	for (const char *at = sql; *at;) {
		const char *end = statement_end(at);
		char *one = strndup(at, (size_t)(end - at));
		if (one == NULL) {
			snprintf(err, errlen, "%s: out of memory", label);
			return false;
		}
		PGresult *r = PQexec(c, one);
		ExecStatusType st = PQresultStatus(r);
		bool ok = r != NULL && (st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK ||
		                        st == PGRES_EMPTY_QUERY);
		if (!ok) {
			char what[512];
			int line = line_of(
			        one, r ? PQresultErrorField(r, PG_DIAG_STATEMENT_POSITION) : NULL);
			if (line) {
				for (const char *p = sql; p < at; p++)
					line += *p == '\n';
				snprintf(what, sizeof what, "%s failed at line %d", label, line);
			} else {
				snprintf(what, sizeof what, "%s failed", label);
			}
			db_check(r, PGRES_COMMAND_OK, what, err, errlen);
		}
		PQclear(r);
		free(one);
		if (!ok)
			return false;
		at = end;
	}
	return true;
}

/*
 * Runs only the CREATE FUNCTION statements of a function file: what a numbered
 * file that names the function needs of it (the roles its grants name may come
 * in that numbered file; its privileges and settings follow with the whole file
 * after the numbered files).
 */
static bool create_only(PGconn *c, const char *label, const char *sql, char *err, size_t errlen)
{
	bool ok = true;
	for (const char *at = sql; ok && *at;) {
		const char *end = statement_end(at), *p = at;
		for (;;) { /* past blanks and comments */
			p += strspn(p, " \t\r\n");
			if (p[0] != '-' || p[1] != '-')
				break;
			p += strcspn(p, "\n");
		}
		if (strncasecmp(p, "CREATE OR REPLACE FUNCTION", 26) == 0 ||
		    strncasecmp(p, "CREATE FUNCTION", 15) == 0) {
			char *one = strndup(at, (size_t)(end - at));
			if (one == NULL) {
				snprintf(err, errlen, "%s: out of memory", label);
				return false;
			}
			ok = run_sql(c, label, one, err, errlen);
			free(one);
		}
		at = end;
	}
	return ok;
}

/*
 * Applies numbered file f in its own transaction with its row in
 * meter_migrations. The function files it names (a trigger's function, a
 * function a data step calls) are created first (create_only), as they are
 * now, with their bodies unchecked: the tables of later migrations may not be
 * there yet. A numbered file must not rely on what those functions call in
 * turn.
 */
static bool apply(PGconn *c, const struct mfile *f, const struct mfile *funcs, size_t nfuncs,
                  char *err, size_t errlen)
{
	char what[600];
	PGresult *r = NULL;
	bool ok = false, unchecked = false;
	if (!db_exec(c, "BEGIN", err, errlen))
		return false;
	/* Under Citus, a command on a distributed type (ALTER TYPE) is refused after
	 * a parallel one on a distributed table in the same transaction: a
	 * migration's commands go over one connection per node instead. */
	if (!db_exec(c,
	             "DO $$BEGIN IF EXISTS (SELECT FROM pg_extension WHERE extname = 'citus') "
	             "THEN PERFORM set_config('citus.multi_shard_modify_mode', 'sequential', "
	             "true); END IF; END$$",
	             err, errlen))
		goto out;
	for (size_t i = 0; i < nfuncs; i++) {
		if (!mentions(f->sql, funcs[i].name))
			continue;
		if (!unchecked && !db_exec(c, "SET LOCAL check_function_bodies = off", err, errlen))
			goto out;
		unchecked = true;
		snprintf(what, sizeof what, "function %s, which migration %s names,", funcs[i].name,
		         f->name);
		if (!create_only(c, what, funcs[i].sql, err, errlen))
			goto out;
	}
	if (unchecked && !db_exec(c, "SET LOCAL check_function_bodies = on", err, errlen))
		goto out;
	snprintf(what, sizeof what, "migration %s", f->name);
	if (!run_sql(c, what, f->sql, err, errlen))
		goto out;
	if (PQtransactionStatus(c) != PQTRANS_INTRANS) {
		snprintf(err, errlen,
		         "migration %s ended its transaction itself; migrations must not "
		         "contain BEGIN, COMMIT or ROLLBACK",
		         f->name);
		goto out;
	}
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

/*
 * Applies the function files whose text differs from what meter_functions
 * records of them (or that it does not record), in one transaction, each
 * after the changed files it names, with its row; and forgets the rows of
 * files that are gone (a numbered migration drops their functions).
 */
static bool apply_functions(PGconn *c, struct mfile *funcs, size_t n, FILE *progress, int *applied,
                            char *err, size_t errlen)
{
	bool *todo = calloc(n ? n : 1, sizeof *todo), ok = false;
	PGresult *r = NULL;
	*applied = 0;
	if (todo == NULL) {
		snprintf(err, errlen, "could not apply the functions: out of memory");
		return false;
	}
	for (size_t i = 0; i < n; i++)
		todo[i] = true;
	r = PQexec(c, "SELECT name, checksum FROM meter_functions");
	if (!db_check(r, PGRES_TUPLES_OK, "could not read applied functions", err, errlen))
		goto out;
	size_t left = n;
	for (int k = 0; k < PQntuples(r); k++)
		for (size_t i = 0; i < n; i++)
			if (todo[i] && strcmp(funcs[i].name, PQgetvalue(r, k, 0)) == 0 &&
			    strcmp(funcs[i].checksum, PQgetvalue(r, k, 1)) == 0) {
				todo[i] = false;
				left--;
			}
	PQclear(r);
	r = NULL;
	if (!db_exec(c, "BEGIN", err, errlen))
		goto out;
	while (left > 0) {
		/* the first by name whose changed dependencies are applied; in a cycle, the first
		 */
		size_t pick = n;
		for (size_t i = 0; i < n && pick == n; i++) {
			bool ready = todo[i];
			for (size_t k = 0; ready && k < n; k++)
				ready = k == i || !todo[k] ||
				        !mentions(funcs[i].sql, funcs[k].name);
			if (ready)
				pick = i;
		}
		for (size_t i = 0; i < n && pick == n; i++)
			if (todo[i])
				pick = i;
		char what[600];
		snprintf(what, sizeof what, "function %s (functions/%s.sql)", funcs[pick].name,
		         funcs[pick].name);
		if (!run_sql(c, what, funcs[pick].sql, err, errlen))
			goto out;
		const char *p[] = {funcs[pick].name, funcs[pick].checksum};
		r = PQexecParams(c,
		                 "INSERT INTO meter_functions (name, checksum) VALUES ($1, $2) "
		                 "ON CONFLICT (name) DO UPDATE SET checksum = EXCLUDED.checksum, "
		                 "applied_at = now()",
		                 2, NULL, p, NULL, NULL, 0);
		snprintf(what, sizeof what, "could not record function %s", funcs[pick].name);
		if (!db_check(r, PGRES_COMMAND_OK, what, err, errlen))
			goto out;
		PQclear(r);
		r = NULL;
		todo[pick] = false;
		left--;
		(*applied)++;
		if (progress)
			fprintf(progress, "applied functions/%s.sql\n", funcs[pick].name);
	}
	/* rows of files that are gone */
	char list[MIGRATE_MAX_FILES * 8] = "{";
	for (size_t i = 0, at = 1; i < n && at < sizeof list - 1; i++)
		at += (size_t)snprintf(list + at, sizeof list - at, "%s%s", i ? "," : "",
		                       funcs[i].name);
	strncat(list, "}", sizeof list - strlen(list) - 1);
	const char *lp[] = {list};
	r = PQexecParams(c, "DELETE FROM meter_functions WHERE name <> ALL ($1::text[])", 1, NULL,
	                 lp, NULL, NULL, 0);
	if (!db_check(r, PGRES_COMMAND_OK, "could not forget functions that are gone", err, errlen))
		goto out;
	ok = db_exec(c, "COMMIT", err, errlen);
out:
	PQclear(r);
	if (!ok && PQtransactionStatus(c) != PQTRANS_IDLE)
		PQclear(PQexec(c, "ROLLBACK"));
	free(todo);
	return ok;
}

/* Checks the applied migrations against the files; none may differ or be missing. */
static bool verify_applied(PGconn *c, struct mfile *files, size_t n, const struct history_sum *hist,
                           size_t nhist, bool *applied, int *current, char *err, size_t errlen)
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
		bool released = false; /* as a release applied it, before it was rewritten */
		for (size_t h = 0; h < nhist && !released; h++)
			released = hist[h].version == files[k].version &&
			           strcmp(hist[h].checksum, PQgetvalue(r, i, 2)) == 0;
		if (!released && strcmp(files[k].checksum, PQgetvalue(r, i, 2)) != 0) {
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
	struct mfile *files = NULL, *funcs = NULL;
	struct history_sum *hist = NULL;
	bool *applied = NULL, locked = false, ok = false;
	size_t n = 0, nfuncs = 0, nhist = 0;
	struct migrate_result out = {0};

	if (!load_files(dir, &files, &n, err, errlen))
		return false;
	if (!load_functions(dir, &funcs, &nfuncs, err, errlen) ||
	    !load_history(dir, &hist, &nhist, err, errlen))
		goto out;
	applied = calloc(n ? n : 1, sizeof *applied);
	if (applied == NULL) {
		snprintf(err, errlen, "could not run migrations: out of memory");
		goto out;
	}
	for (size_t i = 0; i < n; i++)
		if (!checksum(c, &files[i], err, errlen))
			goto out;
	for (size_t i = 0; i < nfuncs; i++)
		if (!checksum(c, &funcs[i], err, errlen))
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
	             err, errlen) ||
	    !db_exec(c,
	             "CREATE TABLE IF NOT EXISTS meter_functions ("
	             " name text PRIMARY KEY,"
	             " checksum text NOT NULL,"
	             " applied_at timestamptz NOT NULL DEFAULT now())",
	             err, errlen))
		goto out;
	if (!verify_applied(c, files, n, hist, nhist, applied, &out.current, err, errlen))
		goto out;
	for (size_t i = 0; i < n; i++) {
		if (applied[i])
			continue;
		if (!apply(c, &files[i], funcs, nfuncs, err, errlen))
			goto out;
		out.applied++;
		if (progress)
			fprintf(progress, "applied %s\n", files[i].name);
	}
	if (!apply_functions(c, funcs, nfuncs, progress, &out.functions, err, errlen))
		goto out;
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
	free(hist);
	free_files(files, n);
	if (funcs)
		free_files(funcs, nfuncs);
	return ok;
}
