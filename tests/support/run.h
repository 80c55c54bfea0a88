/*
 * tests/support/run.h: runs one of our programs and captures what it prints.
 */
#ifndef TESTS_SUPPORT_RUN_H
#define TESTS_SUPPORT_RUN_H

#include <stddef.h>

#define RUN_OUT_MAX 65536

struct run_result {
	int status; /* exit status, or 128 + signal, or -1 when it could not run */
	char out[RUN_OUT_MAX];
	char err[RUN_OUT_MAX];
};

/*
 * Runs argv (argv[0] a path) with DATABASE_URL set to database_url (unset
 * when NULL) and no standard input. Output past RUN_OUT_MAX is dropped.
 */
void run_program(const char *const argv[], const char *database_url, struct run_result *res);

/* Lines in s (a final line without '\n' counts). */
int run_lines(const char *s);

#endif
