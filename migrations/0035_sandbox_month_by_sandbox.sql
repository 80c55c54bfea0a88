-- 0035_sandbox_month_by_sandbox: sandbox_month's key is (account_id,
-- sandbox_id, month, price_plan_id) and sandbox_month_cost's (account_id,
-- sandbox_id, month): the sandbox before the month.
--
-- The rollup reads both by one sandbox from a month on
-- (meter_sandbox_month_costs: account_id = a AND sandbox_id = s AND month >= m).
-- Under the old keys, which put the month before the sandbox, that condition
-- bounds the scan by the account and the month only: each lookup read from
-- the sandbox's place to the end of the account's months, half of a month of
-- 100,000 sandboxes on average (80 to 117 ms for 8 sandboxes of such an
-- account, against 1.6 ms with these keys). With the sandbox first, the
-- lookup reads that sandbox's few rows.
--
-- Nothing else reads these tables by the old keys' order: the rollup's other
-- statements name the whole key (ON CONFLICT infers a unique index by its
-- columns, in any order), and the API's pages of a month (account_id and
-- month) read sandbox_month_cost by its ranking index, whose columns begin
-- (account_id, month).
--
-- Every row stays: each key is rebuilt in place, in this migration's
-- transaction. On PostgreSQL the new unique index is built first under a
-- SHARE lock (the API reads on, the rollup waits), then becomes the key. On
-- Citus, with the tables already distributed, the old key is dropped and the
-- new one added by ALTER TABLE, one subcommand each as Citus requires.
-- meter_distributed(t): whether t is a table Citus has placed (0036 asks too).
--
-- The function it defined or changed is now defined in
-- migrations/functions/meter_distributed.sql, as all functions are since 0040.

DO $$
BEGIN
	IF meter_distributed('sandbox_month') THEN
		ALTER TABLE sandbox_month DROP CONSTRAINT sandbox_month_pkey;
		ALTER TABLE sandbox_month ADD PRIMARY KEY (account_id, sandbox_id, month, price_plan_id);
		ALTER TABLE sandbox_month_cost DROP CONSTRAINT sandbox_month_cost_pkey;
		ALTER TABLE sandbox_month_cost ADD PRIMARY KEY (account_id, sandbox_id, month);
		RETURN;
	END IF;

	LOCK TABLE sandbox_month, sandbox_month_cost IN SHARE MODE;
	CREATE UNIQUE INDEX sandbox_month_key
		ON sandbox_month (account_id, sandbox_id, month, price_plan_id);
	CREATE UNIQUE INDEX sandbox_month_cost_key
		ON sandbox_month_cost (account_id, sandbox_id, month);
	ALTER TABLE sandbox_month DROP CONSTRAINT sandbox_month_pkey;
	ALTER TABLE sandbox_month
		ADD CONSTRAINT sandbox_month_pkey PRIMARY KEY USING INDEX sandbox_month_key;
	ALTER TABLE sandbox_month_cost DROP CONSTRAINT sandbox_month_cost_pkey;
	ALTER TABLE sandbox_month_cost
		ADD CONSTRAINT sandbox_month_cost_pkey PRIMARY KEY USING INDEX sandbox_month_cost_key;
END
$$;
