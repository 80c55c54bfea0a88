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
 */
#ifndef MIGRATIONS_MIGRATE_H
#define MIGRATIONS_MIGRATE_H

#include <libpq-fe.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#define MIGRATE_FILE_MAX (1024 * 1024)

struct migrate_result {
	int applied; /* files applied by this run */
	int current; /* files that were already applied */
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
