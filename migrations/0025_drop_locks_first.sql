-- 0025_drop_locks_first: a raw partition is locked before it is judged.
--
-- meter_drop_sample_partitions checked that no rollup mark reached into a
-- partition, then dropped it. A sample for that month inserted meanwhile (a
-- late sample, a spool replay) committed between the check and the DROP, which
-- waited for it and then took it along: its mark was rated on nothing. The
-- function now takes the partition's ACCESS EXCLUSIVE lock first, so the
-- checks see every insert that got in, and the inserts that come after wait
-- and go to the default partition.
CREATE OR REPLACE FUNCTION meter_drop_sample_partitions(keep interval)
RETURNS text[] LANGUAGE plpgsql SECURITY DEFINER SET search_path = public SET timezone = 'UTC' AS $$
DECLARE
	p record;
	had boolean;
	old timestamptz;
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
		-- The partition locked first: an insert into it still in flight commits
		-- (with its mark) before the checks below look, and a later one waits
		-- for this transaction and then lands in the default partition. Checked
		-- before the lock, a late sample committed between the check and the
		-- DROP went with the partition.
		EXECUTE format('LOCK TABLE %I IN ACCESS EXCLUSIVE MODE', p.relname);
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
		END IF;
		dropped := dropped || p.relname::text;
	END LOOP;
	RETURN dropped;
END
$$;
