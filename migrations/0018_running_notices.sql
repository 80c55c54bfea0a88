-- 0018_running_notices: a sandbox that begins to run from its samples fills
-- its account up as a registration does.
--
-- A sandbox the collector finds (registered at its first sample) or a new
-- incarnation of a stopped sandbox (running again) that brings its account's
-- running sandboxes to max_concurrent sends the concurrency_limit notice on
-- channel meter_limits (0005), once: per sandbox for the one found, per
-- incarnation ("id@inode") for the one back. With the ends the collector sees
-- (0017) freeing places, an account fills up, frees and fills again, and each
-- filling is announced.
CREATE OR REPLACE FUNCTION meter_mark_samples() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public AS $$
DECLARE
	changed text[];
	began text[];
	back text[];
BEGIN
	INSERT INTO rollup_queue (sandbox_id, from_ts, queued_at)
	SELECT sandbox_id, min(ts), clock_timestamp() FROM new_samples GROUP BY sandbox_id
	ON CONFLICT (sandbox_id) DO UPDATE
		SET from_ts = least(rollup_queue.from_ts, EXCLUDED.from_ts),
		    queued_at = least(rollup_queue.queued_at, EXCLUDED.queued_at),
		    waiting = NULL, waiting_kind = NULL;
	-- a sandbox the collector found runs from its first sample: registered from its
	-- cgroup's limits when its path names an account that exists (otherwise the rollup
	-- says why it waits)
	WITH ins AS (
		INSERT INTO sandboxes (id, account_id, vcpus, memory_gib)
		SELECT n.sandbox_id, n.account_id, round(n.cpu_limit_millicores / 1000.0, 3),
		       ceil(n.memory_limit_bytes * 1000.0 / 1073741824) / 1000
		FROM (SELECT DISTINCT ON (sandbox_id) * FROM new_samples
		      WHERE account_id IS NOT NULL ORDER BY sandbox_id, ts DESC) n
		JOIN accounts a ON a.id = n.account_id
		WHERE n.cpu_limit_millicores BETWEEN 1 AND 256000
		  AND n.memory_limit_bytes BETWEEN 1 AND 1099511627776
		  AND NOT EXISTS (SELECT 1 FROM sandboxes s WHERE s.id = n.sandbox_id)
		ON CONFLICT (id) DO NOTHING
		RETURNING id)
	SELECT array_agg(id) INTO began FROM ins;
	-- ends, the earliest of each incarnation
	INSERT INTO incarnation_ends (sandbox_id, incarnation, ended_at)
	SELECT sandbox_id, incarnation, min(ts) FROM new_samples WHERE ended
	GROUP BY sandbox_id, incarnation ORDER BY 1, 2
	ON CONFLICT (sandbox_id, incarnation) DO UPDATE
		SET ended_at = least(incarnation_ends.ended_at, EXCLUDED.ended_at);
	-- the newest incarnation of each sandbox, and when it began
	WITH inc AS (SELECT sandbox_id, incarnation, min(ts) f FROM new_samples GROUP BY 1, 2),
	newest AS (SELECT DISTINCT ON (sandbox_id) sandbox_id, incarnation, f FROM inc
	           ORDER BY sandbox_id, f DESC, incarnation DESC),
	moved AS (UPDATE sandboxes s SET incarnation = n.incarnation,
	            incarnation_from = CASE WHEN s.incarnation = n.incarnation
	                                    THEN least(s.incarnation_from, n.f) ELSE n.f END
	          FROM newest n, sandboxes o WHERE s.id = n.sandbox_id AND o.id = s.id
	            AND (s.incarnation IS NULL OR s.incarnation_from IS NULL
	                 OR n.f > s.incarnation_from
	                 OR (s.incarnation = n.incarnation AND n.f < s.incarnation_from))
	          RETURNING s.id, o.stopped_at IS NOT NULL AND o.incarnation IS DISTINCT FROM
	                    n.incarnation again)
	SELECT array_agg(id), array_agg(id) FILTER (WHERE again) INTO changed, back
	FROM (SELECT id, again FROM moved
	      UNION ALL SELECT DISTINCT sandbox_id, false FROM new_samples WHERE ended) x;
	IF changed IS NOT NULL THEN
		PERFORM meter_sandbox_ends(changed);
	END IF;
	-- a sandbox that began to run (found by the collector, or a new incarnation of a
	-- stopped one) and fills its account up announces it, as a registration does
	IF began IS NOT NULL OR back IS NOT NULL THEN
		PERFORM meter_notify_limit(s.account_id, 'concurrency_limit',
		                           CASE WHEN s.id = ANY (began) THEN s.id
		                                ELSE s.id || '@' || s.incarnation END,
		                           jsonb_build_object('account_id', s.account_id,
		                                              'limit', 'concurrency_limit',
		                                              'running', r.n,
		                                              'max_concurrent', a.max_concurrent,
		                                              'sandbox_id', s.id))
		FROM sandboxes s JOIN accounts a ON a.id = s.account_id
		CROSS JOIN LATERAL (SELECT count(*) n FROM sandboxes x
		                    WHERE x.account_id = s.account_id AND x.stopped_at IS NULL) r
		WHERE (s.id = ANY (began) OR s.id = ANY (back)) AND s.stopped_at IS NULL
		  AND r.n >= a.max_concurrent;
	END IF;
	RETURN NULL;
END
$$;

