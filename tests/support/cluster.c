#include "tests/support/cluster.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <time.h>

#include "tests/support/run.h"

bool test_tmpdir(char *path, size_t len, const char *tag)
{
	snprintf(path, len, "/tmp/meter-%s-XXXXXX", tag);
	return mkdtemp(path) != NULL && chmod(path, 0711) == 0;
}

bool cluster_pg(const char *dir, const char *cmd)
{
	char line[1024];
	snprintf(line, sizeof line, "METER_PG_DIR='%s' bash '%s/scripts/pg.sh' %s >/dev/null", dir,
	         METER_SOURCE_DIR, cmd);
	return system(line) == 0;
}

bool cluster_start_migrated(const char *dir, const char *meter_bin, char *url, size_t len)
{
	if (!cluster_pg(dir, "start"))
		return false;
	snprintf(url, len, "postgresql:///meter?host=%s/run&user=meter", dir);
	struct run_result *res = malloc(sizeof *res);
	if (res == NULL)
		return false;
	const char *argv[] = {meter_bin, "migrate", NULL};
	run_program(argv, url, res);
	bool ok = res->status == 0;
	if (!ok)
		fprintf(stderr, "meter migrate: %s", res->err);
	free(res);
	return ok;
}

void cluster_destroy(const char *dir)
{
	if (dir[0] && !cluster_pg(dir, "destroy"))
		fprintf(stderr, "could not remove the test cluster %s\n", dir);
}

void sleep_ms(int ms)
{
	struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000};
	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}
