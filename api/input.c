#include "api/input.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "meter/decimal.h"
#include "meter/timefmt.h"

void problem_set(struct problem *p, unsigned status, const char *type, const char *title,
                 const char *fmt, ...)
{
	va_list ap;
	p->status = status;
	p->type = type;
	p->title = title;
	va_start(ap, fmt);
	vsnprintf(p->detail, sizeof p->detail, fmt, ap);
	va_end(ap);
}

/* True when s[0..len) is well-formed UTF-8. */
static bool utf8_ok(const unsigned char *s, size_t len)
{
	for (size_t i = 0; i < len;) {
		unsigned char c = s[i];
		size_t n = c < 0x80         ? 0
		           : (c >> 5) == 6  ? 1
		           : (c >> 4) == 14 ? 2
		           : (c >> 3) == 30 ? 3
		                            : 9;
		if (n == 9 || i + n >= len + (n == 0))
			return false;
		for (size_t k = 1; k <= n; k++)
			if ((s[i + k] & 0xC0) != 0x80)
				return false;
		if ((n == 1 && c < 0xC2) || (n == 2 && c == 0xE0 && s[i + 1] < 0xA0) ||
		    (n == 2 && c == 0xED && s[i + 1] >= 0xA0) ||
		    (n == 3 && c == 0xF0 && s[i + 1] < 0x90) || (n == 3 && c > 0xF4))
			return false;
		i += n + 1;
	}
	return true;
}

/*
 * What JSON text says that cJSON would silently change: a number with more
 * significant digits than a double keeps (send it as a string instead), or a
 * \u0000 escape that would cut a string short. Returns the offending offset
 * and what, or -1.
 */
static long lossy(const char *b, size_t len, const char **what)
{
	bool in_str = false;
	for (size_t i = 0; i < len; i++) {
		char c = b[i];
		if (in_str) {
			if (c == '\\') {
				if (i + 5 < len && b[i + 1] == 'u' &&
				    memcmp(b + i + 2, "0000", 4) == 0) {
					*what = "a \\u0000 character";
					return (long)i;
				}
				i++;
			} else if (c == '"') {
				in_str = false;
			}
			continue;
		}
		if (c == '"') {
			in_str = true;
			continue;
		}
		if (c != '-' && (c < '0' || c > '9'))
			continue;
		size_t start = i;
		int digits = 0, pending_zeros = 0;
		bool seen = false;
		for (; i < len && b[i] != 'e' && b[i] != 'E' &&
		       (b[i] == '-' || b[i] == '.' || (b[i] >= '0' && b[i] <= '9'));
		     i++) {
			if (b[i] < '0' || b[i] > '9')
				continue;
			if (b[i] == '0') {
				pending_zeros += seen;
			} else {
				digits += seen ? pending_zeros + 1 : 1;
				pending_zeros = 0;
				seen = true;
			}
		}
		while (i < len && (b[i] == 'e' || b[i] == 'E' || b[i] == '+' || b[i] == '-' ||
		                   (b[i] >= '0' && b[i] <= '9')))
			i++;
		i--;
		if (digits > 15) {
			*what = "a number with more than 15 significant digits (send it as a "
			        "string)";
			return (long)start;
		}
	}
	return -1;
}

