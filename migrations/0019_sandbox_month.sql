-- 0019_sandbox_month: an account's sandboxes of a month, ranked by cost without
-- summing their hours.
--
-- sandbox_month sums each sandbox's hours per month and price plan; the rollup
-- keeps it in the same statements and transactions as usage_hourly and
-- account_month (taking old hours out, adding new ones). sandbox_month_cost has
-- one row per account, month and sandbox with its totals and its cost, exactly
-- as the API computes it (per plan: CPU and memory each rounded half up to the
-- nano-dollar once, then summed); the rollup recomputes it for the sandboxes it
-- rated, and drops the rows left with no usage. Its index ranks a month's
-- sandboxes by cost (then id), so the top of a month of 100,000 sandboxes is an
-- index scan, not a sum of every hour.
--
-- usage_listings holds the order of a paged listing (GET
-- /v1/accounts/{id}/usage with a limit): the ids in the order of the first
-- page, so every page after it follows that order and a sandbox is listed
-- once, whatever usage lands meanwhile. A listing is kept a day.
--
-- The functions it defined or changed are now defined in migrations/functions/, one file
-- each (meter_part_nano.sql, meter_sandbox_month_costs.sql), as all functions
-- are since 0040.
CREATE TABLE sandbox_month (
	account_id meter_id NOT NULL,
	month date NOT NULL CHECK (extract(day FROM month) = 1),
	sandbox_id meter_id NOT NULL,
	price_plan_id integer NOT NULL REFERENCES price_plans (id),
	cpu_measured_us numeric NOT NULL DEFAULT 0,
	cpu_billed_us numeric NOT NULL DEFAULT 0,
	busy_us numeric NOT NULL DEFAULT 0,
	idle_us numeric NOT NULL DEFAULT 0,
	wall_us numeric NOT NULL DEFAULT 0,
	memory_mgib_us numeric NOT NULL DEFAULT 0,
	PRIMARY KEY (account_id, month, sandbox_id, price_plan_id)
);

CREATE TABLE sandbox_month_cost (
	account_id meter_id NOT NULL,
	month date NOT NULL CHECK (extract(day FROM month) = 1),
	sandbox_id meter_id NOT NULL,
	cost_nano numeric NOT NULL,
	cpu_measured_us numeric NOT NULL,
	cpu_billed_us numeric NOT NULL,
	busy_us numeric NOT NULL,
	idle_us numeric NOT NULL,
	wall_us numeric NOT NULL,
	memory_mgib_us numeric NOT NULL,
	PRIMARY KEY (account_id, month, sandbox_id)
);
CREATE INDEX sandbox_month_cost_rank ON sandbox_month_cost
	(account_id, month, cost_nano DESC, sandbox_id COLLATE "C");

CREATE TABLE usage_listings (
	id bigserial,
	account_id meter_id NOT NULL,
	range_from timestamptz NOT NULL,
	range_to timestamptz NOT NULL,
	created_at timestamptz NOT NULL DEFAULT now(),
	ids text[] NOT NULL,
	PRIMARY KEY (account_id, id)
);
CREATE INDEX usage_listings_created ON usage_listings (created_at);

-- An account's sandboxes by id, for GET /v1/accounts/{id}/sandboxes.
CREATE INDEX sandboxes_account_id ON sandboxes (account_id, id COLLATE "C");

-- What is there already.
INSERT INTO sandbox_month (account_id, month, sandbox_id, price_plan_id, cpu_measured_us,
  cpu_billed_us, busy_us, idle_us, wall_us, memory_mgib_us)
SELECT account_id, (date_trunc('month', hour AT TIME ZONE 'UTC'))::date, sandbox_id,
       price_plan_id, sum(cpu_measured_us), sum(cpu_billed_us), sum(busy_us), sum(idle_us),
       sum(wall_us), sum(memory_mgib_us)
FROM usage_hourly GROUP BY 1, 2, 3, 4;
INSERT INTO sandbox_month_cost (account_id, month, sandbox_id, cost_nano, cpu_measured_us,
  cpu_billed_us, busy_us, idle_us, wall_us, memory_mgib_us)
SELECT sm.account_id, sm.month, sm.sandbox_id,
       sum(meter_part_nano(sm.cpu_billed_us, sm.memory_mgib_us, p.cpu_vcpu_hour,
                           p.memory_gib_hour)),
       sum(sm.cpu_measured_us), sum(sm.cpu_billed_us), sum(sm.busy_us), sum(sm.idle_us),
       sum(sm.wall_us), sum(sm.memory_mgib_us)
FROM sandbox_month sm JOIN price_plans p ON p.id = sm.price_plan_id
GROUP BY 1, 2, 3
HAVING sum(sm.cpu_measured_us) > 0 OR sum(sm.cpu_billed_us) > 0 OR sum(sm.wall_us) > 0;
DELETE FROM sandbox_month WHERE cpu_measured_us = 0 AND cpu_billed_us = 0 AND wall_us = 0
  AND memory_mgib_us = 0;

GRANT SELECT, INSERT, UPDATE, DELETE ON sandbox_month, sandbox_month_cost, usage_listings
	TO meter_api;
GRANT USAGE ON SEQUENCE usage_listings_id_seq TO meter_api;
