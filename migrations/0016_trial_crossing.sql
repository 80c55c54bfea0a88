-- 0016_trial_crossing: the trial exact to the interval (rule 8).
--
-- The grant covers an account's intervals in the order of their ends, all its
-- sandboxes together, until it is used up; the interval that crosses that
-- point is covered in proportion. Every hour before the one in which the
-- grant runs out is covered whole, every hour after it not at all, so only
-- that hour needs its intervals: the rollup rates it again from its samples
-- (api/rollup.c) whenever usage at or before it changes, and keeps here the
-- hour and what the grant covers of it, per price plan. Readers (invoices,
-- the quota check, the trial balance) take hours before it whole, this row's
-- part of it, and nothing after.
--
-- No row: the grant is not used up (or the account has none). exact is false
-- when the hour's raw samples were already dropped and its cover was shared
-- out from the hour's sums instead.
--
-- The function it defined or changed is now defined in
-- migrations/functions/meter_trial_grant_changed.sql, as all functions are
-- since 0040.
CREATE TABLE trial_crossing (
	account_id meter_id PRIMARY KEY REFERENCES accounts (id),
	hour timestamptz NOT NULL,
	exact boolean NOT NULL,
	computed_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE trial_cover (
	account_id meter_id NOT NULL REFERENCES trial_crossing (account_id) ON DELETE CASCADE,
	price_plan_id integer NOT NULL REFERENCES price_plans (id),
	cpu_measured_us numeric NOT NULL,
	cpu_billed_us numeric NOT NULL,
	busy_us numeric NOT NULL,
	idle_us numeric NOT NULL,
	wall_us numeric NOT NULL,
	memory_mgib_us numeric NOT NULL,
	PRIMARY KEY (account_id, price_plan_id)
);
COMMENT ON TABLE trial_cover IS 'what the trial grant covers of the hour it runs out in, per plan';

-- Accounts whose crossing must be found again without new usage: a grant
-- changed, or usage rated before this migration. The rollup takes them first
-- in every pass.
CREATE TABLE trial_queue (
	account_id meter_id PRIMARY KEY REFERENCES accounts (id),
	queued_at timestamptz NOT NULL DEFAULT clock_timestamp()
);

CREATE TRIGGER accounts_trial_grant AFTER UPDATE OF trial_grant_seconds ON accounts
	FOR EACH ROW WHEN (OLD.trial_grant_seconds IS DISTINCT FROM NEW.trial_grant_seconds)
	EXECUTE FUNCTION meter_trial_grant_changed();

INSERT INTO trial_queue (account_id)
SELECT m.account_id FROM account_month m JOIN accounts a ON a.id = m.account_id
WHERE a.trial_grant_seconds > 0
GROUP BY m.account_id, a.trial_grant_seconds
HAVING sum(m.wall_us) >= a.trial_grant_seconds * 1000000;

GRANT SELECT, INSERT, UPDATE, DELETE ON trial_crossing, trial_cover, trial_queue TO meter_api;

-- usage_unpriced sits with usage_hourly, on the billing side (docs/scaling.md):
-- its key names the account.
ALTER TABLE usage_unpriced DROP CONSTRAINT usage_unpriced_pkey,
	ADD PRIMARY KEY (account_id, sandbox_id, hour);
