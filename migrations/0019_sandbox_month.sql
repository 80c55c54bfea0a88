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

-- The cost of one plan's part, in nano-dollars: quantity x price, half up, in
-- integers (the C side's meter_usage_cost).
CREATE FUNCTION meter_part_nano(cpu_billed_us numeric, memory_mgib_us numeric,
                                cpu_vcpu_hour numeric, memory_gib_hour numeric)
RETURNS numeric LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
	SELECT div(2 * cpu_billed_us * (cpu_vcpu_hour * 1000000000) + 3600000000, 7200000000)
	     + div(2 * memory_mgib_us * (memory_gib_hour * 1000000000) + 3600000000000,
	           7200000000000)
$$;

-- The cost rows of sandboxes (sandbox ids, account ids and months from, one
-- element each) from their sandbox_month rows; rows left with no usage go.
CREATE FUNCTION meter_sandbox_month_costs(accounts text[], sandboxes text[], froms date[])
RETURNS void LANGUAGE sql AS $$
	WITH j AS (SELECT * FROM unnest(accounts, sandboxes, froms) j(a, s, m)),
	t AS (SELECT sm.account_id, sm.month, sm.sandbox_id,
	             sum(meter_part_nano(sm.cpu_billed_us, sm.memory_mgib_us, p.cpu_vcpu_hour,
	                                 p.memory_gib_hour)) cost,
	             sum(sm.cpu_measured_us) cm, sum(sm.cpu_billed_us) cb, sum(sm.busy_us) bu,
	             sum(sm.idle_us) id, sum(sm.wall_us) wa, sum(sm.memory_mgib_us) me
	      FROM j JOIN sandbox_month sm ON sm.account_id = j.a AND sm.sandbox_id = j.s
	        AND sm.month >= j.m
	      JOIN price_plans p ON p.id = sm.price_plan_id
	      GROUP BY 1, 2, 3),
	gone AS (DELETE FROM sandbox_month_cost c USING j
	         WHERE c.account_id = j.a AND c.sandbox_id = j.s AND c.month >= j.m
	           AND NOT EXISTS (SELECT 1 FROM t WHERE t.account_id = c.account_id
	                           AND t.month = c.month AND t.sandbox_id = c.sandbox_id
	                           AND (t.cm > 0 OR t.cb > 0 OR t.wa > 0))),
	emptied AS (DELETE FROM sandbox_month sm USING j
	            WHERE sm.account_id = j.a AND sm.sandbox_id = j.s AND sm.month >= j.m
	              AND sm.cpu_measured_us = 0 AND sm.cpu_billed_us = 0 AND sm.wall_us = 0
	              AND sm.memory_mgib_us = 0)
	INSERT INTO sandbox_month_cost AS c (account_id, month, sandbox_id, cost_nano,
	  cpu_measured_us, cpu_billed_us, busy_us, idle_us, wall_us, memory_mgib_us)
	SELECT account_id, month, sandbox_id, cost, cm, cb, bu, id, wa, me FROM t
	WHERE cm > 0 OR cb > 0 OR wa > 0
	ORDER BY 1, 2, 3
	ON CONFLICT (account_id, month, sandbox_id) DO UPDATE SET cost_nano = EXCLUDED.cost_nano,
	  cpu_measured_us = EXCLUDED.cpu_measured_us, cpu_billed_us = EXCLUDED.cpu_billed_us,
	  busy_us = EXCLUDED.busy_us, idle_us = EXCLUDED.idle_us, wall_us = EXCLUDED.wall_us,
	  memory_mgib_us = EXCLUDED.memory_mgib_us
	WHERE (c.cost_nano, c.cpu_measured_us, c.cpu_billed_us, c.busy_us, c.idle_us, c.wall_us,
	       c.memory_mgib_us) IS DISTINCT FROM (EXCLUDED.cost_nano, EXCLUDED.cpu_measured_us,
	       EXCLUDED.cpu_billed_us, EXCLUDED.busy_us, EXCLUDED.idle_us, EXCLUDED.wall_us,
	       EXCLUDED.memory_mgib_us);
$$;

-- What is there already.
INSERT INTO sandbox_month (account_id, month, sandbox_id, price_plan_id, cpu_measured_us,
  cpu_billed_us, busy_us, idle_us, wall_us, memory_mgib_us)
SELECT account_id, (date_trunc('month', hour AT TIME ZONE 'UTC'))::date, sandbox_id,
       price_plan_id, sum(cpu_measured_us), sum(cpu_billed_us), sum(busy_us), sum(idle_us),
       sum(wall_us), sum(memory_mgib_us)
FROM usage_hourly GROUP BY 1, 2, 3, 4;
SELECT meter_sandbox_month_costs(array_agg(account_id), array_agg(sandbox_id), array_agg(m))
FROM (SELECT account_id, sandbox_id, min(month) AS m FROM sandbox_month GROUP BY 1, 2) x;

GRANT SELECT, INSERT, UPDATE, DELETE ON sandbox_month, sandbox_month_cost, usage_listings
	TO meter_api;
GRANT USAGE ON SEQUENCE usage_listings_id_seq TO meter_api;
GRANT EXECUTE ON FUNCTION meter_sandbox_month_costs(text[], text[], date[]) TO meter_api;
