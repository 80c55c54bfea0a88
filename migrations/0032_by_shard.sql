-- 0032_by_shard: the collector's write and the rollup's month costs name the
-- sandboxes and accounts they read and write by = ANY (an array), which Citus
-- sends to their shards only (a join with unnest alone goes to every shard),
-- and what a batch of samples sets going costs one statement per kind, not
-- one per sandbox.
--
-- meter_samples_arrived (0028) now
--   - moves a sandbox's incarnation only when it changes: a later sample of the
--     incarnation it already has rewrote the row (and computed its end again)
--     in every batch, though nothing changed;
--   - sends the update of incarnations one row per sandbox, not the batch;
--   - counts the running sandboxes of the accounts whose sandboxes began to run
--     once per batch, grouped by account, instead of once per sandbox: on
--     Citus each count is a statement over every sandbox shard.
-- meter_sandbox_ends (0028) and meter_sandbox_month_costs (0030) add the
-- = ANY filters. What they decide is unchanged (test_reference and
-- test_ledger pin it; test_citus_plans counts the shards).

CREATE OR REPLACE FUNCTION meter_samples_arrived(batch meter_sample_arrival[]) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public AS $$
DECLARE
	found meter_sample_arrival[];
	accounts_there text[];
	changed text[];
	began text[];
	back text[];
	b record;
	new_ids text[];
	new_incarnations bigint[];
	new_froms timestamptz[];
	ended_ids text[];
	cand_ids text[];
	cand_accounts text[];
	cand_incarnations bigint[];
	count_accounts text[];
	counts bigint[];
	limit_accounts text[];
	limits integer[];
