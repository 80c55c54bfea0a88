-- 0036_rollup_read_generic_plans: on PostgreSQL, meter_rollup_read and
-- meter_rollup_after (0029) plan their statements once a session, not once
-- a sandbox.
--
-- Each function runs a few statements per sandbox of a batch, each with the
-- sandbox's id and times as parameters. Left to choose, PostgreSQL keeps
-- planning them again for every sandbox (a custom plan, since the generic
-- plan of a read of the partitioned samples looks dearer before run-time
-- pruning), and planning over samples' partitions costs more than the reads:
-- 320 sandboxes of a fleet's month took 165 to 210 ms to read that way and
-- 27 to 45 ms with the generic plan, which prunes the partitions when it runs.
-- With the setting on the functions, each session plans them once.
--
-- Not on Citus: there a generic plan of these reads cannot be distributed
-- (Citus must see the sandbox's id to find its shard), so a database whose
-- tables are already placed is left as it is, and citus/place.sql takes the
-- setting off when it places them.
DO $$
BEGIN
	IF NOT meter_distributed('samples') THEN
		ALTER FUNCTION meter_rollup_read(text[], bigint[], timestamptz, timestamptz, bigint[],
		                                 bigint[])
			SET plan_cache_mode = force_generic_plan;
		ALTER FUNCTION meter_rollup_after(text[], bigint[], bigint[], bigint[])
			SET plan_cache_mode = force_generic_plan;
	END IF;
END
$$;
