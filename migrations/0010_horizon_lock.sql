-- Dropping a partition and moving the horizon exclude the rollup: a rollup
-- that read the old horizon must not then find the partition gone (its hours
-- would be re-rated without their raw samples). Rollups take an advisory lock
-- shared before reading sample_horizon; the drop takes it exclusively first.

CREATE OR REPLACE FUNCTION meter_drop_sample_partitions(keep interval)
RETURNS text[] LANGUAGE plpgsql SECURITY DEFINER SET search_path = public SET timezone = 'UTC' AS $$
DECLARE
	p record;
	had boolean;
	dropped text[] := '{}';
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
		-- every sample rolled up: no mark reaches into the partition
		EXIT WHEN EXISTS (SELECT 1 FROM rollup_queue WHERE from_ts < p.hi);
		-- the month invoiced as final for every account with usage in it
		EXIT WHEN EXISTS (
			SELECT 1 FROM account_month am
			WHERE am.month >= p.lo::date AND am.month < p.hi::date
			  AND NOT EXISTS (SELECT 1 FROM invoices iv
			                  WHERE iv.account_id = am.account_id AND iv.month = am.month));
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
			UPDATE sample_horizon SET raw_from = greatest(raw_from, p.hi);
		END IF;
		dropped := dropped || p.relname::text;
	END LOOP;
	RETURN dropped;
END
$$;
