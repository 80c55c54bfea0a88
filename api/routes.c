#include "api/routes.h"

#include "api/metrics.h"

/*
 * Every route the API serves; the OpenAPI document must describe each (a test
 * checks). The figure bounds each statement of a request (ms; none:
 * ROUTE_TIMEOUT_MS): the quota check, the hot path, far shorter than an
 * export. SLOW marks the routes whose work grows with an account's size or
 * with the range asked (pages of its sandboxes, invoices, exports, the
 * dashboard, the forecast, a sandbox's usage over up to 400 days): they run on the
 * slow lane's threads, so the request threads stay free for quota checks,
 * registrations and the other short answers whatever those cost. HOT marks
 * what a scheduler's admission waits on (the quota check, a sandbox's
 * registration and stop, meter-hook's calls): they may take the database
 * connections the pool keeps for them (api/pool.h), which no other route
 * takes, so that slow readers of exports cannot starve them.
 */
#define SLOW true
#define FAST false
#define HOT  true
#define COLD false
const struct route routes[] = {
        {"GET", "/healthz", AUTH_PUBLIC, h_healthz, false, 0, FAST, COLD},
        {"GET", "/readyz", AUTH_PUBLIC, h_readyz, false, 0, FAST, COLD},
        {"GET", "/metrics", AUTH_PUBLIC, h_metrics, false, 0, FAST, COLD},
        {"GET", "/v1/openapi.json", AUTH_PUBLIC, h_openapi, false, 0, FAST, COLD},
        {"GET", "/v1/rates", AUTH_PUBLIC, h_rates, false, 0, FAST, COLD},
        {"POST", "/v1/estimates", AUTH_PUBLIC, h_estimates, false, 0, FAST, COLD},
        {"GET", "/v1/price-plans", AUTH_PUBLIC, h_plan_list, false, 0, FAST, COLD},
        {"POST", "/v1/price-plans", AUTH_ADMIN, h_plan_new, false, 0, FAST, COLD},
        {"POST", "/v1/accounts", AUTH_ADMIN, h_account_new, false, 0, FAST, COLD},
        {"GET", "/v1/accounts/{id}", AUTH_ANY, h_account_get, false, 0, FAST, COLD},
        {"PATCH", "/v1/accounts/{id}", AUTH_ADMIN, h_account_patch, false, 0, FAST, COLD},
        {"GET", "/v1/accounts/{id}/usage", AUTH_ANY, h_usage, false, 30000, SLOW, COLD},
        {"GET", "/v1/accounts/{id}/sandboxes", AUTH_ANY, h_sandbox_list, false, 0, FAST, COLD},
        {"GET", "/v1/accounts/{id}/trial", AUTH_ANY, h_trial, false, 0, FAST, COLD},
        {"GET", "/v1/accounts/{id}/invoices/{month}", AUTH_ANY, h_invoice, false, 60000, SLOW,
         COLD},
        {"GET", "/v1/accounts/{id}/forecast", AUTH_ANY, h_forecast, false, 30000, SLOW, COLD},
        {"GET", "/v1/accounts/{id}/exports/{month}", AUTH_ANY, h_export, false, 300000, SLOW, COLD},
        {"POST", "/v1/sandboxes", AUTH_HOOK, h_sandbox_new, false, 2000, FAST, HOT},
        {"GET", "/v1/sandboxes/{id}", AUTH_ANY, h_sandbox_get, false, 0, FAST, COLD},
        {"POST", "/v1/sandboxes/{id}/stop", AUTH_HOOK, h_sandbox_stop, false, 0, FAST, HOT},
        {"GET", "/v1/sandboxes/{id}/usage", AUTH_ANY, h_sandbox_usage, false, 30000, SLOW, COLD},
        {"POST", "/v1/quota/check", AUTH_ANY_IN_HANDLER, h_quota_check, false, 1000, FAST, HOT},
        {"GET", "/v1/keys", AUTH_ADMIN, h_key_list, false, 0, FAST, COLD},
        {"POST", "/v1/keys", AUTH_ADMIN, h_key_new, false, 0, FAST, COLD},
        {"DELETE", "/v1/keys/{id}", AUTH_ADMIN, h_key_revoke, false, 0, FAST, COLD},
        {"GET", "/v1/webhooks", AUTH_ADMIN, h_webhook_list, false, 0, FAST, COLD},
        {"POST", "/v1/webhooks", AUTH_ADMIN, h_webhook_new, false, 0, FAST, COLD},
        {"DELETE", "/v1/webhooks/{id}", AUTH_ADMIN, h_webhook_delete, false, 0, FAST, COLD},
        {"GET", "/v1/webhooks/{id}/deliveries", AUTH_ADMIN, h_webhook_deliveries, false, 0, FAST,
         COLD},
        {"POST", "/v1/webhooks/{id}/deliveries/{delivery}/redeliver", AUTH_ADMIN,
         h_webhook_redeliver, false, 0, FAST, COLD},
        /* pages for people (api/page_login.c, api/page_dashboard.c) */
        {"GET", "/login", AUTH_PUBLIC, h_login_page, true, 0, FAST, COLD},
        {"POST", "/login", AUTH_PUBLIC, h_login, true, 0, FAST, COLD},
        {"GET", "/login/{token}", AUTH_PUBLIC, h_login_link_page, true, 0, FAST, COLD},
        {"POST", "/login/{token}", AUTH_PUBLIC, h_login_link, true, 0, FAST, COLD},
        {"POST", "/logout", AUTH_PUBLIC, h_logout, true, 0, FAST, COLD},
        {"GET", "/dashboard", AUTH_ANY, h_dashboard, true, 30000, SLOW, COLD},
        {"GET", "/dashboard/sandboxes/{id}", AUTH_ANY, h_dashboard_sandbox, true, 0, FAST, COLD},
        {"GET", "/dashboard/exports/{month}", AUTH_ANY, h_dashboard_export, true, 300000, SLOW,
         COLD},
};
const int routes_count = sizeof routes / sizeof routes[0];
/* Each route has its own metrics, and the last index is for requests matching none. */
_Static_assert(sizeof routes / sizeof routes[0] < METRICS_ROUTES,
               "more routes than METRICS_ROUTES - 1: raise it in api/metrics.h");
