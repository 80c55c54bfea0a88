-- Partition upkeep by the service: monthly partitions of samples made ahead
-- of time, and raw partitions past their retention dropped, but only when
-- dropping cannot change a bill.
--
-- A partition may go when (1) it ended at least the retention ago, (2) every
-- sample in it has been rolled up (no rollup mark, pending or parked, reaches
-- into it), and (3) every account with usage in its month has that month's
-- invoice final. Before it goes, what rating later samples needs of it is
-- kept in sample_seeds: per sandbox incarnation its first and last time and
-- its highest counter (the series' seed, and the order of incarnations).
-- Partitions are dropped oldest first, so the raw data starts at one time,
-- sample_horizon.raw_from (the end of the last dropped partition that held
-- samples): the rollup never re-rates an hour before it.

CREATE TABLE sample_seeds (
	sandbox_id meter_id NOT NULL,
	incarnation bigint NOT NULL,
	first_ts timestamptz NOT NULL,
	last_ts timestamptz NOT NULL,
	max_cpu_usage_us bigint NOT NULL CHECK (max_cpu_usage_us >= 0),
	PRIMARY KEY (sandbox_id, incarnation)
);
COMMENT ON TABLE sample_seeds IS 'what dropped sample partitions knew of each sandbox incarnation';

CREATE TABLE sample_horizon (
	only_row boolean PRIMARY KEY DEFAULT true CHECK (only_row),
	raw_from timestamptz NOT NULL
);
INSERT INTO sample_horizon (raw_from) VALUES ('-infinity');

GRANT SELECT ON sample_seeds, sample_horizon TO meter_api;

-- The service makes partitions itself: as the owner of samples.
ALTER FUNCTION meter_ensure_sample_partitions(timestamptz, timestamptz)
	SECURITY DEFINER SET search_path = public;
REVOKE ALL ON FUNCTION meter_ensure_sample_partitions(timestamptz, timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION meter_ensure_sample_partitions(timestamptz, timestamptz) TO meter_api;

-- Drops the monthly partitions of samples that may go (see above), oldest
-- first, stopping at the first that may not. Returns their names.
CREATE FUNCTION meter_drop_sample_partitions(keep interval)
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
REVOKE ALL ON FUNCTION meter_drop_sample_partitions(interval) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION meter_drop_sample_partitions(interval) TO meter_api;
