#include "common/webhooks.h"

#include <cjson/cJSON.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/db.h"
#include "common/keys.h"
#include "common/netallow.h"
#include "meter/decimal.h"

const char *const webhook_event_names[WEBHOOK_EVENTS] = {
        "limit.trial_exhausted",
        "limit.concurrency_reached",
        "limit.spend_cap_reached",
        "invoice.finalized",
};

unsigned webhook_event_bit(const char *name)
{
	for (unsigned i = 0; i < WEBHOOK_EVENTS; i++)
		if (strcmp(name, webhook_event_names[i]) == 0)
			return 1u << i;
	return 0;
}

const char *webhook_url_problem(const char *url)
{
	size_t len = strlen(url), scheme;
	if (len > WEBHOOK_URL_MAX)
		return "is longer than 2048 bytes";
	if (strncmp(url, "https://", 8) == 0)
		scheme = 8;
	else if (strncmp(url, "http://", 7) == 0)
		scheme = 7;
	else
		return "must start with http:// or https://";
	if (url[scheme] == '\0' || url[scheme] == '/' || url[scheme] == '?')
		return "has no host";
	for (const unsigned char *p = (const unsigned char *)url; *p; p++) {
		if (*p <= ' ' || *p == 0x7f)
			return "holds a space or a control character";
		if (*p == '#')
			return "holds a fragment (#), which is never sent";
	}
	/* the authority: [user[:pass]@]host[:port] */
	const char *auth = url + scheme;
	size_t alen = strcspn(auth, "/?");
	if (memchr(auth, '@', alen))
		return "holds credentials (user:pass@), which would be sent and shown: the receiver "
		       "checks the signature instead";
	char host[256];
	size_t hlen = strcspn(auth, ":/?");
	if (auth[0] == '[') { /* [v6]:port */
		const char *close = memchr(auth, ']', alen);
		hlen = close ? (size_t)(close - auth) + 1 : 0;
	}
	if (hlen == 0 || hlen >= sizeof host)
		return "has no host it can be sent to";
	memcpy(host, auth, hlen);
	host[hlen] = '\0';
	size_t ln = strlen("localhost");
	const char *kind = net_forbidden_host(host, webhook_allow());
	if (kind == NULL && hlen >= ln && strcasecmp(host + hlen - ln, "localhost") == 0 &&
	    (hlen == ln || host[hlen - ln - 1] == '.'))
		kind = "loopback"; /* a name only this machine gives an address */
	if (kind) {
		static _Thread_local char why[200];
		snprintf(why, sizeof why,
		         "points at a %s address, which webhooks may not reach (allow it with "
		         "--webhook-allow CIDR)",
		         kind);
		return why;
	}
	return "";
}

static struct net_allow allow_list;

void webhook_allow_set(const struct net_allow *a)
{
	allow_list = *a;
}

const struct net_allow *webhook_allow(void)
{
	return &allow_list;
}

/* The bytes a base64 text stands for; -1 when it is not base64. */
static int b64_decode(const char *in, unsigned char *out, size_t outlen)
{
	size_t len = strlen(in);
	if (len == 0 || len % 4 != 0 || len / 4 * 3 > outlen || len > 1024)
		return -1;
	int n = EVP_DecodeBlock(out, (const unsigned char *)in, (int)len);
	if (n < 0)
		return -1;
	/* EVP_DecodeBlock counts the padding as zero bytes. */
	if (in[len - 1] == '=')
		n--;
	if (in[len - 2] == '=')
		n--;
	return n;
}

bool webhook_sign(const char *secret, const char *id, int64_t timestamp, const char *body,
                  size_t body_len, char out[WEBHOOK_SIG_BUF])
{
	unsigned char key[768], mac[EVP_MAX_MD_SIZE];
	size_t plen = strlen(WEBHOOK_SECRET_PREFIX), maclen = 0;
	if (strncmp(secret, WEBHOOK_SECRET_PREFIX, plen) == 0)
		secret += plen;
	int klen = b64_decode(secret, key, sizeof key);
	if (klen <= 0)
		return false;
	char head[256];
	int hlen = snprintf(head, sizeof head, "%s.%lld.", id, (long long)timestamp);
	if (hlen < 0 || (size_t)hlen >= sizeof head)
		return false;
	char *msg = malloc((size_t)hlen + body_len);
	if (msg == NULL)
		return false;
	memcpy(msg, head, (size_t)hlen);
	memcpy(msg + hlen, body, body_len);
	bool ok = EVP_Q_mac(NULL, "HMAC", NULL, "SHA256", NULL, key, (size_t)klen,
	                    (const unsigned char *)msg, (size_t)hlen + body_len, mac, sizeof mac,
	                    &maclen) != NULL &&
	          maclen == 32;
	free(msg);
	if (!ok)
		return false;
	memcpy(out, "v1,", 3);
	EVP_EncodeBlock((unsigned char *)out + 3, mac, (int)maclen); /* 44 bytes and a NUL */
	return true;
}