cJSON *in_parse_object(const char *body, size_t len, struct problem *p)
{
	const char *end = NULL;
	if (body == NULL || len == 0) {
		problem_set(p, 400, "invalid-body", "Invalid request body",
		            "the request needs a JSON object as its body");
		return NULL;
	}
	if (!utf8_ok((const unsigned char *)body, len)) {
		problem_set(p, 400, "invalid-json", "Malformed JSON",
		            "the body is not valid UTF-8");
		return NULL;
	}
	/* JSON has no raw control character but white space, in a string or out of one:
	 * a NUL would cut a value short where cJSON copies it (found by fuzz_json) */
	for (size_t i = 0; i < len; i++)
		if ((unsigned char)body[i] < 0x20 && body[i] != '\t' && body[i] != '\n' &&
		    body[i] != '\r') {
			problem_set(p, 400, "invalid-json", "Malformed JSON",
			            "the body has a control character (0x%02x) at byte %zu; a JSON "
			            "string needs it escaped",
			            (unsigned)(unsigned char)body[i], i);
			return NULL;
		}
	const char *what = NULL;
	long bad_at = lossy(body, len, &what);
	if (bad_at >= 0) {
		problem_set(p, 400, "invalid-json", "Value not exact",
		            "the body has %s at byte %ld", what, bad_at);
		return NULL;
	}
	cJSON *o = cJSON_ParseWithLengthOpts(body, len, &end, false);
	if (o == NULL) {
		size_t at = end && end >= body ? (size_t)(end - body) : 0;
		problem_set(p, 400, "invalid-json", "Malformed JSON",
		            "the body is not valid JSON (error near byte %zu)", at);
		return NULL;
	}
	/* Nothing but white space may follow the value. */
	for (; end && (size_t)(end - body) < len; end++)
		if (*end != ' ' && *end != '\t' && *end != '\n' && *end != '\r') {
			cJSON_Delete(o);
			problem_set(p, 400, "invalid-json", "Malformed JSON",
			            "the body has more after its JSON value (byte %zu)",
			            (size_t)(end - body));
			return NULL;
		}
	if (!cJSON_IsObject(o)) {
		cJSON_Delete(o);
		problem_set(p, 400, "invalid-body", "Invalid request body",
		            "the body must be a JSON object");
		return NULL;
	}
	return o;
}

/* The shortest decimal text that reads back as d ("0.1", not "0.1000000000000000055"). */
static bool shortest(double d, char *buf, size_t len)
{
	if (!isfinite(d))
		return false;
	for (int prec = 1; prec <= 17; prec++) {
		snprintf(buf, len, "%.*g", prec, d);
		if (strtod(buf, NULL) == d)
			break;
	}
	/* Spell out exponents ("1e-05" -> "0.00001") so the exact parser can read them. */
	if (strchr(buf, 'e') || strchr(buf, 'E')) {
		if (fabs(d) >= 1e18 || (d != 0 && fabs(d) < 1e-18))
			return false;
		snprintf(buf, len, "%.18f", d);
		/* trim to the digits that matter: reparse from the shortest %g form */
		char *dot = strchr(buf, '.');
		if (dot) {
			char *e = buf + strlen(buf) - 1;
			while (e > dot && *e == '0')
				*e-- = '\0';
			if (e == dot)
				*e = '\0';
		}
	}
	return true;
}

static bool range_text(const struct in_field *f, char *lo, char *hi)
{
	meter_decimal_format(f->min, f->scale, 0, lo, METER_DECIMAL_BUF);
	meter_decimal_format(f->max, f->scale, 0, hi, METER_DECIMAL_BUF);
	return true;
}

