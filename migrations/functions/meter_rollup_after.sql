-- meter_rollup_after: For the trial's crossing hour (rollup/read.c): for each
-- sandbox (ids[x], incarnation incs[x]), the first sample after upto[x] (µs),
-- not more than an hour ahead of now, as (ks[x], incs[x], its time in µs, its
-- counter). One probe of the samples' key each, by the sandbox.
CREATE OR REPLACE FUNCTION meter_rollup_after(ids text[], incs bigint[], upto bigint[], ks bigint[])
RETURNS TABLE (k bigint, incarnation bigint, ts_us bigint, cpu_usage_us bigint)
LANGUAGE plpgsql STABLE SET search_path = public AS $$
DECLARE
	x integer;
	ahead timestamptz := meter_rated_until();
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

-- Its statements planned once a session (a generic plan), not once a sandbox:
-- planning over the partitions of samples cost more than the reads. Not on
-- Citus, which must see each sandbox's id to send a read to its shard
-- (citus/place.sql takes the setting off when it places the tables).
DO $$
BEGIN
	IF NOT meter_distributed('samples') THEN
		ALTER FUNCTION meter_rollup_after(text[], bigint[], bigint[], bigint[])
			SET plan_cache_mode = force_generic_plan;
	END IF;
END
$$;
