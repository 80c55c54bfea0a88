/*
 * migrations/migrate.h: the migration runner behind "meter migrate".
 *
 * Migrations are the files NNNN_name.sql of one folder, applied in order of
 * NNNN, each in its own transaction together with its row in
 * meter_migrations (version, name, SHA-256 of the file). The whole run holds
 * a session advisory lock, so two runners at once are safe: the second waits,
 * then finds nothing to do. Before applying anything, every applied file is
 * checked against its recorded checksum: a changed file is refused by name,
 * and so is a version the database has but the folder lacks.
 *
 * A migration file must not manage transactions itself (no BEGIN/COMMIT).
 *
 * The numbered files are the history of tables and data. The current
 * definition of every SQL function (trigger functions included) is one file
 * of its own, functions/NAME.sql, named after it: after the numbered files,
 * each whose text differs from what meter_functions records (name, SHA-256)
 * is applied, all in one transaction, each after the changed files it names.
 * A numbered file that names a function (a trigger's, one a data step calls)
 * gets that file's CREATE FUNCTION run first, in its own transaction, with
 * its body unchecked; it must not rely on what that function calls in turn.
 * A function is dropped, or its signature changed, by a numbered file.
 *
 * The numbered files 0001 to 0039 were rewritten once, their function
 * definitions moved to functions/: history.sums holds the checksums they had
 * when releases applied them, which are accepted as theirs.
 */
#ifndef MIGRATIONS_MIGRATE_H
#define MIGRATIONS_MIGRATE_H

#include <libpq-fe.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#define MIGRATE_FILE_MAX (1024 * 1024)

struct migrate_result {
	int applied;   /* numbered files applied by this run */
	int current;   /* numbered files that were already applied */
	int functions; /* function files applied by this run */
};

/*
 * The folder: METER_MIGRATIONS_DIR from the environment, else the installed
 * tree's or, run from the build folder, the checkout's (common/paths.h).
 */
const char *migrate_default_dir(void);

/*
 * Applies the pending migrations of dir. Progress lines ("applied
 * 0001_init.sql") go to progress when it is not NULL. On failure writes one
 * line into err naming the file and the reason; migrations applied before the
 * failing one stay applied, the failing one leaves nothing behind.
 */
bool migrate_run(PGconn *c, const char *dir, FILE *progress, struct migrate_result *res, char *err,
                 size_t errlen);

#endif