/* One value given as text (a JSON string, or a query argument). */
static bool take_text(const struct in_field *f, const char *s, struct in_value *v,
                      struct problem *p, const char *where)
{
	char lo[METER_DECIMAL_BUF], hi[METER_DECIMAL_BUF];
	enum meter_status st;
	switch (f->type) {
	case IN_ID:
		if (!id_valid(s)) {
			problem_set(p, 400, "invalid-id", "Invalid id",
			            "%s \"%s\" must be an id: %s", where, f->name, ID_RULE);
			return false;
		}
		break;
	case IN_TEXT:
		if (s[0] == '\0' || strlen(s) > (size_t)f->max) {
			problem_set(p, 422, "invalid-field", "Invalid field",
			            "%s \"%s\" must be 1 to %lld bytes of text", where, f->name,
			            (long long)f->max);
			return false;
		}
		break;
	case IN_BOOL:
		if (strcmp(s, "true") != 0 && strcmp(s, "false") != 0) {
			problem_set(p, 422, "invalid-field", "Invalid field",
			            "%s \"%s\" must be true or false, not \"%.64s\"", where,
			            f->name, s);
			return false;
		}
		v->num = s[0] == 't';
		break;
	case IN_ENUM: {
		size_t n = strlen(s);
		const char *c = f->choices;
		bool found = false;
		while (c && *c && !found) {
			const char *bar = strchr(c, '|');
			size_t len = bar ? (size_t)(bar - c) : strlen(c);
			found = len == n && strncmp(c, s, n) == 0;
			c = bar ? bar + 1 : NULL;
		}
		if (!found || n == 0) {
			problem_set(p, 422, "invalid-field", "Invalid field",
			            "%s \"%s\" must be one of %s, not \"%.64s\"", where, f->name,
			            f->choices, s);
			return false;
		}
		break;
	}
	case IN_DECIMAL:
		st = meter_decimal_parse(s, f->scale, true, &v->num);
		if (st == METER_EPRECISION) {
			problem_set(p, 422, "invalid-field", "Invalid field",
			            "%s \"%s\" has more than %d decimal places", where, f->name,
			            f->scale);
			return false;
		}
		if (st != METER_OK && st != METER_EOVERFLOW) {
			problem_set(p, 400, "invalid-field", "Invalid field",
			            "%s \"%s\" must be a number, not \"%.64s\"", where, f->name, s);
			return false;
		}
		if (st == METER_EOVERFLOW || v->num < f->min || v->num > f->max) {
			range_text(f, lo, hi);
			problem_set(p, 422, "out-of-range", "Value out of range",
			            "%s \"%s\" must be from %s to %s, not %.64s", where, f->name,
			            lo, hi, s);
			return false;
		}
		break;
	case IN_TIME:
		if (meter_time_parse(s, &v->num) != METER_OK) {
			problem_set(p, 400, "invalid-time", "Invalid time",
			            "%s \"%s\" must be an RFC 3339 time such as "
			            "2026-10-01T00:00:00Z, not \"%.64s\"",
			            where, f->name, s);
			return false;
		}
		break;
	case IN_MONTH: {
		char full[40];
		if (strlen(s) != 7 || s[4] != '-' ||
		    (snprintf(full, sizeof full, "%s-01T00:00:00Z", s),
		     meter_time_parse(full, &v->num) != METER_OK)) {
			problem_set(p, 400, "invalid-month", "Invalid month",
			            "%s \"%s\" must be a month as YYYY-MM, not \"%.64s\"", where,
			            f->name, s);
			return false;
		}
		break;
	}
	}
	v->set = true;
	snprintf(v->text, sizeof v->text, "%s", s);
	return true;
}

bool in_fields(const cJSON *obj, const struct in_field *f, size_t n, struct in_value *out,
               struct problem *p)
{
	for (size_t i = 0; i < n; i++)
		out[i] = (struct in_value){0};
	for (const cJSON *it = obj->child; it; it = it->next) {
		size_t i = 0;
		while (i < n && strcmp(f[i].name, it->string) != 0)
			i++;
		if (i == n) {
			problem_set(
			        p, 400, "unknown-field", "Unknown field",
			        "the body has a field \"%.64s\" that this request does not take",
			        it->string);
			return false;
		}
		if (out[i].set) {
			problem_set(p, 400, "invalid-field", "Invalid field",
			            "field \"%s\" is given twice", f[i].name);
			return false;
		}
		if (cJSON_IsNull(it) && !f[i].required)
			continue;
		char text[64];
		const char *s = NULL;
		if (f[i].type == IN_BOOL) {
			if (!cJSON_IsBool(it)) {
				problem_set(p, 400, "invalid-type", "Wrong type",
				            "field \"%s\" must be true or false", f[i].name);
				return false;
			}
			s = cJSON_IsTrue(it) ? "true" : "false";
		} else if (cJSON_IsString(it)) {
			s = it->valuestring;
		} else if (cJSON_IsNumber(it) && f[i].type == IN_DECIMAL) {
			if (!shortest(it->valuedouble, text, sizeof text)) {
				problem_set(p, 422, "out-of-range", "Value out of range",
				            "field \"%s\" is not a finite number in range",
				            f[i].name);
				return false;
			}
			s = text;
		} else {
			problem_set(p, 400, "invalid-type", "Wrong type", "field \"%s\" must be %s",
			            f[i].name, f[i].type == IN_DECIMAL ? "a number" : "a string");
			return false;
		}
		if (strlen(s) >= sizeof out[i].text) {
			problem_set(p, 422, "invalid-field", "Invalid field",
			            "field \"%s\" is too long", f[i].name);
			return false;
		}
		if (!take_text(&f[i], s, &out[i], p, "field"))
			return false;
	}
	for (size_t i = 0; i < n; i++)
		if (f[i].required && !out[i].set) {
			problem_set(p, 400, "missing-field", "Missing field",
			            "field \"%s\" is required", f[i].name);
			return false;
		}
	return true;
}

