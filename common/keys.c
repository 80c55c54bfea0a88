#include "common/keys.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>

#include "common/db.h"
#include "meter/decimal.h"

bool key_random_hex(char out[65], char *err, size_t errlen)
{
	unsigned char raw[32];
	size_t got = 0;
	while (got < sizeof raw) {
		ssize_t n = getrandom(raw + got, sizeof raw - got, 0);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			snprintf(err, errlen, "could not read random bytes: %s", strerror(errno));
			return false;
		}
		got += (size_t)n;
	}
	static const char hex[] = "0123456789abcdef";
	for (size_t i = 0; i < sizeof raw; i++) {
		out[2 * i] = hex[raw[i] >> 4];
		out[2 * i + 1] = hex[raw[i] & 15];
	}
	out[64] = '\0';
	return true;
}

static bool random_key(char key[KEY_LEN + 1], char *err, size_t errlen)
{
	memcpy(key, KEY_PREFIX, 3);
	return key_random_hex(key + 3, err, errlen);
}

bool key_create(PGconn *c, const char *account_id, char key[KEY_LEN + 1], int64_t *id, char *err,
                size_t errlen)
{
	char fresh[KEY_LEN + 1], shown[KEY_SHOWN_CHARS + 1];
	if (!random_key(fresh, err, errlen))
		return false;
	memcpy(shown, fresh, KEY_SHOWN_CHARS);
	shown[KEY_SHOWN_CHARS] = '\0';
	const char *params[] = {fresh, shown, account_id ? "account" : "admin", account_id};
	PGresult *r =
	        PQexecParams(c,
	                     "INSERT INTO api_keys (key_hash, shown, role, account_id) "
	                     "VALUES (sha256(convert_to($1, 'UTF8')), $2, $3, $4) RETURNING id",
	                     4, NULL, params, NULL, NULL, 0);
	bool ok = false;
	if (strcmp(db_sqlstate(r), "23503") == 0) {
		snprintf(err, errlen, "could not create key: account \"%s\" does not exist",
		         account_id);
	} else if (db_check(r, PGRES_TUPLES_OK, "could not create key", err, errlen)) {
		int64_t v = 0;
		(void)meter_decimal_parse(PQgetvalue(r, 0, 0), 0, false, &v);
		*id = v;
		memcpy(key, fresh, sizeof fresh);
		ok = true;
	}
	PQclear(r);
	return ok;
}