static bool new_secret(char out[WEBHOOK_SECRET_LEN + 1], char *err, size_t errlen)
{
	unsigned char raw[32];
	if (!key_random_bytes(raw, sizeof raw, err, errlen))
		return false;
	size_t plen = strlen(WEBHOOK_SECRET_PREFIX);
	memcpy(out, WEBHOOK_SECRET_PREFIX, plen);
	EVP_EncodeBlock((unsigned char *)out + plen, raw, (int)sizeof raw);
	return true;
}

bool webhook_create(PGconn *c, const char *url, unsigned events, const char *account, int64_t *id,
                    char secret[WEBHOOK_SECRET_LEN + 1], bool *no_account, char *err, size_t errlen)
{
	char fresh[WEBHOOK_SECRET_LEN + 1], list[128] = "{";
	*no_account = false;
	if (!new_secret(fresh, err, errlen))
		return false;
	for (unsigned i = 0; i < WEBHOOK_EVENTS; i++)
		if (events & (1u << i))
			snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s",
			         list[1] ? "," : "", webhook_event_names[i]);
	snprintf(list + strlen(list), sizeof list - strlen(list), "}");
	int known = account ? db_account_exists(c, account, err, errlen) : 1;
	if (known <= 0) {
		*no_account = known == 0;
		return false;
	}
	const char *p[] = {url, list, account, fresh + strlen(WEBHOOK_SECRET_PREFIX)};
	PGresult *r =
	        PQexecParams(c,
	                     "INSERT INTO webhook_endpoints (url, events, account_id, secret) "
	                     "VALUES ($1, $2::text[], $3, $4) RETURNING id",
	                     4, NULL, p, NULL, NULL, 0);
	bool ok = false;
	if (db_check(r, PGRES_TUPLES_OK, "could not create the webhook endpoint", err, errlen)) {
		ok = meter_decimal_parse(PQgetvalue(r, 0, 0), 0, false, id) == METER_OK;
		if (ok)
			memcpy(secret, fresh, sizeof fresh);
		else
			snprintf(err, errlen, "could not create the webhook endpoint: bad id");
	}
	PQclear(r);
	return ok;
}

/* The text of a JSON array of names, "{a,b}" as PostgreSQL prints text[], into arr. */
static void add_events(cJSON *arr, const char *pg_array)
{
	char buf[256];
	snprintf(buf, sizeof buf, "%s", pg_array);
	size_t len = strlen(buf);
	if (len < 2)
		return;
	buf[len - 1] = '\0';
	for (char *s = buf + 1, *next; s && *s; s = next) {
		next = strchr(s, ',');
		if (next)
			*next++ = '\0';
		cJSON_AddItemToArray(arr, cJSON_CreateString(s));
	}
}

