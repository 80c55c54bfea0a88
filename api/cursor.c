#include "api/cursor.h"

#include <stdio.h>
#include <string.h>

static const char alphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

/* base64url of in[0..n) into out, no padding; false when out is too small. */
static bool encode(const unsigned char *in, size_t n, char *out, size_t len)
{
	size_t need = (n * 4 + 2) / 3 + 1, k = 0;
	if (need > len)
		return false;
	for (size_t i = 0; i < n; i += 3) {
		unsigned v = (unsigned)in[i] << 16;
		if (i + 1 < n)
			v |= (unsigned)in[i + 1] << 8;
		if (i + 2 < n)
			v |= in[i + 2];
		out[k++] = alphabet[(v >> 18) & 63];
		out[k++] = alphabet[(v >> 12) & 63];
		if (i + 1 < n)
			out[k++] = alphabet[(v >> 6) & 63];
		if (i + 2 < n)
			out[k++] = alphabet[v & 63];
	}
	out[k] = '\0';
	return true;
}

static int value_of(char c)
{
	const char *p = c ? strchr(alphabet, c) : NULL;
	return p ? (int)(p - alphabet) : -1;
}

/* Decodes base64url text (no padding) into out, NUL-terminated; false when it is not. */
static bool decode(const char *text, char *out, size_t len)
{
	size_t n = strlen(text), k = 0;
	if (n % 4 == 1)
		return false;
	for (size_t i = 0; i < n; i += 4) {
		unsigned v = 0;
		size_t got = n - i < 4 ? n - i : 4;
		for (size_t j = 0; j < 4; j++) {
			int x = j < got ? value_of(text[i + j]) : 0;
			if (x < 0)
				return false;
			v = v << 6 | (unsigned)x;
		}
		for (size_t j = 0; j + 1 < got; j++) {
			if (k + 1 >= len)
				return false;
			out[k++] = (char)(v >> (16 - 8 * j) & 255);
		}
		/* the bits past the last byte must be zero: one text per cursor */
		if (got < 4 && (v >> (24 - 8 * (got - 1)) << (24 - 8 * (got - 1))) != v)
			return false;
	}
	out[k] = '\0';
	return memchr(out, '\0', k) == NULL;
}

void cursor_listing(int64_t listing, int64_t offset, char *out, size_t len)
{
	char raw[64];
	int n = snprintf(raw, sizeof raw, "l:%lld:%lld", (long long)listing, (long long)offset);
	if (!encode((const unsigned char *)raw, (size_t)n, out, len) && len > 0)
		out[0] = '\0';
}

/* A decimal of 1 to 18 digits, no sign, no leading zero; false otherwise. */
static bool number(const char *s, const char *end, int64_t *out)
{
	size_t n = (size_t)(end - s);
	if (n == 0 || n > 18 || (s[0] == '0' && n > 1))
		return false;
	int64_t v = 0;
	for (; s < end; s++) {
		if (*s < '0' || *s > '9')
			return false;
		v = v * 10 + (*s - '0');
	}
	*out = v;
	return true;
}

bool cursor_listing_read(const char *text, int64_t *listing, int64_t *offset)
{
	char raw[64];
	if (!decode(text, raw, sizeof raw) || strncmp(raw, "l:", 2) != 0)
		return false;
	const char *colon = strchr(raw + 2, ':');
	return colon && number(raw + 2, colon, listing) &&
	       number(colon + 1, raw + strlen(raw), offset) && *listing > 0;
}

/* The longest id a cursor carries: any id (common/ids.h) fits. */
#define ID_MAX 128

bool cursor_after(const char *id, char *out, size_t len)
{
	char raw[ID_MAX + 3];
	size_t n = strlen(id);
	if (n == 0 || n > ID_MAX)
		return false;
	snprintf(raw, sizeof raw, "s:%s", id);
	return encode((const unsigned char *)raw, n + 2, out, len);
}

bool cursor_after_read(const char *text, char *id, size_t len)
{
	char raw[ID_MAX + 3];
	if (!decode(text, raw, sizeof raw) || strncmp(raw, "s:", 2) != 0 || raw[2] == '\0' ||
	    strlen(raw + 2) >= len)
		return false;
	memcpy(id, raw + 2, strlen(raw + 2) + 1);
	return true;
}
