#include "common/paths.h"

#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/*
 * Compiled in by CMakeLists.txt: the build folder, the checkout's migrations
 * and private cluster, and the path from the installed bindir to the installed
 * migrations ("../share/meter/migrations").
 */
#if !defined(METER_BUILD_DIR) || !defined(METER_SOURCE_MIGRATIONS_DIR) ||                          \
        !defined(METER_PRIVATE_PG_DIR) || !defined(METER_MIGRATIONS_FROM_BINDIR)
#error "common/paths.c needs METER_BUILD_DIR, METER_SOURCE_MIGRATIONS_DIR, METER_PRIVATE_PG_DIR and METER_MIGRATIONS_FROM_BINDIR"
#endif

static pthread_once_t once = PTHREAD_ONCE_INIT;
static bool installed;
static char installed_migrations[PATH_MAX + sizeof METER_MIGRATIONS_FROM_BINDIR + 1];

/* Whether path is dir or lies below it (both already resolved). */
static bool below(const char *path, const char *dir)
{
	size_t n = strlen(dir);
	return strncmp(path, dir, n) == 0 && (path[n] == '/' || path[n] == '\0');
}

static void find(void)
{
	char exe[PATH_MAX], build[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
	if (n <= 0) {
		/* No /proc: treated as run from the build folder, as before. */
		installed = false;
		return;
	}
	exe[n] = '\0';
	/* A build folder that is gone or renamed cannot hold this executable. */
	installed = realpath(METER_BUILD_DIR, build) == NULL || !below(exe, build);
	char *slash = strrchr(exe, '/');
	if (slash)
		*slash = '\0';
	int len = snprintf(installed_migrations, sizeof installed_migrations, "%s/%s", exe,
	                   METER_MIGRATIONS_FROM_BINDIR);
	if (len < 0 || (size_t)len >= sizeof installed_migrations)
		installed_migrations[0] = '\0'; /* cannot happen: sized for PATH_MAX */
}

bool paths_installed(void)
{
	pthread_once(&once, find);
	return installed;
}

const char *paths_migrations_dir(void)
{
	const char *env = getenv("METER_MIGRATIONS_DIR");
	if (env && *env)
		return env;
	if (!paths_installed() || installed_migrations[0] == '\0')
		return METER_SOURCE_MIGRATIONS_DIR;
	return installed_migrations;
}

const char *paths_private_pg_dir(void)
{
	return paths_installed() ? NULL : METER_PRIVATE_PG_DIR;
}
