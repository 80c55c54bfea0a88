-- 0039_ingest_insert_first: the collector's write (meter_samples_ingest)
-- inserts its batch with a plain INSERT, and only when that meets a sample
-- already stored (a batch sent twice, or one that overlaps a batch written
-- before) inserts it again with ON CONFLICT DO NOTHING, in place of the
-- first.
--
-- Why: ON CONFLICT DO NOTHING makes every row a speculative insertion, a
-- search of the key for a conflict before the row and its key are inserted,
-- where a plain INSERT checks the key's uniqueness in the one descent that
-- inserts it. Nearly every batch is new. 200,000 rows of the fleet month
-- through this function into a month's partition, alternating: 2.73, 2.71,
-- 3.30 and 3.73 s with ON CONFLICT, 2.40, 2.49, 3.10 and 3.09 s plain; the
-- collector's whole write (bench_fleet at a tenth, alternating): 111,001,
-- 94,572 and 94,772 samples/s before, 138,843, 148,397 and 134,175 after.
--
-- One statement, run by EXECUTE with or without its ON CONFLICT clause, so
-- planned for each batch; against the statement written out twice,
-- alternating at a tenth: 145,995, 160,722 and 162,780 samples/s against
-- 127,344, 158,896 and 118,615.
--
-- The same rows are stored either way. The plain INSERT runs in a block of
-- its own (a subtransaction), so a unique violation undoes all of it, and
-- the second INSERT leaves out what is stored and inserts the rest; the
-- rows handed to meter_samples_arrived are the ones inserted, as before. A
-- batch sent twice at once: the second waits on the first's rows, as ON
-- CONFLICT did, and when the first commits, it meets them and inserts none
-- (test_ledger the_same_batch_written_at_once_is_stored_once).
-- Any other error (a check, a lock's timeout) ends the write as before.
CREATE OR REPLACE FUNCTION meter_samples_ingest(batch meter_sample_row[]) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public SET meter.samples_marked = 'on'
AS $$
DECLARE
	-- %s: nothing the first time, ON CONFLICT DO NOTHING after a duplicate
	ins constant text := $q$
		WITH ins AS (
			INSERT INTO samples (sandbox_id, incarnation, ts, account_id, host,
			                     cpu_usage_us, memory_current_bytes, memory_peak_bytes,
			                     memory_anon_kernel_bytes, memory_limit_bytes,
			                     cpu_limit_millicores, ended)
			SELECT * FROM unnest($1) %s
			RETURNING sandbox_id, incarnation, ts, account_id, cpu_limit_millicores,
			          memory_limit_bytes, ended)
		SELECT array_agg(ROW(sandbox_id, incarnation, ts, account_id, cpu_limit_millicores,
		                     memory_limit_bytes, ended)::meter_sample_arrival)
		FROM ins$q$;
	arrived meter_sample_arrival[];
BEGIN
	BEGIN
		EXECUTE format(ins, '') INTO arrived USING batch;
	EXCEPTION WHEN unique_violation THEN
		EXECUTE format(ins, 'ON CONFLICT DO NOTHING') INTO arrived USING batch;
	END;
	RETURN meter_samples_arrived(arrived);
END
$$;
