-- 0005_limit_notices: one NOTIFY when an account crosses a limit.
--
-- Channel "meter_limits"; the payload is JSON:
--   {"account_id": "acme", "limit": "trial_spent" | "spend_cap_reached" |
--    "concurrency_limit", ...the figures}
-- Each crossing is recorded here first, so it is announced exactly once even
-- with several API processes: the trial once per account, the spend cap once
-- per account and month, the concurrency limit once per registration that
-- reached it. NOTIFY is sent when the transaction that crossed commits.
--
-- The function it defined or changed is now defined in
-- migrations/functions/meter_notify_limit.sql, as all functions are since
-- 0040.
CREATE TABLE limit_notices (
	account_id meter_id NOT NULL REFERENCES accounts (id),
	limit_name text NOT NULL CHECK (limit_name IN ('trial_spent', 'spend_cap_reached',
	                                               'concurrency_limit')),
	period text NOT NULL, -- '' (trial), 'YYYY-MM' (spend cap), the sandbox id (concurrency)
	sent_at timestamptz NOT NULL DEFAULT now(),
	payload jsonb NOT NULL,
	PRIMARY KEY (account_id, limit_name, period)
);

GRANT SELECT, INSERT ON limit_notices TO meter_api;
