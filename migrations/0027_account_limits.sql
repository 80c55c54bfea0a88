-- 0027_account_limits: each account's limits as last found, for the
-- collectors that enforce them on their hosts (meter-collector --enforce).
--
-- Kept by common/limits.c (limits_check_usage): after the rollup rates an
-- account's usage, and after PATCH /v1/accounts changes its plan or limits.
-- A row changes only when what it says changes. trial_exhausted: a trial
-- account whose grant is used up; spend_cap_reached: the month's cost has
-- reached the monthly spend cap, as of month (a new month lifts it). The
-- collector may read this table and nothing else of the billing side.
CREATE TABLE account_limits (
	account_id meter_id PRIMARY KEY REFERENCES accounts (id),
	trial_exhausted boolean NOT NULL,
	spend_cap_reached boolean NOT NULL,
	month date NOT NULL CHECK (extract(day FROM month) = 1),
	updated_at timestamptz NOT NULL DEFAULT now()
);

GRANT SELECT, INSERT, UPDATE ON account_limits TO meter_api;
GRANT SELECT ON account_limits TO meter_collector;
