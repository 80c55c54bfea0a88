#include "api/routes.h"

/* Every route the API serves; the OpenAPI document must describe each (a test checks). */
const struct route routes[] = {
        {"GET", "/healthz", AUTH_PUBLIC, h_healthz, false},
        {"GET", "/readyz", AUTH_PUBLIC, h_readyz, false},
        {"GET", "/metrics", AUTH_PUBLIC, h_metrics, false},
        {"GET", "/v1/openapi.json", AUTH_PUBLIC, h_openapi, false},
        {"GET", "/v1/rates", AUTH_PUBLIC, h_rates, false},
        {"POST", "/v1/estimates", AUTH_PUBLIC, h_estimates, false},
        {"POST", "/v1/accounts", AUTH_ADMIN, h_account_new, false},
        {"GET", "/v1/accounts/{id}", AUTH_ANY, h_account_get, false},
        {"PATCH", "/v1/accounts/{id}", AUTH_ADMIN, h_account_patch, false},
        {"GET", "/v1/accounts/{id}/usage", AUTH_ANY, h_usage, false},
        {"GET", "/v1/accounts/{id}/sandboxes", AUTH_ANY, h_sandbox_list, false},
        {"GET", "/v1/accounts/{id}/trial", AUTH_ANY, h_trial, false},
        {"GET", "/v1/accounts/{id}/invoices/{month}", AUTH_ANY, h_invoice, false},
        {"GET", "/v1/accounts/{id}/forecast", AUTH_ANY, h_forecast, false},
        {"GET", "/v1/accounts/{id}/exports/{month}", AUTH_ANY, h_export, false},
        {"POST", "/v1/sandboxes", AUTH_ADMIN, h_sandbox_new, false},
        {"GET", "/v1/sandboxes/{id}", AUTH_ANY, h_sandbox_get, false},
        {"POST", "/v1/sandboxes/{id}/stop", AUTH_ADMIN, h_sandbox_stop, false},
        {"GET", "/v1/sandboxes/{id}/usage", AUTH_ANY, h_sandbox_usage, false},
        {"POST", "/v1/quota/check", AUTH_ANY, h_quota_check, false},
        /* pages for people (api/dashboard.c) */
        {"GET", "/login", AUTH_PUBLIC, h_login_page, true},
        {"POST", "/login", AUTH_PUBLIC, h_login, true},
        {"GET", "/login/{token}", AUTH_PUBLIC, h_login_link, true},
        {"POST", "/logout", AUTH_PUBLIC, h_logout, true},
        {"GET", "/dashboard", AUTH_ANY, h_dashboard, true},
        {"GET", "/dashboard/sandboxes/{id}", AUTH_ANY, h_dashboard_sandbox, true},
        {"GET", "/dashboard/exports/{month}", AUTH_ANY, h_dashboard_export, true},
};
const int routes_count = sizeof routes / sizeof routes[0];
