-- meter_drop_sample_partitions: The upkeep's drop of raw partitions of samples
-- (rollup/upkeep.c, meter-api's --raw-retention): every monthly partition that
-- ended at least keep ago, in order, while each may go
-- (meter_partition_droppable: all of it rated, its months final), is dropped;
-- what it knew of each sandbox's counters is kept in sample_seeds first, and
-- the horizon (sample_horizon.raw_from) moves past it, seeding the rows of
-- samples_default below the new horizon too. One process at a time (an
-- advisory lock tried, not waited for); no rollup rates while the horizon
-- moves (the rollups take 'meter_sample_horizon' shared, this exclusively). It
-- locks samples before a partition, as every writer does, so a late sample's
-- insert and a drop never deadlock. Returns the partitions it dropped that
-- held samples, for the upkeep to tell; an empty one (the months migration
-- 0001 made before the first sample came, on a fresh database) goes without
-- a word.
CREATE OR REPLACE FUNCTION meter_drop_sample_partitions(keep interval)
RETURNS text[] LANGUAGE plpgsql SECURITY DEFINER SET search_path = public SET timezone = 'UTC' AS $$
DECLARE
	p record;
	had boolean;
	old timestamptz;
	dropped text[] := '{}';
	locked boolean := false;
BEGIN
	-- one process at a time; a second one finds nothing to do
	IF NOT pg_try_advisory_xact_lock(hashtext('meter_drop_sample_partitions')) THEN
		RETURN dropped;
	END IF;
	-- no rollup is rating while the horizon moves: each takes this lock shared
	-- before it reads sample_horizon (api/rollup.c), so it sees either the
	-- partitions and the old horizon, or neither and the new one
	PERFORM pg_advisory_xact_lock(hashtext('meter_sample_horizon'));
	FOR p IN
		SELECT c.relname,
		       (regexp_match(pg_get_expr(c.relpartbound, c.oid), 'FROM \(''([^'']+)''\)'))[1]::timestamptz AS lo,
		       (regexp_match(pg_get_expr(c.relpartbound, c.oid), 'TO \(''([^'']+)''\)'))[1]::timestamptz AS hi
		FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
		WHERE i.inhparent = 'samples'::regclass AND c.relname ~ '^samples_[0-9]{6}$'
		ORDER BY 2
	LOOP
		EXIT WHEN p.hi > now() - keep;
		-- Looked at without a lock first: a partition that stays (a parked
		-- sandbox's marks, a month not yet final) costs the writers nothing.
		EXIT WHEN NOT meter_partition_droppable(p.lo, p.hi);
		-- Then the parent, and only then the partition. A writer holds samples
		-- (ROW EXCLUSIVE) before any partition, and the DROP below needs samples
		-- ACCESS EXCLUSIVE: holding the partition while waiting for the parent
		-- deadlocked with a writer whose transaction had inserted into samples
		-- and then reached into this partition.
		IF NOT locked THEN
			LOCK TABLE samples IN ACCESS EXCLUSIVE MODE;
			locked := true;
		END IF;
		-- The partition locked before the checks that count: an insert into it
		-- still in flight committed (with its mark) before they look, and a later
		-- one waits for this transaction and then lands in the default partition.
		EXECUTE format('LOCK TABLE %I IN ACCESS EXCLUSIVE MODE', p.relname);
		EXIT WHEN NOT meter_partition_droppable(p.lo, p.hi);
		EXECUTE format('SELECT EXISTS (SELECT 1 FROM %I)', p.relname) INTO had;
		EXECUTE format(
			'INSERT INTO sample_seeds AS s (sandbox_id, incarnation, first_ts, last_ts, max_cpu_usage_us)
			 SELECT sandbox_id, incarnation, min(ts), max(ts), max(cpu_usage_us) FROM %I
			 GROUP BY sandbox_id, incarnation
			 ON CONFLICT (sandbox_id, incarnation) DO UPDATE SET
			   first_ts = least(s.first_ts, EXCLUDED.first_ts),
			   last_ts = greatest(s.last_ts, EXCLUDED.last_ts),
			   max_cpu_usage_us = greatest(s.max_cpu_usage_us, EXCLUDED.max_cpu_usage_us)',
			p.relname);
		EXECUTE format('DROP TABLE %I', p.relname);
		-- An empty partition loses nothing: samples that come later for its
		-- range land in the default partition and are rated as any other.
		IF had THEN
			SELECT raw_from INTO old FROM sample_horizon;
			UPDATE sample_horizon SET raw_from = greatest(raw_from, p.hi);
			-- Rows of the default partition that the horizon now passes (a
			-- clock behind stamps samples before the first partition; an empty
			-- month dropped earlier sends later samples of its range there)
			-- were rated until now: what they knew goes to the seeds too, or a
			-- rating that reads the whole history would lose their counters
			-- while a checkpoint (0011) still holds them.
			INSERT INTO sample_seeds AS s (sandbox_id, incarnation, first_ts, last_ts, max_cpu_usage_us)
			SELECT sandbox_id, incarnation, min(ts), max(ts), max(cpu_usage_us) FROM samples_default
			WHERE ts > old AND ts <= p.hi
			GROUP BY sandbox_id, incarnation
			ON CONFLICT (sandbox_id, incarnation) DO UPDATE SET
			  first_ts = least(s.first_ts, EXCLUDED.first_ts),
			  last_ts = greatest(s.last_ts, EXCLUDED.last_ts),
			  max_cpu_usage_us = greatest(s.max_cpu_usage_us, EXCLUDED.max_cpu_usage_us);
			-- Checkpoints from before the new horizon summarise what the seeds
			-- now hold: they go (a sandbox still rated makes its own again), so
			-- stopped sandboxes do not keep rows for ever.
			DELETE FROM rollup_checkpoints WHERE upto <= p.hi;
			dropped := dropped || p.relname::text;
		END IF;
	END LOOP;
	RETURN dropped;
END
$$;

REVOKE ALL ON FUNCTION meter_drop_sample_partitions(interval) FROM PUBLIC;

GRANT EXECUTE ON FUNCTION meter_drop_sample_partitions(interval) TO meter_api;
