-- 0028_writer_marks: the collector's write sets going what its samples start
-- (the rollup mark, a sandbox the collector found, incarnations and their
-- ends, the concurrency notice) itself, in the statement that inserts them:
-- meter_samples_ingest inserts a batch (duplicates left out) and hands the
-- rows it inserted to meter_samples_arrived.
--
-- The statement trigger samples_mark stays for every other writer (psql, a
-- backfill, the tests) and calls the same meter_samples_arrived; it stands
-- aside while meter_samples_ingest runs (meter.samples_marked = 'on', for the
-- function's own run only). On Citus, which runs no statement trigger on a
-- distributed table, the ingest function is what marks (docs/scaling.md). The
-- insert is the function's too, as its owner: Citus refuses, in one
-- transaction, rows of co-located shards written by two roles (the
-- collector's samples, the owner's marks).

CREATE TYPE meter_sample_arrival AS (
	sandbox_id text,
	incarnation bigint,
	ts timestamptz,
	account_id text,
	cpu_limit_millicores bigint,
	memory_limit_bytes bigint,
	ended boolean
);

-- The batch's rows (duplicates already left out); returns how many there were.
-- Each statement reads and writes one group of tables (the sandbox's, or the
-- account's) with arrays in between, so it runs the same on Citus, where a
-- statement may not join the two.
CREATE FUNCTION meter_samples_arrived(batch meter_sample_arrival[]) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public AS $$
DECLARE
	found meter_sample_arrival[];
	accounts_there text[];
	changed text[];
	began text[];
	back text[];
	b record;
	running bigint;
	most integer;
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
		SELECT array_agg(a.id) INTO accounts_there FROM accounts a
		WHERE a.id = ANY (ARRAY(SELECT DISTINCT account_id FROM unnest(found)));
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
	-- the newest incarnation of each sandbox, and when it began
	WITH inc AS (SELECT sandbox_id, incarnation, min(ts) f FROM unnest(batch) GROUP BY 1, 2),
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
	      UNION ALL SELECT DISTINCT sandbox_id, false FROM unnest(batch) WHERE ended) x;
	IF changed IS NOT NULL THEN
		PERFORM meter_sandbox_ends(changed);
	END IF;
	-- a sandbox that began to run (found by the collector, or a new incarnation of a
	-- stopped one) and fills its account up announces it, as a registration does
	IF began IS NULL AND back IS NULL THEN
		RETURN cardinality(batch);
	END IF;
	FOR b IN SELECT x.id, x.account_id, x.incarnation FROM sandboxes x
	         WHERE x.id = ANY (coalesce(began, '{}') || coalesce(back, '{}'))
	           AND x.stopped_at IS NULL
	         ORDER BY x.id
	LOOP
		SELECT a.max_concurrent INTO most FROM accounts a WHERE a.id = b.account_id;
		SELECT count(*) INTO running FROM sandboxes x
		WHERE x.account_id = b.account_id AND x.stopped_at IS NULL;
		IF running >= most THEN
			PERFORM meter_notify_limit(b.account_id, 'concurrency_limit',
			                           CASE WHEN b.id = ANY (coalesce(began, '{}')) THEN b.id
			                                ELSE b.id || '@' || b.incarnation END,
			                           jsonb_build_object('account_id', b.account_id,
			                                              'limit', 'concurrency_limit',
			                                              'running', running,
			                                              'max_concurrent', most,
			                                              'sandbox_id', b.id));
		END IF;
	END LOOP;
	RETURN cardinality(batch);
END
$$;
REVOKE ALL ON FUNCTION meter_samples_arrived(meter_sample_arrival[]) FROM PUBLIC;

-- A sample as the collector sends it (collector/batch.h, BATCH_COLUMNS).
CREATE TYPE meter_sample_row AS (
	sandbox_id text,
	incarnation bigint,
	ts timestamptz,
	account_id text,
	host text,
	cpu_usage_us bigint,
	memory_current_bytes bigint,
	memory_peak_bytes bigint,
	memory_anon_kernel_bytes bigint,
	memory_limit_bytes bigint,
	cpu_limit_millicores bigint,
	ended boolean
);

-- Inserts a batch, leaving out samples already there (a batch sent twice), and
-- sets going what the inserted ones start. Returns how many it inserted.
CREATE FUNCTION meter_samples_ingest(batch meter_sample_row[]) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public SET meter.samples_marked = 'on'
AS $$
DECLARE
	arrived meter_sample_arrival[];
BEGIN
	WITH ins AS (
		INSERT INTO samples (sandbox_id, incarnation, ts, account_id, host, cpu_usage_us,
		                     memory_current_bytes, memory_peak_bytes,
		                     memory_anon_kernel_bytes, memory_limit_bytes,
		                     cpu_limit_millicores, ended)
		SELECT * FROM unnest(batch)
		ON CONFLICT DO NOTHING
		RETURNING sandbox_id, incarnation, ts, account_id, cpu_limit_millicores,
		          memory_limit_bytes, ended)
	SELECT array_agg(ROW(sandbox_id, incarnation, ts, account_id, cpu_limit_millicores,
	                     memory_limit_bytes, ended)::meter_sample_arrival)
	INTO arrived FROM ins;
	RETURN meter_samples_arrived(arrived);
END
$$;
REVOKE ALL ON FUNCTION meter_samples_ingest(meter_sample_row[]) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION meter_samples_ingest(meter_sample_row[]) TO meter_collector;

CREATE OR REPLACE FUNCTION meter_mark_samples() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public AS $$
BEGIN
	IF current_setting('meter.samples_marked', true) = 'on' THEN
		RETURN NULL; -- meter_samples_ingest inserts, and marks itself
	END IF;
	PERFORM meter_samples_arrived(array_agg(ROW(sandbox_id, incarnation, ts, account_id,
	                                             cpu_limit_millicores, memory_limit_bytes,
	                                             ended)::meter_sample_arrival))
	FROM new_samples;
	RETURN NULL;
END
$$;

-- The same ends as 0017's, with the collector's end joined rather than read by
-- a subquery per sandbox: one plan on Citus, where both tables are co-located.
CREATE OR REPLACE FUNCTION meter_sandbox_ends(ids text[]) RETURNS void
LANGUAGE sql SECURITY DEFINER SET search_path = public AS $$
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
	WHERE s.id = x.id AND (s.stopped_at IS DISTINCT FROM x.stop OR s.ended_by IS DISTINCT FROM x.by);
$$;