BEGIN
	IF coalesce(cardinality(batch), 0) = 0 THEN
		RETURN 0;
	END IF;
	INSERT INTO rollup_queue (sandbox_id, from_ts, queued_at)
	SELECT sandbox_id, min(ts), clock_timestamp() FROM unnest(batch) GROUP BY sandbox_id
	ON CONFLICT (sandbox_id) DO UPDATE
		SET from_ts = least(rollup_queue.from_ts, EXCLUDED.from_ts),
		    queued_at = least(rollup_queue.queued_at, EXCLUDED.queued_at),
		    waiting = NULL, waiting_kind = NULL;
	-- a sandbox the collector found runs from its first sample: registered from its
	-- cgroup's limits (its newest sample's) when its path names an account that
	-- exists (otherwise the rollup says why it waits)
	SELECT array_agg((n.sandbox_id, n.incarnation, n.ts, n.account_id, n.cpu_limit_millicores,
	                  n.memory_limit_bytes, n.ended)::meter_sample_arrival) INTO found
	FROM (SELECT DISTINCT ON (sandbox_id) * FROM unnest(batch)
	      WHERE account_id IS NOT NULL ORDER BY sandbox_id, ts DESC) n
	WHERE n.cpu_limit_millicores BETWEEN 1 AND 256000
	  AND n.memory_limit_bytes BETWEEN 1 AND 1099511627776;
	IF found IS NOT NULL THEN
		SELECT array_agg(DISTINCT n.account_id) INTO accounts_there FROM unnest(found) n;
		SELECT array_agg(a.id) INTO accounts_there FROM accounts a
		WHERE a.id = ANY (accounts_there);
		WITH ins AS (
			INSERT INTO sandboxes (id, account_id, vcpus, memory_gib)
			SELECT n.sandbox_id, n.account_id, round(n.cpu_limit_millicores / 1000.0, 3),
			       ceil(n.memory_limit_bytes * 1000.0 / 1073741824) / 1000
			FROM unnest(found) n WHERE n.account_id = ANY (accounts_there)
			ORDER BY n.sandbox_id
			ON CONFLICT (id) DO NOTHING
			RETURNING id)
		SELECT array_agg(id) INTO began FROM ins;
	END IF;
	-- ends, the earliest of each incarnation
	INSERT INTO incarnation_ends (sandbox_id, incarnation, ended_at)
	SELECT sandbox_id, incarnation, min(ts) FROM unnest(batch) WHERE ended
	GROUP BY sandbox_id, incarnation ORDER BY 1, 2
	ON CONFLICT (sandbox_id, incarnation) DO UPDATE
		SET ended_at = least(incarnation_ends.ended_at, EXCLUDED.ended_at);
	-- the newest incarnation of each sandbox, and when it began: one row per
	-- sandbox, worked out here first, so the update below carries those rows
	-- and not the batch, and names its sandboxes by = ANY (an array), which
	-- Citus sends to their shards only (a join with unnest alone goes to all)
	SELECT array_agg(n.sandbox_id), array_agg(n.incarnation), array_agg(n.f)
	INTO new_ids, new_incarnations, new_froms
	FROM (SELECT DISTINCT ON (sandbox_id) sandbox_id, incarnation, f
	      FROM (SELECT sandbox_id, incarnation, min(ts) f FROM unnest(batch) GROUP BY 1, 2) inc
	      ORDER BY sandbox_id, f DESC, incarnation DESC) n;
	WITH moved AS (
		UPDATE sandboxes s SET incarnation = n.incarnation,
		       incarnation_from = CASE WHEN s.incarnation = n.incarnation
		                               THEN least(s.incarnation_from, n.f) ELSE n.f END
		FROM unnest(new_ids, new_incarnations, new_froms) n(sandbox_id, incarnation, f),
		     sandboxes o
		WHERE s.id = n.sandbox_id AND o.id = s.id
		  AND s.id = ANY (new_ids) AND o.id = ANY (new_ids)
		  AND (s.incarnation IS NULL OR s.incarnation_from IS NULL
		       OR (s.incarnation <> n.incarnation AND n.f > s.incarnation_from)
		       OR (s.incarnation = n.incarnation AND n.f < s.incarnation_from))
		RETURNING s.id, o.stopped_at IS NOT NULL AND o.incarnation IS DISTINCT FROM
		          n.incarnation again)
	SELECT array_agg(id), array_agg(id) FILTER (WHERE again) INTO changed, back FROM moved;
	SELECT array_agg(DISTINCT sandbox_id) INTO ended_ids FROM unnest(batch) WHERE ended;
	IF ended_ids IS NOT NULL THEN
		changed := coalesce(changed, '{}') || ended_ids;
	END IF;
	IF changed IS NOT NULL THEN
		PERFORM meter_sandbox_ends(changed);
	END IF;
	-- a sandbox that began to run (found by the collector, or a new incarnation of a
	-- stopped one) and fills its account up announces it, as a registration does
	IF began IS NULL AND back IS NULL THEN
		RETURN cardinality(batch);
	END IF;
	-- the accounts' running counts, each read once for the batch: on Citus a count
	-- by account goes to every sandbox shard
	SELECT array_agg(x.id ORDER BY x.id), array_agg(x.account_id ORDER BY x.id),
	       array_agg(x.incarnation ORDER BY x.id)
	INTO cand_ids, cand_accounts, cand_incarnations
	FROM sandboxes x
	WHERE x.id = ANY (coalesce(began, '{}') || coalesce(back, '{}')) AND x.stopped_at IS NULL;
	IF cand_ids IS NULL THEN
		RETURN cardinality(batch);
	END IF;
	SELECT array_agg(x.account_id), array_agg(x.n) INTO count_accounts, counts
	FROM (SELECT account_id, count(*) n FROM sandboxes
	      WHERE account_id = ANY (cand_accounts) AND stopped_at IS NULL
	      GROUP BY account_id) x;
	SELECT array_agg(a.id), array_agg(a.max_concurrent) INTO limit_accounts, limits
	FROM accounts a WHERE a.id = ANY (cand_accounts);
	FOR b IN SELECT c.id, c.account_id, c.incarnation, r.n running, l.most
	         FROM unnest(cand_ids, cand_accounts, cand_incarnations) c(id, account_id, incarnation)
	         JOIN unnest(count_accounts, counts) r(account_id, n) USING (account_id)
	         JOIN unnest(limit_accounts, limits) l(account_id, most) USING (account_id)
	         WHERE r.n >= l.most
	         ORDER BY c.id
	LOOP
		PERFORM meter_notify_limit(b.account_id, 'concurrency_limit',
		                           CASE WHEN b.id = ANY (coalesce(began, '{}')) THEN b.id
		                                ELSE b.id || '@' || b.incarnation END,
		                           jsonb_build_object('account_id', b.account_id,
		                                              'limit', 'concurrency_limit',
		                                              'running', b.running,
		                                              'max_concurrent', b.most,
		                                              'sandbox_id', b.id));
	END LOOP;
	RETURN cardinality(batch);
