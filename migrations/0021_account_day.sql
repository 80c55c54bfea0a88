-- 0021_account_day: an account's usage per day, for the dashboard's chart of
-- the month and the forecast's last seven days.
--
-- account_day sums each account's hours per UTC day and price plan, kept by the
-- rollup in the same statements and transactions as usage_hourly,
-- account_month and sandbox_month. Summing the hours instead took 50 to 90 ms
-- for an account of 100,000 sandboxes a month (150,000 hourly rows) on every
-- dashboard load; this reads at most 31 rows per plan.
CREATE TABLE account_day (
	account_id meter_id NOT NULL,
	day date NOT NULL,
	price_plan_id integer NOT NULL REFERENCES price_plans (id),
	cpu_measured_us numeric NOT NULL DEFAULT 0,
	cpu_billed_us numeric NOT NULL DEFAULT 0,
	busy_us numeric NOT NULL DEFAULT 0,
	idle_us numeric NOT NULL DEFAULT 0,
	wall_us numeric NOT NULL DEFAULT 0,
	memory_mgib_us numeric NOT NULL DEFAULT 0,
	PRIMARY KEY (account_id, day, price_plan_id)
);

-- What is there already. SHARE mode: a rollup running meanwhile waits, so no
-- hour is summed twice or missed.
LOCK TABLE usage_hourly IN SHARE MODE;
INSERT INTO account_day (account_id, day, price_plan_id, cpu_measured_us, cpu_billed_us,
  busy_us, idle_us, wall_us, memory_mgib_us)
SELECT account_id, (hour AT TIME ZONE 'UTC')::date, price_plan_id, sum(cpu_measured_us),
       sum(cpu_billed_us), sum(busy_us), sum(idle_us), sum(wall_us), sum(memory_mgib_us)
FROM usage_hourly GROUP BY 1, 2, 3;

GRANT SELECT, INSERT, UPDATE, DELETE ON account_day TO meter_api;
