/* The quota check: may an account start one more sandbox now (the hot path). */
#include <stdio.h>

#include "api/account.h"
#include "api/auth.h"
#include "api/reply.h"
#include "api/routes.h"
#include "meter/money.h"

void h_quota_check(struct req *r)
{
	static const struct in_field f[] = {
	        {"account_id", IN_ID, 0, 0, 0, true, NULL},
	        {"vcpus", IN_DECIMAL, 3, 1, 256000, true, NULL},
	        {"memory_gib", IN_DECIMAL, 3, 1, 1024000, true, NULL},
	};
	struct in_value v[3];
	struct account_state s;
	struct quota_answer q;
	/* The hot path: the key (AUTH_ANY_IN_HANDLER) is looked up with the state, in one
	 * round trip; a malformed body is answered after the key, as on every route. */
	struct problem p;
	cJSON *o = in_parse_object(r->body, r->body_len, &p);
	bool fields = o && in_fields(o, f, 3, v, &p);
	cJSON_Delete(o);
	if (!fields) {
		if (req_authenticate(r))
			reply_problem(r, &p);
		return;
	}
	PGconn *c = req_db(r);
	if (c == NULL || !account_state_load_keyed(r, c, v[0].text, &s))
		return;
	quota_decide(&s, &q);
	char cost[METER_MONEY_BUF], exact[METER_MONEY_BUF], cap[METER_MONEY_BUF];
	meter_money_format_cents(s.month_cost, cost, sizeof cost);
	meter_money_format_exact(s.month_cost, exact, sizeof exact);
	cJSON *a = cJSON_CreateObject();
	if (a == NULL) {
		reply_problemf(r, 500, "internal", "Internal error", "out of memory");
		return;
	}
	cJSON_AddBoolToObject(a, "allowed", q.allowed);
	cJSON_AddStringToObject(a, "reason", q.reason);
	if (q.detail[0])
		cJSON_AddStringToObject(a, "detail", q.detail);
	cJSON_AddNumberToObject(a, "running", (double)s.running);
	cJSON_AddNumberToObject(a, "max_concurrent", (double)s.a.max_concurrent);
	cJSON_AddNumberToObject(a, "trial_seconds_remaining", (double)(s.trial_left_us / 1000000));
	account_add_egress_ports(a, &s.a);
	cJSON_AddStringToObject(a, "plan", s.a.plan);
	cJSON_AddStringToObject(a, "month_to_date", cost);
	cJSON_AddStringToObject(a, "month_to_date_exact", exact);
	if (s.a.has_cap) {
		meter_money_format_exact(s.a.cap, cap, sizeof cap);
		cJSON_AddStringToObject(a, "monthly_spend_cap", cap);
	} else {
		cJSON_AddNullToObject(a, "monthly_spend_cap");
	}
	reply_json(r, 200, a);
}