cJSON *webhook_list(PGconn *c, int64_t id, char *err, size_t errlen)
{
	char ids[24];
	snprintf(ids, sizeof ids, "%lld", (long long)id);
	const char *p[] = {ids};
	PGresult *r = db_query(
	        c,
	        /* the counts by a join, not a subquery per endpoint: Citus joins a reference
	         * table to a distributed one only on the latter's key, or to a result */
	        "SELECT e.id, e.url, e.events::text, e.account_id, " DB_US_OR_NONE(
	                "e.created_at") ", coalesce(d.pending, 0), coalesce(d.failed, 0) "
	                                "FROM webhook_endpoints e LEFT JOIN (SELECT endpoint_id, "
	                                "count(*) FILTER (WHERE state = 'pending') pending, "
	                                "count(*) FILTER (WHERE state = 'failed') failed "
	                                "FROM webhook_deliveries WHERE state <> 'delivered' "
	                                "AND ($1 = 0 OR endpoint_id = $1) GROUP BY 1) d "
	                                "ON d.endpoint_id = e.id "
	                                "WHERE $1 = 0 OR e.id = $1 ORDER BY e.id",
	        1, p, PGRES_TUPLES_OK, "could not list the webhook endpoints", err, errlen);
	if (r == NULL)
		return NULL;
	cJSON *arr = cJSON_CreateArray();
	for (int i = 0; arr && i < PQntuples(r); i++) {
		cJSON *o = cJSON_CreateObject();
		int64_t v = 0, created = -1;
		(void)meter_decimal_parse(PQgetvalue(r, i, 0), 0, false, &v);
		(void)meter_decimal_parse(PQgetvalue(r, i, 4), 0, true, &created);
		cJSON_AddNumberToObject(o, "id", (double)v);
		cJSON_AddStringToObject(o, "url", PQgetvalue(r, i, 1));
		add_events(cJSON_AddArrayToObject(o, "events"), PQgetvalue(r, i, 2));
		if (PQgetisnull(r, i, 3))
			cJSON_AddNullToObject(o, "account_id");
		else
			cJSON_AddStringToObject(o, "account_id", PQgetvalue(r, i, 3));
		db_json_time(o, "created_at", created);
		(void)meter_decimal_parse(PQgetvalue(r, i, 5), 0, false, &v);
		cJSON_AddNumberToObject(o, "pending", (double)v);
		(void)meter_decimal_parse(PQgetvalue(r, i, 6), 0, false, &v);
		cJSON_AddNumberToObject(o, "failed", (double)v);
		cJSON_AddItemToArray(arr, o);
	}
	PQclear(r);
	if (arr == NULL)
		snprintf(err, errlen, "could not list the webhook endpoints: out of memory");
	return arr;
}

bool webhook_delete(PGconn *c, int64_t id, bool *found, char *err, size_t errlen)
{
	char ids[24];
	snprintf(ids, sizeof ids, "%lld", (long long)id);
	const char *p[] = {ids};
	PGresult *r =
	        db_query(c, "DELETE FROM webhook_endpoints WHERE id = $1", 1, p, PGRES_COMMAND_OK,
	                 "could not remove the webhook endpoint", err, errlen);
	if (r == NULL)
		return false;
	*found = strcmp(PQcmdTuples(r), "1") == 0;
	PQclear(r);
	return true;
}

/* A delivery's row (columns 0-7) as JSON, its attempts still to add. */
static cJSON *delivery_json(const PGresult *r, int i)
{
	cJSON *o = cJSON_CreateObject();
	int64_t created = -1, next = -1, n = 0;
	(void)meter_decimal_parse(PQgetvalue(r, i, 3), 0, true, &created);
	(void)meter_decimal_parse(PQgetvalue(r, i, 6), 0, true, &next);
	(void)meter_decimal_parse(PQgetvalue(r, i, 5), 0, false, &n);
	cJSON_AddStringToObject(o, "id", PQgetvalue(r, i, 0));
	cJSON_AddStringToObject(o, "type", PQgetvalue(r, i, 1));
	cJSON_AddStringToObject(o, "account_id", PQgetvalue(r, i, 2));
	db_json_time(o, "created_at", created);
	cJSON_AddStringToObject(o, "state", PQgetvalue(r, i, 4));
	cJSON_AddNumberToObject(o, "attempt_count", (double)n);
	db_json_time(o, "next_attempt_at", next);
	cJSON *body = cJSON_Parse(PQgetvalue(r, i, 7));
	if (body)
		cJSON_AddItemToObject(o, "payload", body);
	else
		cJSON_AddNullToObject(o, "payload");
	cJSON_AddArrayToObject(o, "attempts");
	return o;
}