bool in_query(const struct in_arg *args, size_t nargs, const struct in_field *f, size_t n,
              struct in_value *out, struct problem *p)
{
	for (size_t i = 0; i < n; i++)
		out[i] = (struct in_value){0};
	for (size_t a = 0; a < nargs; a++) {
		size_t i = 0;
		while (i < n && strcmp(f[i].name, args[a].name) != 0)
			i++;
		if (i == n) {
			problem_set(
			        p, 400, "unknown-parameter", "Unknown query parameter",
			        "the query has a parameter \"%.64s\" that this request does not "
			        "take",
			        args[a].name);
			return false;
		}
		if (out[i].set) {
			problem_set(p, 400, "invalid-parameter", "Invalid query parameter",
			            "query parameter \"%s\" is given twice", f[i].name);
			return false;
		}
		const char *v = args[a].value ? args[a].value : "";
		if (strlen(v) >= sizeof out[i].text) {
			problem_set(p, 400, "invalid-parameter", "Invalid query parameter",
			            "query parameter \"%s\" is too long", f[i].name);
			return false;
		}
		if (!take_text(&f[i], v, &out[i], p, "query parameter"))
			return false;
	}
	for (size_t i = 0; i < n; i++)
		if (f[i].required && !out[i].set) {
			problem_set(p, 400, "missing-parameter", "Missing query parameter",
			            "query parameter \"%s\" is required", f[i].name);
			return false;
		}
	return true;
}

static int hex_digit(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

/* Decodes s[0..len) into out (olen bytes with the NUL); false when malformed or too long. */
static bool form_decode(const char *s, size_t len, char *out, size_t olen)
{
	size_t o = 0;
	for (size_t i = 0; i < len; i++) {
		char ch = s[i];
		if (ch == '+') {
			ch = ' ';
		} else if (ch == '%') {
			if (len - i < 3)
				return false;
			int a = hex_digit(s[i + 1]), b = hex_digit(s[i + 2]);
			if (a < 0 || b < 0)
				return false;
			ch = (char)(a * 16 + b);
			i += 2;
		}
		if (ch == '\0' || o + 1 >= olen)
			return false; /* a NUL, as it is or encoded, would cut the value short */
		out[o++] = ch;
	}
	out[o] = '\0';
	return true;
}

bool in_form_value(const char *body, size_t len, const char *name, char *out, size_t olen)
{
	size_t nlen = strlen(name);
	bool found = false;
	if (olen == 0)
		return false;
	out[0] = '\0';
	for (size_t p = 0; body != NULL && p < len;) {
		const char *amp = memchr(body + p, '&', len - p);
		size_t stop = amp ? (size_t)(amp - body) : len;
		const char *pair = body + p;
		size_t plen = stop - p;
		if (plen > nlen && memcmp(pair, name, nlen) == 0 && pair[nlen] == '=') {
			if (found || !form_decode(pair + nlen + 1, plen - nlen - 1, out, olen)) {
				out[0] = '\0';
				return false;
			}
			found = true;
		}
		p = stop + 1;
	}
	return found;
}

bool in_bearer_key(const char *header, char *key, size_t len)
{
	static const char prefix[] = "Bearer mk_";
	size_t n = strlen(header), plen = sizeof prefix - 1;
	if (len > 0)
		key[0] = '\0';
	if (len < 68 || n != plen + 64 || strncmp(header, prefix, plen) != 0)
		return false;
	for (size_t i = plen; i < n; i++)
		if (!((header[i] >= '0' && header[i] <= '9') ||
		      (header[i] >= 'a' && header[i] <= 'f')))
			return false;
	memcpy(key, header + 7, n - 7 + 1);
	return true;
}
