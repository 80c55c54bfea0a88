/*
 * common/opts.h: command-line options from one table.
 *
 * Each program (and each CLI verb) describes its options once: name, type,
 * bounds, default, environment variable and help. Parsing, range checks,
 * error messages and --help all come from that table.
 */
#ifndef COMMON_OPTS_H
#define COMMON_OPTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

enum opt_type {
	OPT_FLAG,     /* present or not */
	OPT_STRING,   /* any text, at most 4096 bytes */
	OPT_DECIMAL,  /* exact decimal at .scale, stored x 10^scale in .num */
	OPT_DURATION, /* "10s", "500ms", "2m", "1h" or plain seconds; .num in µs */
};

struct opt_def {
	const char *name; /* "memory-gib" for --memory-gib */
	enum opt_type type;
	int scale;        /* OPT_DECIMAL: decimals kept (0 for integers) */
	int64_t min, max; /* OPT_DECIMAL, OPT_DURATION: bounds of .num, inclusive */
	const char *def;  /* default, as text; NULL for none ("": empty, not shown by --help) */
	const char *env;  /* environment variable that sets it, or NULL */
	bool required;
	const char *help;
};

struct opt_val {
	bool set;        /* given, from the command line, environment or default */
	const char *str; /* the text (points into argv, environ or the table) */
	int64_t num;
};

/*
 * Parses argv[0..argc) (no program name) against defs; vals has one entry per
 * def. Precedence: command line, then environment, then default. On error
 * writes one line to err ("--vcpus: \"-1\" is out of range (0.001 to 256)")
 * and returns false.
 */
bool opts_parse(const struct opt_def *defs, size_t n, int argc, char **argv, struct opt_val *vals,
                char *err, size_t errlen);

/* Prints "usage" then one line per option, generated from the table; "(default X)"
 * only for an option whose default is not empty. */
void opts_help(FILE *out, const char *usage, const struct opt_def *defs, size_t n);

/*
 * The start of a daemon's main: "--help" prints the help and exits 0; then
 * the options are parsed and the "log-level" option (its index in defs) sets
 * logging with timestamps. Returns 0 to go on, or the exit status (2, after
 * one line on stderr) for a command line that cannot work.
 */
int opts_daemon(const char *prog, const char *usage, const struct opt_def *defs, size_t n,
                size_t log_level_index, int argc, char **argv, struct opt_val *vals);

#endif
