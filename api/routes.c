#include "api/routes.h"

/* Every route the API serves; the OpenAPI document must describe each (a test checks). */
const struct route routes[] = {
        {"GET", "/healthz", AUTH_PUBLIC, h_healthz},
        {"GET", "/readyz", AUTH_PUBLIC, h_readyz},
        {"GET", "/metrics", AUTH_PUBLIC, h_metrics},
        {"GET", "/v1/openapi.json", AUTH_PUBLIC, h_openapi},
        {"GET", "/v1/rates", AUTH_PUBLIC, h_rates},
        {"POST", "/v1/estimates", AUTH_PUBLIC, h_estimates},
        {"POST", "/v1/accounts", AUTH_ADMIN, h_account_new},
        {"GET", "/v1/accounts/{id}", AUTH_ANY, h_account_get},
        {"PATCH", "/v1/accounts/{id}", AUTH_ADMIN, h_account_patch},
        {"GET", "/v1/accounts/{id}/usage", AUTH_ANY, h_usage},
        {"GET", "/v1/accounts/{id}/trial", AUTH_ANY, h_trial},
        {"GET", "/v1/accounts/{id}/invoices/{month}", AUTH_ANY, h_invoice},
        {"GET", "/v1/accounts/{id}/forecast", AUTH_ANY, h_forecast},
        {"POST", "/v1/sandboxes", AUTH_ADMIN, h_sandbox_new},
        {"GET", "/v1/sandboxes/{id}", AUTH_ANY, h_sandbox_get},
        {"POST", "/v1/sandboxes/{id}/stop", AUTH_ADMIN, h_sandbox_stop},
        {"GET", "/v1/sandboxes/{id}/usage", AUTH_ANY, h_sandbox_usage},
        {"POST", "/v1/quota/check", AUTH_ANY, h_quota_check},
};
const int routes_count = sizeof routes / sizeof routes[0];
