/*
 * api/input.h: reading request bodies and query strings, strictly.
 *
 * Each route names its fields once (name, type, bounds, required). Anything
 * else is refused with a problem naming the field: a field that is not known,
 * a value of the wrong type, a number with more decimals than kept, out of
 * bounds, non-finite, an id that fails its pattern, a time that does not
 * parse. Numbers are never kept as doubles: a JSON number is turned back into
 * its shortest decimal text and parsed exactly, and decimal strings
 * ("0.5") are accepted too.
 */
#ifndef API_INPUT_H
#define API_INPUT_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/ids.h"

enum in_type {
	IN_ID,      /* an id (common/ids.h) */
	IN_TEXT,    /* free text, 1..max bytes */
	IN_DECIMAL, /* exact decimal at .scale, stored x 10^scale */
	IN_TIME,    /* RFC 3339, stored as µs */
	IN_ENUM,    /* one of .choices ("trial|paid") */
	IN_MONTH,   /* YYYY-MM, stored as the month's first µs */
	IN_BOOL,    /* JSON true or false (a query's "true" or "false"), stored as 1 or 0 */
};

struct in_field {
	const char *name;
	enum in_type type;
	int scale;
	int64_t min, max; /* IN_DECIMAL: bounds; IN_TEXT: max length in max */
	bool required;
	const char *choices;
};

struct in_value {
	bool set;
	char text[256]; /* the value as text (ids, enums, text) */
	int64_t num;    /* decimals, times */
};

/* What was wrong, for a problem details answer. */
struct problem {
	unsigned status;  /* 400, 404, 409, 413, 422, 503 ... */
	const char *type; /* a slug: "invalid-field", "unknown-field" ... */
	const char *title;
	char detail[512];
};

void problem_set(struct problem *p, unsigned status, const char *type, const char *title,
                 const char *fmt, ...) __attribute__((format(printf, 5, 6)));

/* Parses a body as one JSON object; NULL with *p set otherwise. Caller frees. */
cJSON *in_parse_object(const char *body, size_t len, struct problem *p);

/* Reads the fields of obj; false with *p set at the first problem. */
bool in_fields(const cJSON *obj, const struct in_field *f, size_t n, struct in_value *out,
               struct problem *p);

/*
 * Reads query arguments (name=value pairs, values already URL-decoded) the
 * same way: unknown names, repeats and bad values are refused.
 */
struct in_arg {
	const char *name;
	const char *value;
};
bool in_query(const struct in_arg *args, size_t nargs, const struct in_field *f, size_t n,
              struct in_value *out, struct problem *p);

/*
 * The value of the field name in an application/x-www-form-urlencoded body
 * of len bytes (not NUL-terminated), decoded ('+' is a space, %XX a byte)
 * into out, NUL-terminated. False, with out[0] = '\0', when the field is
 * absent or given twice, when any % is not followed by two hex digits or
 * decodes to a NUL, when the value holds a NUL byte as it is, or when the
 * value does not fit in olen bytes.
 */
bool in_form_value(const char *body, size_t len, const char *name, char *out, size_t olen);

/*
 * The API key of an Authorization header, "Bearer mk_" and 64 lowercase hex
 * digits and nothing else, into key (at least 68 bytes). False for any other
 * header, with key[0] = '\0'.
 */
bool in_bearer_key(const char *header, char *key, size_t len);

#endif
