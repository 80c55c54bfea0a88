-- meter_samples_ingest: The collector's write (collector/writer.c): inserts a
-- batch of samples and hands the rows inserted to meter_samples_arrived, in
-- the collector's one transaction; the only thing the collector's role may
-- call. A sample is keyed by (sandbox, incarnation, timestamp), so a batch
-- sent twice counts once. The batch goes in with a plain INSERT first, in a
-- block of its own (a subtransaction): nearly every batch is new, and a plain
-- INSERT checks a key's uniqueness in the one descent that stores it, where ON
-- CONFLICT makes every row a speculative insertion. When it meets a sample
-- already stored (a batch sent twice, or one overlapping a batch written
-- before), all of it is undone and the batch goes in again with ON CONFLICT DO
-- NOTHING: the same rows are stored either way, and only the ones inserted are
-- handed on. A batch sent twice at once waits on the first's rows and, once
-- that commits, inserts none (test_ledger
-- the_same_batch_written_at_once_is_stored_once). One statement, run by
-- EXECUTE with or without its ON CONFLICT clause, planned for each batch. Any
-- other error (a check, a lock's timeout) ends the write.
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

REVOKE ALL ON FUNCTION meter_samples_ingest(meter_sample_row[]) FROM PUBLIC;

GRANT EXECUTE ON FUNCTION meter_samples_ingest(meter_sample_row[]) TO meter_collector;
