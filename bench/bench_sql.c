/*
 * bench_sql: prints statements of api/queries.c, one a line, so that a
 * reference run (bench/bench_api.sh's pgbench) sends the very text meter-api
 * prepares, not a copy that drifts from it.
 *
 *   bench_sql auth | state ...
 *
 * Exit status 2 for a name it does not know.
 */
#include <stdio.h>
#include <string.h>

#include "api/queries.h"

int main(int argc, char **argv)
{
	static const struct {
		const char *name;
		enum query q;
	} known[] = {{"auth", Q_AUTH}, {"state", Q_STATE}};
	for (int i = 1; i < argc; i++) {
		size_t k = 0;
		while (k < sizeof known / sizeof known[0] && strcmp(known[k].name, argv[i]) != 0)
			k++;
		if (k == sizeof known / sizeof known[0]) {
			fprintf(stderr, "bench_sql: no statement \"%s\" (auth, state)\n", argv[i]);
			return 2;
		}
		printf("%s\n", q_sql(known[k].q));
	}
	return 0;
}
