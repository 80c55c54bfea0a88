#include "common/opts.h"

#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "meter/checked.h"
#include "meter/decimal.h"

#define OPT_STRING_MAX 4096

static bool parse_duration(const char *s, int64_t *us)
{
	/* A whole number followed by a unit; a bare number is seconds. */
	int64_t v = 0, mul = 1000000;
	const char *p = s;
	if (*p < '0' || *p > '9')
		return false;
	for (; *p >= '0' && *p <= '9'; p++)
		if (!ck_mul(v, 10, &v) || !ck_add(v, *p - '0', &v))
			return false;
	if (strcmp(p, "") == 0 || strcmp(p, "s") == 0)
		mul = 1000000;
	else if (strcmp(p, "ms") == 0)
		mul = 1000;
	else if (strcmp(p, "us") == 0)
		mul = 1;
	else if (strcmp(p, "m") == 0 || strcmp(p, "min") == 0)
		mul = 60000000;
	else if (strcmp(p, "h") == 0)
		mul = INT64_C(3600000000);
	else if (strcmp(p, "d") == 0)
		mul = INT64_C(86400000000);
	else
		return false;
	return ck_mul(v, mul, us);
}

static bool set_value(const struct opt_def *d, const char *text, const char *label,
                      struct opt_val *v, char *err, size_t errlen)
{
	char lo[METER_DECIMAL_BUF], hi[METER_DECIMAL_BUF];
	int64_t num = 0;
	switch (d->type) {
	case OPT_FLAG:
		break;
	case OPT_STRING:
		if (strlen(text) > OPT_STRING_MAX) {
			snprintf(err, errlen, "%s: value is longer than %d bytes", label,
			         OPT_STRING_MAX);
			return false;
		}
		break;
	case OPT_DECIMAL: {
		enum meter_status st = meter_decimal_parse(text, d->scale, true, &num);
		if (st == METER_EPRECISION) {
			snprintf(err, errlen, "%s: \"%s\" has more than %d decimal places", label,
			         text, d->scale);
			return false;
		}
		if (st != METER_OK) {
			snprintf(err, errlen, "%s: \"%s\" is not a %s", label, text,
			         d->scale ? "decimal number" : "whole number");
			return false;
		}
		if (num < d->min || num > d->max) {
			meter_decimal_format(d->min, d->scale, 0, lo, sizeof lo);
			meter_decimal_format(d->max, d->scale, 0, hi, sizeof hi);
			snprintf(err, errlen, "%s: %s is out of range (%s to %s)", label, text, lo,
			         hi);
			return false;
		}
		break;
	}
	case OPT_DURATION:
		if (!parse_duration(text, &num)) {
			snprintf(err, errlen,
			         "%s: \"%s\" is not a duration (a whole number with s, ms, m or h)",
			         label, text);
			return false;
		}
		if (num < d->min || num > d->max) {
			snprintf(err, errlen, "%s: %s is out of range (%lld ms to %lld ms)", label,
			         text, (long long)(d->min / 1000), (long long)(d->max / 1000));
			return false;
		}
		break;
	}
	v->set = true;
	v->str = text;
	v->num = num;
	return true;
}

bool opts_parse(const struct opt_def *defs, size_t n, int argc, char **argv, struct opt_val *vals,
                char *err, size_t errlen)
{
	for (size_t i = 0; i < n; i++)
		vals[i] = (struct opt_val){0};

	for (int a = 0; a < argc; a++) {
		const char *arg = argv[a];
		if (strncmp(arg, "--", 2) != 0 || arg[2] == '\0') {
			snprintf(err, errlen, "unexpected argument \"%s\"", arg);
			return false;
		}
		const char *name = arg + 2, *eq = strchr(name, '=');
		size_t nlen = eq ? (size_t)(eq - name) : strlen(name);
		const struct opt_def *d = NULL;
		size_t i;
		for (i = 0; i < n; i++)
			if (strlen(defs[i].name) == nlen &&
			    strncmp(defs[i].name, name, nlen) == 0) {
				d = &defs[i];
				break;
			}
		if (d == NULL) {
			snprintf(err, errlen, "unknown option \"--%.*s\"", (int)nlen, name);
			return false;
		}
		if (vals[i].set) {
			snprintf(err, errlen, "--%s: given twice", d->name);
			return false;
		}
		const char *text = "";
		if (d->type == OPT_FLAG) {
			if (eq) {
				snprintf(err, errlen, "--%s takes no value", d->name);
				return false;
			}
		} else if (eq) {
			text = eq + 1;
		} else if (a + 1 < argc) {
			text = argv[++a];
		} else {
			snprintf(err, errlen, "--%s needs a value", d->name);
			return false;
		}
		char label[96];
		snprintf(label, sizeof label, "--%s", d->name);
		if (!set_value(d, text, label, &vals[i], err, errlen))
			return false;
	}

	for (size_t i = 0; i < n; i++) {
		const struct opt_def *d = &defs[i];
		if (vals[i].set)
			continue;
		const char *env = d->env ? getenv(d->env) : NULL;
		char label[160];
		if (env && *env) {
			snprintf(label, sizeof label, "--%s (from %s)", d->name, d->env);
			if (!set_value(d, env, label, &vals[i], err, errlen))
				return false;
		} else if (d->def) {
			snprintf(label, sizeof label, "default of --%s", d->name);
			if (!set_value(d, d->def, label, &vals[i], err, errlen))
				return false;
		} else if (d->required) {
			snprintf(err, errlen, "missing --%s", d->name);
			return false;
		}
	}
	return true;
}

void opts_help(FILE *out, const char *usage, const struct opt_def *defs, size_t n)
{
	fprintf(out, "%s\n", usage);
	if (n)
		fprintf(out, "\noptions:\n");
	for (size_t i = 0; i < n; i++) {
		const struct opt_def *d = &defs[i];
		char left[64];
		const char *arg = d->type == OPT_FLAG       ? ""
		                  : d->type == OPT_DURATION ? " DURATION"
		                  : d->type == OPT_STRING   ? " TEXT"
		                                            : " N";
		snprintf(left, sizeof left, "--%s%s", d->name, arg);
		fprintf(out, "  %-26s %s", left, d->help);
		if (d->required)
			fprintf(out, " (required)");
		if (d->def && d->def[0]) /* an empty default is no default to show */
			fprintf(out, " (default %s)", d->def);
		if (d->env)
			fprintf(out, " [env %s]", d->env);
		fprintf(out, "\n");
	}
}

int opts_daemon(const char *prog, const char *usage, const struct opt_def *defs, size_t n,
                size_t log_level_index, int argc, char **argv, struct opt_val *vals)
{
	char err[1024];
	enum log_level level;
	log_init(prog, LOG_INFO, true);
	for (int i = 1; i < argc; i++)
		if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
			opts_help(stdout, usage, defs, n);
			exit(0);
		}
	if (!opts_parse(defs, n, argc - 1, argv + 1, vals, err, sizeof err)) {
		log_error("%s (see %s --help)", err, prog);
		return 2;
	}
	if (!log_level_parse(vals[log_level_index].str, &level)) {
		log_error("--log-level: \"%s\" is not one of error, warn, info, debug",
		          vals[log_level_index].str);
		return 2;
	}
	log_init(prog, level, true);
	return 0;
}
