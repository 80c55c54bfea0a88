/*
 * api/routes.h: the route table and the handlers it names, each given its
 * request (api/request.h).
 */
#ifndef API_ROUTES_H
#define API_ROUTES_H

#include "api/request.h"

extern const struct route routes[];
extern const int routes_count;

/* api/h_service.c: the service's own (health, readiness, metrics, the document) */
void h_healthz(struct req *r);
void h_readyz(struct req *r);
void h_metrics(struct req *r);
void h_openapi(struct req *r);

/* api/h_plans.c: prices */
void h_rates(struct req *r);
void h_estimates(struct req *r);
void h_plan_list(struct req *r);
void h_plan_new(struct req *r);

/* api/h_accounts.c */
void h_account_new(struct req *r);
void h_account_get(struct req *r);
void h_account_patch(struct req *r);

/* api/h_usage.c: an account's usage and its trial */
void h_usage(struct req *r);
void h_trial(struct req *r);

/* api/h_invoices.c: a month's invoice and its forecast */
void h_invoice(struct req *r);
void h_forecast(struct req *r);

/* api/h_exports.c: for the API and for the dashboard */
void h_export(struct req *r);
void h_dashboard_export(struct req *r);

/* api/h_sandboxes.c */
void h_sandbox_new(struct req *r);
void h_sandbox_get(struct req *r);
void h_sandbox_list(struct req *r);
void h_sandbox_stop(struct req *r);
void h_sandbox_usage(struct req *r);

/* api/h_quota.c */
void h_quota_check(struct req *r);

/* api/h_keys.c */
void h_key_list(struct req *r);
void h_key_new(struct req *r);
void h_key_revoke(struct req *r);

/* api/h_webhooks.c */
void h_webhook_list(struct req *r);
void h_webhook_new(struct req *r);
void h_webhook_delete(struct req *r);
void h_webhook_deliveries(struct req *r);
void h_webhook_redeliver(struct req *r);

/* api/page_login.c: pages for people */
void h_login_page(struct req *r);
void h_login(struct req *r);
void h_login_link_page(struct req *r);
void h_login_link(struct req *r);
void h_logout(struct req *r);

/* api/page_dashboard.c */
void h_dashboard(struct req *r);
void h_dashboard_sandbox(struct req *r);

/* The embedded OpenAPI document (api/openapi.json). */
extern const char openapi_json[];
extern const unsigned long openapi_json_len;

#endif
