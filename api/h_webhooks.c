/* Webhook endpoints and their deliveries, for admins (common/webhooks.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/reply.h"
#include "api/routes.h"
#include "common/webhooks.h"
#include "meter/decimal.h"

#define DELIVERIES_DEFAULT 50
#define DELIVERIES_MAX     500

/* The endpoint id of the path and a connection; NULL when it has answered (404, 503). */
static PGconn *endpoint_db(struct req *r, int64_t *id)
{
	if (meter_decimal_parse(r->param[0], 0, false, id) != METER_OK || *id <= 0) {
		reply_problemf(r, 404, "not-found", "Not found",
		               "webhook endpoint \"%s\" not found", r->param[0]);
		return NULL;
	}
	return req_db(r);
}

/* The first item of arr, taken out of it; arr is deleted. */
static cJSON *first_of(cJSON *arr)
{
	cJSON *o = cJSON_DetachItemFromArray(arr, 0);
	cJSON_Delete(arr);
	return o;
}

/* GET /v1/webhooks: every endpoint, oldest first; never a secret. */
void h_webhook_list(struct req *r)
{
	if (!req_no_query(r))
		return;
	PGconn *c = req_db(r);
	if (c == NULL)
		return;
	char err[512];
	cJSON *arr = webhook_list(c, 0, err, sizeof err);
	if (arr == NULL) {
		reply_db_error(r, err, NULL);
		return;
	}
	cJSON *o = cJSON_CreateObject();
	cJSON_AddItemToObject(o, "webhooks", arr);
	reply_json(r, 200, o);
}

/* The events of body's "events": a set of bits, or 0 with *p set. */
static unsigned read_events(const cJSON *body, struct problem *p)
{
	const cJSON *ev = cJSON_GetObjectItemCaseSensitive(body, "events");
	unsigned set = 0;
	if (ev == NULL) {
		problem_set(p, 400, "missing-field", "Missing field",
		            "field \"events\" is required");
		return 0;
	}
	if (!cJSON_IsArray(ev) || cJSON_GetArraySize(ev) == 0) {
		problem_set(p, 400, "invalid-type", "Wrong type",
		            "field \"events\" must be a non-empty array of event names");
		return 0;
	}
	const cJSON *e;
	cJSON_ArrayForEach(e, ev)
	{
		unsigned bit = cJSON_IsString(e) ? webhook_event_bit(e->valuestring) : 0;
		if (bit == 0) {
			problem_set(
			        p, 422, "invalid-field", "Invalid field",
			        "field \"events\" holds %s; the events are limit.trial_exhausted, "
			        "limit.concurrency_reached, limit.spend_cap_reached and "
			        "invoice.finalized",
			        cJSON_IsString(e) ? "an unknown event"
			                          : "a value that is not a string");
			return 0;
		}
		if (set & bit) {
			problem_set(p, 422, "invalid-field", "Invalid field",
			            "field \"events\" names %s twice", e->valuestring);
			return 0;
		}
		set |= bit;
	}
	return set;
}

/*
 * POST /v1/webhooks {"url": ..., "events": [...], "account_id": optional}: a
 * new endpoint, its secret shown in this answer only.
 */
void h_webhook_new(struct req *r)
{
	static const struct in_field f[] = {
	        {"account_id", IN_ID, 0, 0, 0, false, NULL},
	};
	struct in_value v[1];
	struct problem p;
	char url[WEBHOOK_URL_MAX + 1] = "";
	unsigned events = 0;
	cJSON *body = in_parse_object(r->body, r->body_len, &p);
	bool ok = body != NULL;
	if (ok) {
		cJSON *u = cJSON_DetachItemFromObjectCaseSensitive(body, "url");
		const char *why = NULL;
		if (u == NULL)
			problem_set(&p, 400, "missing-field", "Missing field",
			            "field \"url\" is required");
		else if (!cJSON_IsString(u))
			problem_set(&p, 400, "invalid-type", "Wrong type",
			            "field \"url\" must be a string");
		else if ((why = webhook_url_problem(u->valuestring))[0])
			problem_set(&p, 422, "invalid-field", "Invalid field", "field \"url\" %s",
			            why);
		else
			snprintf(url, sizeof url, "%s", u->valuestring);
		ok = url[0] != '\0';
		cJSON_Delete(u);
	}
	if (ok) {
		events = read_events(body, &p);
		cJSON_Delete(cJSON_DetachItemFromObjectCaseSensitive(body, "events"));
		ok = events != 0 && in_fields(body, f, 1, v, &p);
	}
	cJSON_Delete(body);
	if (!ok) {
		reply_problem(r, &p);
		return;
	}
	PGconn *c = req_db(r);
	if (c == NULL)
		return;
	char secret[WEBHOOK_SECRET_LEN + 1], err[512];
	int64_t id = 0;
	bool no_account = false;
	if (!webhook_create(c, url, events, v[0].set ? v[0].text : NULL, &id, secret, &no_account,
	                    err, sizeof err)) {
		if (no_account)
			reply_problemf(r, 404, "not-found", "Not found", "account \"%s\" not found",
			               v[0].text);
		else
			reply_db_error(r, err, NULL);
		return;
	}
	cJSON *arr = webhook_list(c, id, err, sizeof err);
	if (arr == NULL || cJSON_GetArraySize(arr) != 1) {
		cJSON_Delete(arr);
		reply_db_error(r, err, NULL);
		return;
	}
	cJSON *o = first_of(arr);
	cJSON_AddStringToObject(o, "secret", secret);
	reply_json(r, 201, o);
}

