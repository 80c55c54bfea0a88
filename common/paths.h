/*
 * common/paths.h: where a program finds, at run time, the files it ships with.
 *
 * A program started from its build folder (its executable below
 * METER_BUILD_DIR, as the tests, the benches and scripts/run.sh start them)
 * uses the checkout it was built from: its migrations/ and its private cluster
 * (.pg, scripts/pg.sh). Any other copy is an installed one and uses the
 * installed tree, found from the executable's own path: with the default
 * GNUInstallDirs layout, BINDIR/../share/meter/migrations.
 *
 * Why from the executable and not an absolute path compiled in: the build is
 * configured with one prefix (/usr/local unless told), but cpack packages
 * it under another (/usr for the .deb) and cmake --install --prefix can pick
 * a third; the path from the bindir to the datadir is the same under all of
 * them. The environment (METER_MIGRATIONS_DIR, METER_PG_DIR, DATABASE_URL)
 * still wins over both.
 */
#ifndef COMMON_PATHS_H
#define COMMON_PATHS_H

#include <stdbool.h>

/* True unless the running executable lies in the build folder it was built in. */
bool paths_installed(void);

/*
 * The migrations folder: METER_MIGRATIONS_DIR from the environment, else the
 * installed tree's (installed programs) or the checkout's (the build folder's).
 * Never NULL; the folder may not exist (migrate_run says so).
 */
const char *paths_migrations_dir(void);

/* The private cluster's folder of the checkout, or NULL for an installed program. */
const char *paths_private_pg_dir(void);

#endif