END
$$;

-- The same ends as 0028's, the sandboxes named by = ANY (ids) on the updated
-- table too, and in PL/pgSQL, so Citus sees ids and sends the update to their
-- shards only (a SQL function's statement goes to all of them).
CREATE OR REPLACE FUNCTION meter_sandbox_ends(ids text[]) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public AS $$
BEGIN
	UPDATE sandboxes s SET stopped_at = x.stop, ended_by = x.by
	FROM (SELECT v.id,
	             CASE WHEN v.p IS NULL AND v.c IS NULL THEN NULL
	                  ELSE greatest(least(v.p, v.c), v.started_at) END stop,
	             CASE WHEN v.p IS NULL AND v.c IS NULL THEN NULL
	                  WHEN v.c IS NULL OR v.p <= v.c THEN 'platform' ELSE 'collector' END by
	      FROM (SELECT b.id, b.started_at,
	                   CASE WHEN b.platform_stopped_at >= coalesce(b.incarnation_from,
	                                                               '-infinity')
	                        THEN b.platform_stopped_at END p,
	                   e.ended_at c
	            FROM sandboxes b
	            LEFT JOIN incarnation_ends e
	                   ON e.sandbox_id = b.id AND e.incarnation = b.incarnation
	            WHERE b.id = ANY (ids)) v) x
	WHERE s.id = x.id AND s.id = ANY (ids)
	  AND (s.stopped_at IS DISTINCT FROM x.stop OR s.ended_by IS DISTINCT FROM x.by);
END
$$;

-- The month's costs of a rollup batch's sandboxes (0030), each table named by
-- its key = ANY (the batch's accounts) as well as by the join with the arrays,
-- so Citus sends each statement to the batch's shards only.
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
	        AND sm.month >= j.m AND sm.account_id = ANY (accounts)
	      JOIN price_plans p ON p.id = sm.price_plan_id
	      GROUP BY 1, 2, 3),
	gone AS (DELETE FROM sandbox_month_cost c USING j
	         WHERE c.account_id = j.a AND c.sandbox_id = j.s AND c.month >= j.m
	           AND c.account_id = ANY (accounts)
	           AND NOT EXISTS (SELECT 1 FROM t WHERE t.account_id = c.account_id
	                           AND t.month = c.month AND t.sandbox_id = c.sandbox_id
	                           AND (t.cm > 0 OR t.cb > 0 OR t.wa > 0))
	         RETURNING c.account_id, c.month),
	emptied AS (DELETE FROM sandbox_month sm USING j
	            WHERE sm.account_id = j.a AND sm.sandbox_id = j.s AND sm.month >= j.m
	              AND sm.account_id = ANY (accounts)
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
	             AND n.account_id = ANY (accounts)
	           RETURNING n.account_id, n.month)
	INSERT INTO account_month_sandboxes AS n (account_id, month, sandboxes)
	SELECT account_id, month, d FROM delta
	WHERE NOT EXISTS (SELECT 1 FROM bumped b WHERE b.account_id = delta.account_id
	                  AND b.month = delta.month)
	ORDER BY 1, 2
	ON CONFLICT (account_id, month) DO UPDATE SET sandboxes = n.sandboxes + EXCLUDED.sandboxes;
END
$$;
