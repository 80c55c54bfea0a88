-- 0029_by_key: the rollup worker takes its marks in two steps, the
-- same on PostgreSQL and on Citus. Citus locks rows (FOR UPDATE) only in a
-- statement that goes to one shard, and the queues are spread over shards by
-- their keys, so "the oldest marks, skipping locked ones" cannot be one
-- statement there. Each function reads the oldest candidates without a lock
-- (any number of shards), then locks them one by one by their key
-- (FOR UPDATE SKIP LOCKED, one shard each) until it holds what was asked. A
-- candidate another worker took meanwhile is skipped, as before; one that
-- changed is read again under its lock.

-- Up to n ready marks of rollup_queue (not parked, not waiting for a retry),
-- oldest first, locked until the transaction ends.
CREATE FUNCTION meter_rollup_take(n integer)
RETURNS TABLE (sandbox_id text, from_ts timestamptz)
LANGUAGE plpgsql SET search_path = public AS $$
DECLARE
	id text;
BEGIN
	IF n < 1 THEN
		RETURN;
	END IF;
	FOR id IN SELECT q.sandbox_id FROM rollup_queue q
	          WHERE q.waiting IS NULL
	            AND (q.retry_after IS NULL OR q.retry_after <= clock_timestamp())
	          ORDER BY q.queued_at LIMIT 4 * n
	LOOP
		RETURN QUERY SELECT q.sandbox_id::text, q.from_ts FROM rollup_queue q
		             WHERE q.sandbox_id = id AND q.waiting IS NULL
		               AND (q.retry_after IS NULL OR q.retry_after <= clock_timestamp())
		             FOR UPDATE SKIP LOCKED;
		IF FOUND THEN
			n := n - 1;
			EXIT WHEN n = 0;
		END IF;
	END LOOP;
END
$$;
REVOKE ALL ON FUNCTION meter_rollup_take(integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION meter_rollup_take(integer) TO meter_api;

-- The account of trial_queue queued first that no other worker holds, locked
-- until the transaction ends; no row when there is none.
CREATE FUNCTION meter_trial_take() RETURNS TABLE (account_id text)
LANGUAGE plpgsql SET search_path = public AS $$
DECLARE
	id text;
BEGIN
	FOR id IN SELECT q.account_id FROM trial_queue q ORDER BY q.queued_at LIMIT 8
	LOOP
		RETURN QUERY SELECT q.account_id::text FROM trial_queue q WHERE q.account_id = id
		             FOR UPDATE SKIP LOCKED;
		EXIT WHEN FOUND;
	END LOOP;
END
$$;
REVOKE ALL ON FUNCTION meter_trial_take() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION meter_trial_take() TO meter_api;

-- Up to n due webhook deliveries, leased for lease (their next_at moved past
-- it, their attempt counted), with what sending them needs.
CREATE FUNCTION meter_webhook_claim(n integer, lease interval)
RETURNS TABLE (id text, attempts integer, step integer, body text, url text, secret text,
               account_id text)
LANGUAGE plpgsql SET search_path = public AS $$
DECLARE
	c record;
BEGIN
	IF n < 1 THEN
		RETURN;
	END IF;
	FOR c IN SELECT d.account_id, d.id FROM webhook_deliveries d
	         WHERE d.state = 'pending' AND d.next_at <= now()
	         ORDER BY d.next_at LIMIT 4 * n
	LOOP
		PERFORM 1 FROM webhook_deliveries d
		WHERE d.account_id = c.account_id AND d.id = c.id
		  AND d.state = 'pending' AND d.next_at <= now()
		FOR UPDATE SKIP LOCKED;
		CONTINUE WHEN NOT FOUND;
		RETURN QUERY
		UPDATE webhook_deliveries d SET next_at = now() + lease, step = d.step + 1,
		                                attempts = d.attempts + 1
		FROM webhook_endpoints e
		WHERE d.account_id = c.account_id AND d.id = c.id AND e.id = d.endpoint_id
		RETURNING d.id, d.attempts, d.step, d.body, e.url, e.secret, d.account_id::text;
		IF FOUND THEN
			n := n - 1;
			EXIT WHEN n = 0;
		END IF;
	END LOOP;
END
$$;
REVOKE ALL ON FUNCTION meter_webhook_claim(integer, interval) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION meter_webhook_claim(integer, interval) TO meter_api;

-- What a batch of the rollup reads of its sandboxes (api/rollup.c, read_samples):
-- for sandbox i of ids, reading from w[i] (µs), its mark's from_ts marks[i]
-- (NULL: everything) and, for a trial's crossing hour, up to upto[i] (NULL: no
-- bound); lowest, the lowest of the w (a constant that prunes partitions);
-- horizon, where raw samples begin. Rows (kind, i, ...):
--   kind 0, one per incarnation: its first time in the whole history, where it
--     stood at the window's start and at its end (time of its last sample and
--     its highest counter, from raw samples after the horizon, what dropped
--     partitions knew (sample_seeds) and, while it holds, the checkpoint:
--     then only the samples after it are read), and the collector's end;
--   kind 1: each sample after the window's start;
--   kind 3: how many are stamped more than an hour ahead of now, and the first.
-- One sandbox at a time: each statement reads one sandbox's rows by its key,
-- one index scan on PostgreSQL and one shard on Citus. Times go out in µs since
-- the epoch.
CREATE FUNCTION meter_rollup_read(ids text[], w bigint[], lowest timestamptz,
                                  horizon timestamptz, marks bigint[], upto bigint[])
