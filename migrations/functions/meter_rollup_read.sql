-- meter_rollup_read: What a rollup batch reads of its sandboxes
-- (rollup/read.c): for sandbox i of ids, reading from w[i] (µs), its mark's
-- from_ts marks[i] (NULL: everything) and, for a trial's crossing hour, up to
-- upto[i] (NULL: no bound); lowest, the lowest of the w (a constant that
-- prunes partitions); horizon, where raw samples begin. Rows (kind, i, ...):
--   kind 0, one per incarnation: its first time in the whole history, where
--     it stood at the window's start and at its end (time of its last sample
--     and its highest counter, from raw samples after the horizon, what
--     dropped partitions knew (sample_seeds) and, while it holds, the
--     checkpoint: then only the samples after it are read), and the
--     collector's end;
--   kind 1: each sample after the window's start, f 1 when the cgroup it came
--     from named another account than the sandbox's own (its path under the
--     collector's pattern: a sandbox id taken under another account, which
--     the rollup parks, never bills);
--   kind 3: how many are stamped more than an hour ahead of now, and the
--     first: those are not rated yet (a plan takes effect an hour after it is
--     published at the earliest, common/plans.h).
-- One sandbox at a time: each statement reads one sandbox's rows by its key,
-- one index scan on PostgreSQL and one shard on Citus. Times go out in µs
-- since the epoch.
CREATE OR REPLACE FUNCTION meter_rollup_read(ids text[], w bigint[], lowest timestamptz,
                                  horizon timestamptz, marks bigint[], upto bigint[])
RETURNS TABLE (kind integer, k bigint, a bigint, b bigint, c bigint, d bigint, e bigint,
               f bigint, g bigint)
LANGUAGE plpgsql STABLE SET search_path = public AS $$
DECLARE
	i integer;
	id text;
	ws timestamptz;
	hi timestamptz;
	ahead timestamptz := meter_rated_until();
	cp timestamptz;
	lo timestamptz;
	own text;
BEGIN
	FOR i IN 1 .. coalesce(cardinality(ids), 0) LOOP
		id := ids[i];
		ws := 'epoch'::timestamptz + w[i] * interval '1 microsecond';
		hi := least(coalesce('epoch'::timestamptz + upto[i] * interval '1 microsecond',
		                     'infinity'), ahead);
		SELECT max(x.upto) INTO cp FROM rollup_checkpoints x WHERE x.sandbox_id = id;
		SELECT x.account_id INTO own FROM sandboxes x WHERE x.id = ids[i];
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
		       s.cpu_usage_us, NULL::bigint,
		       CASE WHEN s.account_id IS NOT NULL AND own IS NOT NULL
		                 AND s.account_id <> own THEN 1::bigint END,
		       NULL::bigint, NULL::bigint
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

-- Its statements planned once a session (a generic plan), not once a sandbox:
-- planning over the partitions of samples cost more than the reads. Not on
-- Citus, which must see each sandbox's id to send a read to its shard
-- (citus/place.sql takes the setting off when it places the tables).
DO $$
BEGIN
	IF NOT meter_distributed('samples') THEN
		ALTER FUNCTION meter_rollup_read(text[], bigint[], timestamptz, timestamptz, bigint[],
	                                 bigint[])
			SET plan_cache_mode = force_generic_plan;
	END IF;
END
$$;