cJSON *webhook_deliveries(PGconn *c, int64_t id, int limit, const char *delivery, bool *found,
                          char *err, size_t errlen)
{
	char ids[24], lim[16];
	snprintf(ids, sizeof ids, "%lld", (long long)id);
	snprintf(lim, sizeof lim, "%d", limit);
	const char *p[] = {ids, lim, delivery ? delivery : ""};
	PGresult *r = db_query(c, "SELECT 1 FROM webhook_endpoints WHERE id = $1", 1, p,
	                       PGRES_TUPLES_OK, "could not read the webhook endpoint", err, errlen);
	if (r == NULL)
		return NULL;
	*found = PQntuples(r) == 1;
	PQclear(r);
	if (!*found)
		return cJSON_CreateArray();
	r = db_query(
	        c,
	        "SELECT d.id, d.type, d.account_id, " DB_US_OR_NONE(
	                "d.created_at") ", d.state, d.attempts, "
	                                "CASE WHEN d.state = 'pending' THEN " DB_US_OR_NONE(
	                                        "d.next_at") " ELSE -1 END, d.body, "
	                                                     "a.n, " DB_US_OR_NONE(
	                                                             "a.at") ", a.status, "
	                                                                     "a.error, "
	                                                                     "a.duration_ms "
	                                                                     "FROM (SELECT * FROM "
	                                                                     "webhook_deliveries "
	                                                                     "WHERE endpoint_id = "
	                                                                     "$1 "
	                                                                     "      AND ($3 = '' "
	                                                                     "OR id = $3) "
	                                                                     "      ORDER BY "
	                                                                     "created_at DESC, id "
	                                                                     "DESC LIMIT $2) d "
	                                                                     "LEFT JOIN "
	                                                                     "webhook_attempts a "
	                                                                     "ON a.delivery_id = "
	                                                                     "d.id "
	                                                                     "ORDER BY "
	                                                                     "d.created_at DESC, "
	                                                                     "d.id DESC, a.n",
	        3, p, PGRES_TUPLES_OK, "could not read the deliveries", err, errlen);
	if (r == NULL)
		return NULL;
	cJSON *arr = cJSON_CreateArray(), *cur = NULL;
	for (int i = 0; arr && i < PQntuples(r); i++) {
		if (cur == NULL ||
		    strcmp(cJSON_GetObjectItem(cur, "id")->valuestring, PQgetvalue(r, i, 0)) != 0) {
			cur = delivery_json(r, i);
			cJSON_AddItemToArray(arr, cur);
		}
		if (PQgetisnull(r, i, 8))
			continue;
		cJSON *a = cJSON_CreateObject();
		int64_t n = 0, at = -1, ms = 0;
		(void)meter_decimal_parse(PQgetvalue(r, i, 8), 0, false, &n);
		(void)meter_decimal_parse(PQgetvalue(r, i, 9), 0, true, &at);
		(void)meter_decimal_parse(PQgetvalue(r, i, 12), 0, false, &ms);
		cJSON_AddNumberToObject(a, "n", (double)n);
		db_json_time(a, "at", at);
		if (PQgetisnull(r, i, 10)) {
			cJSON_AddNullToObject(a, "status");
		} else {
			int64_t st = 0;
			(void)meter_decimal_parse(PQgetvalue(r, i, 10), 0, false, &st);
			cJSON_AddNumberToObject(a, "status", (double)st);
		}
		if (PQgetisnull(r, i, 11))
			cJSON_AddNullToObject(a, "error");
		else
			cJSON_AddStringToObject(a, "error", PQgetvalue(r, i, 11));
		cJSON_AddNumberToObject(a, "duration_ms", (double)ms);
		cJSON_AddItemToArray(cJSON_GetObjectItem(cur, "attempts"), a);
	}
	PQclear(r);
	if (arr == NULL)
		snprintf(err, errlen, "could not read the deliveries: out of memory");
	return arr;
}

bool webhook_redeliver(PGconn *c, int64_t id, const char *delivery, bool *found, char *err,
                       size_t errlen)
{
	char ids[24];
	snprintf(ids, sizeof ids, "%lld", (long long)id);
	const char *p[] = {ids, delivery};
	PGresult *r = db_query(c,
	                       "WITH d AS (UPDATE webhook_deliveries SET state = 'pending', "
	                       "next_at = now(), step = 0 WHERE endpoint_id = $1 AND id = $2 "
	                       "RETURNING 1) "
	                       "SELECT count(*), pg_notify('meter_webhooks', '') FROM d",
	                       2, p, PGRES_TUPLES_OK, "could not redeliver", err, errlen);
	if (r == NULL)
		return false;
	*found = strcmp(PQgetvalue(r, 0, 0), "1") == 0;
	PQclear(r);
	return true;
}