RETURNS TABLE (kind integer, k bigint, a bigint, b bigint, c bigint, d bigint, e bigint,
               f bigint, g bigint)
LANGUAGE plpgsql STABLE SET search_path = public AS $$
DECLARE
	i integer;
	id text;
	ws timestamptz;
	hi timestamptz;
	ahead timestamptz := now() + interval '1 hour';
	cp timestamptz;
	lo timestamptz;
BEGIN
	FOR i IN 1 .. coalesce(cardinality(ids), 0) LOOP
		id := ids[i];
		ws := 'epoch'::timestamptz + w[i] * interval '1 microsecond';
		hi := least(coalesce('epoch'::timestamptz + upto[i] * interval '1 microsecond',
		                     'infinity'), ahead);
		SELECT max(x.upto) INTO cp FROM rollup_checkpoints x WHERE x.sandbox_id = id;
		lo := CASE WHEN cp < 'epoch'::timestamptz + marks[i] * interval '1 microsecond'
		            AND cp <= ws THEN cp ELSE '-infinity' END;
		RETURN QUERY
		SELECT 0, i::bigint, h.incarnation,
		       (extract(epoch FROM min(h.first)) * 1000000)::bigint,
		       (extract(epoch FROM max(h.tw)) * 1000000)::bigint, max(h.cw),
		       (extract(epoch FROM max(h.ta)) * 1000000)::bigint, max(h.ca),
		       (SELECT (extract(epoch FROM n.ended_at) * 1000000)::bigint
		        FROM incarnation_ends n
		        WHERE n.sandbox_id = id AND n.incarnation = h.incarnation
		          AND n.ended_at <= ahead)
		FROM (SELECT s.incarnation, min(s.ts) first,
		             max(s.ts) FILTER (WHERE s.ts > horizon AND s.ts <= ws) tw,
		             max(s.cpu_usage_us) FILTER (WHERE s.ts > horizon AND s.ts <= ws) cw,
		             max(s.ts) FILTER (WHERE s.ts > horizon) ta,
		             max(s.cpu_usage_us) FILTER (WHERE s.ts > horizon) ca
		      FROM samples s WHERE s.sandbox_id = id AND s.ts > lo AND s.ts <= hi
		      GROUP BY s.incarnation
		      UNION ALL
		      SELECT x.incarnation, x.first_ts, x.last_ts, x.max_cpu_usage_us, x.last_ts,
		             x.max_cpu_usage_us
		      FROM sample_seeds x WHERE x.sandbox_id = id
		      UNION ALL
		      SELECT x.incarnation, x.first_ts, x.last_ts, x.max_cpu_usage_us, x.last_ts,
		             x.max_cpu_usage_us
		      FROM rollup_checkpoints x WHERE x.sandbox_id = id AND lo > '-infinity') h
		GROUP BY h.incarnation;
		RETURN QUERY
		SELECT 1, i::bigint, s.incarnation, (extract(epoch FROM s.ts) * 1000000)::bigint,
		       s.cpu_usage_us, NULL::bigint, NULL::bigint, NULL::bigint, NULL::bigint
		FROM samples s
		WHERE s.sandbox_id = id AND s.ts > ws AND s.ts > lowest AND s.ts <= hi;
		RETURN QUERY
		SELECT 3, i::bigint, count(*), (extract(epoch FROM min(s.ts)) * 1000000)::bigint,
		       NULL::bigint, NULL::bigint, NULL::bigint, NULL::bigint, NULL::bigint
		FROM samples s WHERE s.sandbox_id = id AND s.ts > ahead
		HAVING count(*) > 0;
	END LOOP;
END
$$;
REVOKE ALL ON FUNCTION meter_rollup_read(text[], bigint[], timestamptz, timestamptz, bigint[],
                                         bigint[]) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION meter_rollup_read(text[], bigint[], timestamptz, timestamptz,
                                            bigint[], bigint[]) TO meter_api;

-- The trial's crossing hour (api/rollup.c, after_sql): for each (ids[x],
-- incs[x]), the first sample after upto[x] (µs), not more than an hour ahead
-- of now, as (ks[x], incs[x], its time in µs, its counter). One probe of the
-- samples' key each, by the sandbox.
CREATE FUNCTION meter_rollup_after(ids text[], incs bigint[], upto bigint[], ks bigint[])
RETURNS TABLE (k bigint, incarnation bigint, ts_us bigint, cpu_usage_us bigint)
LANGUAGE plpgsql STABLE SET search_path = public AS $$
DECLARE
	x integer;
	ahead timestamptz := now() + interval '1 hour';
BEGIN
	FOR x IN 1 .. coalesce(cardinality(ids), 0) LOOP
		RETURN QUERY
		SELECT ks[x], incs[x], (extract(epoch FROM s.ts) * 1000000)::bigint, s.cpu_usage_us
		FROM samples s
		WHERE s.sandbox_id = ids[x] AND s.incarnation = incs[x]
		  AND s.ts > 'epoch'::timestamptz + upto[x] * interval '1 microsecond'
		  AND s.ts <= ahead
		ORDER BY s.ts LIMIT 1;
	END LOOP;
END
$$;
REVOKE ALL ON FUNCTION meter_rollup_after(text[], bigint[], bigint[], bigint[]) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION meter_rollup_after(text[], bigint[], bigint[], bigint[]) TO meter_api;
