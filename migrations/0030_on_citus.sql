-- 0030_on_citus: statements that run the same on PostgreSQL and on Citus
-- (docs/scaling.md). Citus sends a statement to the shards only when what it
-- computes from columns is immutable, plans a SQL function's statements with
-- their parameters unresolved (it cannot), and prepares (two-phase commit) a
-- transaction that wrote on several nodes, which must not have sent a NOTIFY
-- there.

-- µs since the epoch as a timestamptz. Immutable, unlike timestamptz +
-- interval in general: it adds microseconds only (no days, no months), so the
-- time zone never changes the result. Citus sends a statement that computes a
-- time from a column to the shards only when the computation is immutable.
CREATE FUNCTION meter_ts(us bigint) RETURNS timestamptz
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
AS $$ SELECT 'epoch'::timestamptz + us * interval '1 microsecond' $$;

-- The same as 0023's, in PL/pgSQL: Citus plans a SQL function's statement with
-- its parameters unresolved, and cannot; PL/pgSQL hands it their values.
CREATE OR REPLACE FUNCTION meter_sandbox_month_costs(accounts text[], sandboxes text[], froms date[])
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
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
	                           AND (t.cm > 0 OR t.cb > 0 OR t.wa > 0))
	         RETURNING c.account_id, c.month),
	emptied AS (DELETE FROM sandbox_month sm USING j
	            WHERE sm.account_id = j.a AND sm.sandbox_id = j.s AND sm.month >= j.m
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
	           RETURNING n.account_id, n.month)
	INSERT INTO account_month_sandboxes AS n (account_id, month, sandboxes)
	SELECT account_id, month, d FROM delta
	WHERE NOT EXISTS (SELECT 1 FROM bumped b WHERE b.account_id = delta.account_id
	                  AND b.month = delta.month)
	ORDER BY 1, 2
	ON CONFLICT (account_id, month) DO UPDATE SET sandboxes = n.sandboxes + EXCLUDED.sandboxes;
END
$$;

-- A timestamptz as µs since the epoch, immutable for the same reason (the
-- epoch of an instant does not depend on the time zone): Citus takes only
-- immutable expressions in RETURNING.
CREATE FUNCTION meter_us(t timestamptz) RETURNS bigint
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
AS $$ SELECT (extract(epoch FROM t) * 1000000)::bigint $$;

-- One delivery per endpoint that wants event for account; the number written.
CREATE OR REPLACE FUNCTION meter_webhook_event(account text, event text, data jsonb)
RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
	n integer;
BEGIN
	INSERT INTO webhook_deliveries (account_id, id, endpoint_id, type, body)
	SELECT account, 'msg_' || replace(gen_random_uuid()::text, '-', ''), e.id, event,
	       jsonb_build_object('type', event,
	                          'timestamp', to_char(now() AT TIME ZONE 'UTC',
	                                               'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
	                          'data', data)::text
	FROM webhook_endpoints e
	WHERE event = ANY (e.events) AND (e.account_id IS NULL OR e.account_id = account);
	GET DIAGNOSTICS n = ROW_COUNT;
	-- On Citus this runs on a worker, in a transaction that Citus may prepare (two
	-- phase commit), which cannot NOTIFY; meter-api listens on the coordinator
	-- anyway. Its delivery worker looks every second, and finds it then.
	IF n > 0 AND NOT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'citus') THEN
		PERFORM pg_notify('meter_webhooks', '');
	END IF;
	RETURN n;
END
$$;