/* DELETE /v1/webhooks/{id}: removes the endpoint and its deliveries; the endpoint as it was. */
void h_webhook_delete(struct req *r)
{
	int64_t id;
	PGconn *c = endpoint_db(r, &id);
	if (c == NULL)
		return;
	char err[512];
	bool found = false;
	cJSON *arr = webhook_list(c, id, err, sizeof err);
	if (arr == NULL || !webhook_delete(c, id, &found, err, sizeof err)) {
		cJSON_Delete(arr);
		reply_db_error(r, err, NULL);
		return;
	}
	if (!found || cJSON_GetArraySize(arr) != 1) {
		cJSON_Delete(arr);
		reply_problemf(r, 404, "not-found", "Not found", "webhook endpoint %lld not found",
		               (long long)id);
		return;
	}
	reply_json(r, 200, first_of(arr));
}

/* GET /v1/webhooks/{id}/deliveries[?limit=N]: the newest deliveries, each with its attempts. */
void h_webhook_deliveries(struct req *r)
{
	static const struct in_field f[] = {
	        {"limit", IN_DECIMAL, 0, 1, DELIVERIES_MAX, false, NULL},
	};
	struct in_value v[1];
	struct problem p;
	int64_t id;
	if (!in_query(r->args, r->nargs, f, 1, v, &p)) {
		reply_problem(r, &p);
		return;
	}
	PGconn *c = endpoint_db(r, &id);
	if (c == NULL)
		return;
	char err[512];
	bool found = false;
	cJSON *arr = webhook_deliveries(c, id, v[0].set ? (int)v[0].num : DELIVERIES_DEFAULT, NULL,
	                                &found, err, sizeof err);
	if (arr == NULL) {
		reply_db_error(r, err, NULL);
		return;
	}
	if (!found) {
		cJSON_Delete(arr);
		reply_problemf(r, 404, "not-found", "Not found", "webhook endpoint %lld not found",
		               (long long)id);
		return;
	}
	cJSON *o = cJSON_CreateObject();
	cJSON_AddItemToObject(o, "deliveries", arr);
	reply_json(r, 200, o);
}

/*
 * POST /v1/webhooks/{id}/deliveries/{delivery}/redeliver: the delivery is
 * sent again now, its back-off started over, whatever its state (a receiver
 * that lost it, a delivery that failed); 202 with the delivery.
 */
void h_webhook_redeliver(struct req *r)
{
	int64_t id;
	PGconn *c = endpoint_db(r, &id);
	if (c == NULL)
		return;
	char err[512];
	bool found = false;
	if (!webhook_redeliver(c, id, r->param[1], &found, err, sizeof err)) {
		reply_db_error(r, err, NULL);
		return;
	}
	cJSON *arr =
	        found ? webhook_deliveries(c, id, 1, r->param[1], &found, err, sizeof err) : NULL;
	if (found && (arr == NULL || cJSON_GetArraySize(arr) != 1)) {
		cJSON_Delete(arr);
		reply_db_error(r, err, NULL);
		return;
	}
	if (!found) {
		cJSON_Delete(arr);
		reply_problemf(r, 404, "not-found", "Not found",
		               "webhook endpoint %lld has no delivery \"%s\"", (long long)id,
		               r->param[1]);
		return;
	}
	reply_json(r, 202, first_of(arr));
}
