-- meter_sandbox_month_costs: Keeps sandbox_month_cost, each sandbox's cost per
-- month (priced by meter_part_nano), from its sandbox_month rows, for the
-- sandboxes of a rollup batch (accounts[x], sandboxes[x], from month froms[x]
-- on); rows left with no usage go, from both tables. Each sandbox's months are
-- found by its key (account_id, sandbox_id, month). The batch's accounts are
-- named by = ANY (accounts) only on Citus, which needs them to send the
-- statements to those accounts' shards: on PostgreSQL that filter made the
-- planner read every row of the batch's accounts, so it takes an array that is
-- NULL unless Citus placed the tables, and folds away in a plan made for the
-- call's values. The plan is made for each call (force_custom_plan): a plan
-- made once a session while the tables held a few rows kept scanning them
-- whole after they grew.
CREATE OR REPLACE FUNCTION meter_sandbox_month_costs(accounts text[], sandboxes text[], froms date[])
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
	shards text[] := CASE WHEN meter_distributed('sandbox_month') THEN accounts END;
BEGIN
	WITH j AS (SELECT * FROM unnest(accounts, sandboxes, froms) j(a, s, m)),
	t AS (SELECT sm.account_id, sm.month, sm.sandbox_id,
	             sum(meter_part_nano(sm.cpu_billed_us, sm.memory_mgib_us, p.cpu_vcpu_hour,
	                                 p.memory_gib_hour)) cost,
	             sum(sm.cpu_measured_us) cm, sum(sm.cpu_billed_us) cb, sum(sm.busy_us) bu,
	             sum(sm.idle_us) id, sum(sm.wall_us) wa, sum(sm.memory_mgib_us) me
	      FROM j JOIN sandbox_month sm ON sm.account_id = j.a AND sm.sandbox_id = j.s
	        AND sm.month >= j.m AND (shards IS NULL OR sm.account_id = ANY (shards))
	      JOIN price_plans p ON p.id = sm.price_plan_id
	      GROUP BY 1, 2, 3),
	gone AS (DELETE FROM sandbox_month_cost c USING j
	         WHERE c.account_id = j.a AND c.sandbox_id = j.s AND c.month >= j.m
	           AND (shards IS NULL OR c.account_id = ANY (shards))
	           AND NOT EXISTS (SELECT 1 FROM t WHERE t.account_id = c.account_id
	                           AND t.month = c.month AND t.sandbox_id = c.sandbox_id
	                           AND (t.cm > 0 OR t.cb > 0 OR t.wa > 0))
	         RETURNING c.account_id, c.month),
	emptied AS (DELETE FROM sandbox_month sm USING j
	            WHERE sm.account_id = j.a AND sm.sandbox_id = j.s AND sm.month >= j.m
	              AND (shards IS NULL OR sm.account_id = ANY (shards))
	              AND sm.cpu_measured_us = 0 AND sm.cpu_billed_us = 0 AND sm.wall_us = 0
	              AND sm.memory_mgib_us = 0),
	put AS (INSERT INTO sandbox_month_cost AS c (account_id, month, sandbox_id, cost_nano,
	          cpu_measured_us, cpu_billed_us, busy_us, idle_us, wall_us, memory_mgib_us)
	        SELECT account_id, month, sandbox_id, cost, cm, cb, bu, id, wa, me FROM t
	        WHERE cm > 0 OR cb > 0 OR wa > 0
	        ORDER BY 1, 2, 3
	        ON CONFLICT (account_id, month, sandbox_id) DO UPDATE SET
	          cost_nano = EXCLUDED.cost_nano, cpu_measured_us = EXCLUDED.cpu_measured_us,
	          cpu_billed_us = EXCLUDED.cpu_billed_us, busy_us = EXCLUDED.busy_us,
	          idle_us = EXCLUDED.idle_us, wall_us = EXCLUDED.wall_us,
	          memory_mgib_us = EXCLUDED.memory_mgib_us
	        WHERE (c.cost_nano, c.cpu_measured_us, c.cpu_billed_us, c.busy_us, c.idle_us,
	               c.wall_us, c.memory_mgib_us) IS DISTINCT FROM (EXCLUDED.cost_nano,
	               EXCLUDED.cpu_measured_us, EXCLUDED.cpu_billed_us, EXCLUDED.busy_us,
	               EXCLUDED.idle_us, EXCLUDED.wall_us, EXCLUDED.memory_mgib_us)
	        -- xmax is 0 on a row this statement inserted, not on one it updated
	        RETURNING c.account_id, c.month, c.xmax = 0 AS fresh),
	delta AS (SELECT account_id, month, sum(d) d
	          FROM (SELECT account_id, month, -1 d FROM gone
	                UNION ALL SELECT account_id, month, 1 FROM put WHERE fresh) x
	          GROUP BY 1, 2 HAVING sum(d) <> 0),
	-- a month counted already is updated (an INSERT would check its CHECK on the
	-- proposed row, a negative delta, before finding the conflict); a new one inserted
	bumped AS (UPDATE account_month_sandboxes n SET sandboxes = n.sandboxes + delta.d
	           FROM delta WHERE n.account_id = delta.account_id AND n.month = delta.month
	             AND (shards IS NULL OR n.account_id = ANY (shards))
	           RETURNING n.account_id, n.month)
	INSERT INTO account_month_sandboxes AS n (account_id, month, sandboxes)
	SELECT account_id, month, d FROM delta
	WHERE NOT EXISTS (SELECT 1 FROM bumped b WHERE b.account_id = delta.account_id
	                  AND b.month = delta.month)
	ORDER BY 1, 2
	ON CONFLICT (account_id, month) DO UPDATE SET sandboxes = n.sandboxes + EXCLUDED.sandboxes;
END
$$;

GRANT EXECUTE ON FUNCTION meter_sandbox_month_costs(text[], text[], date[]) TO meter_api;

ALTER FUNCTION meter_sandbox_month_costs(text[], text[], date[])
	SET plan_cache_mode = force_custom_plan;
