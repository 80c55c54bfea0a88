/* API keys, for admins: list, create, revoke (common/keys.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/opening.h"
#include "api/reply.h"
#include "api/routes.h"
#include "common/keys.h"
#include "meter/decimal.h"
#include "meter/timefmt.h"

/* Every key (keys_list); false when it has answered. */
static bool keys_read(struct req *r, PGconn *c, struct key_info **keys, size_t *n)
{
	char err[256];
	if (!key_list(c, keys, n, err, sizeof err)) {
		reply_db_error(r, err, NULL);
		return false;
	}
	return true;
}

/* GET /v1/keys: every key, oldest first; never a key itself. */
void h_key_list(struct req *r)
{
	struct key_info *keys = NULL;
	size_t n = 0;
	if (!req_no_query(r))
		return;
	PGconn *c = req_db(r);
	if (c == NULL || !keys_read(r, c, &keys, &n))
		return;
	cJSON *o = cJSON_CreateObject(), *arr = cJSON_AddArrayToObject(o, "keys");
	for (size_t i = 0; i < n; i++)
		cJSON_AddItemToArray(arr, key_info_json(&keys[i]));
	free(keys);
	reply_json(r, 200, o);
}

/*
 * POST /v1/keys {"role": "admin"}, {"role": "account", "account_id": ID} or
 * {"role": "hook"} (with "account_id" for one account's only): a new key,
 * shown in this answer only.
 */
void h_key_new(struct req *r)
{
	static const struct in_field f[] = {
	        {"role", IN_ENUM, 0, 0, 0, true, "admin|account|hook"},
	        {"account_id", IN_ID, 0, 0, 0, false, NULL},
	};
	struct in_value v[2];
	cJSON *body = req_body_fields(r, f, 2, v, false);
	if (body == NULL)
		return;
	cJSON_Delete(body);
	bool admin = strcmp(v[0].text, "admin") == 0, hook = strcmp(v[0].text, "hook") == 0;
	if (!hook && admin == v[1].set) {
		reply_problemf(r, 422, "invalid-field", "Invalid field",
		               "an account key needs \"account_id\"; an admin key takes none");
		return;
	}
	PGconn *c = req_db(r);
	if (c == NULL)
		return;
	char key[KEY_LEN + 1], err[256];
	int64_t id = 0;
	if (!key_create(c, v[0].text, v[1].set ? v[1].text : NULL, key, &id, err, sizeof err)) {
		if (strstr(err, "does not exist"))
			reply_problemf(r, 404, "not-found", "Not found", "account \"%s\" not found",
			               v[1].text);
		else
			reply_db_error(r, err, NULL);
		return;
	}
	cJSON *o = cJSON_CreateObject();
	cJSON_AddNumberToObject(o, "id", (double)id);
	cJSON_AddStringToObject(o, "key", key);
	cJSON_AddStringToObject(o, "role", v[0].text);
	if (!v[1].set)
		cJSON_AddNullToObject(o, "account_id");
	else
		cJSON_AddStringToObject(o, "account_id", v[1].text);
	reply_json(r, 201, o);
}

/* DELETE /v1/keys/{id}: revokes the key and ends its sessions; the key as it now is. */
void h_key_revoke(struct req *r)
{
	int64_t id = 0;
	if (meter_decimal_parse(r->param[0], 0, false, &id) != METER_OK || id <= 0) {
		reply_problemf(r, 404, "not-found", "Not found", "key \"%s\" not found",
		               r->param[0]);
		return;
	}
	PGconn *c = req_db(r);
	if (c == NULL)
		return;
	char err[256];
	bool found = false;
	if (!key_revoke(c, id, &found, err, sizeof err)) {
		reply_db_error(r, err, NULL);
		return;
	}
	if (!found) {
		reply_problemf(r, 404, "not-found", "Not found", "key %lld not found",
		               (long long)id);
		return;
	}
	struct key_info *keys = NULL;
	size_t n = 0;
	if (!keys_read(r, c, &keys, &n))
		return;
	for (size_t i = 0; i < n; i++)
		if (keys[i].id == id)
			reply_json(r, 200, key_info_json(&keys[i]));
	free(keys);
	if (!r->answered)
		reply_problemf(r, 404, "not-found", "Not found", "key %lld not found",
		               (long long)id);
}
