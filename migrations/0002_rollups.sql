-- 0002_rollups: what the API and its rollup worker need.
--
-- Every insert into samples marks the sandbox in rollup_queue, in the same
-- transaction, with the earliest new sample time. A worker (in every meter-api
-- process) takes marked sandboxes with FOR UPDATE SKIP LOCKED, re-rates their
-- intervals that end after the hour holding from_ts with the meter/ library,
-- replaces their usage_hourly rows from that hour on, keeps account_month in
-- step, and removes the mark, all in one transaction.
--
-- The function it defined or changed is now defined in
-- migrations/functions/meter_mark_samples.sql, as all functions are since
-- 0040.

CREATE TABLE rollup_queue (
	sandbox_id meter_id PRIMARY KEY,
	from_ts timestamptz NOT NULL,        -- re-rate intervals ending after this hour
	queued_at timestamptz NOT NULL,      -- when the oldest unprocessed mark came
	waiting text                         -- why it cannot be rated yet (unregistered), or NULL
);
CREATE INDEX rollup_queue_ready ON rollup_queue (queued_at) WHERE waiting IS NULL;

-- Usage summed per account, month and price plan, kept by the worker in the
-- same transactions as usage_hourly, so hot checks (quota, spend cap, trial)
-- read a handful of rows.
CREATE TABLE account_month (
	account_id meter_id NOT NULL,
	month date NOT NULL CHECK (extract(day FROM month) = 1),
	price_plan_id integer NOT NULL REFERENCES price_plans (id),
	cpu_measured_us bigint NOT NULL DEFAULT 0,
	cpu_billed_us bigint NOT NULL DEFAULT 0,
	busy_us bigint NOT NULL DEFAULT 0,
	idle_us bigint NOT NULL DEFAULT 0,
	wall_us bigint NOT NULL DEFAULT 0,
	memory_mgib_us bigint NOT NULL DEFAULT 0,
	PRIMARY KEY (account_id, month, price_plan_id)
);

-- The worker reads a sandbox's samples by time.
CREATE INDEX samples_sandbox_ts ON samples (sandbox_id, ts);
CREATE INDEX sandboxes_account_running ON sandboxes (account_id) WHERE stopped_at IS NULL;
DROP INDEX sandboxes_account;

CREATE TRIGGER samples_mark AFTER INSERT ON samples
	REFERENCING NEW TABLE AS new_samples
	FOR EACH STATEMENT EXECUTE FUNCTION meter_mark_samples();

GRANT SELECT, INSERT, UPDATE, DELETE ON rollup_queue, account_month TO meter_api;
GRANT SELECT, INSERT, UPDATE, DELETE ON usage_hourly TO meter_api;
