-- meter_mark_samples: The statement trigger of samples (samples_mark) for
-- writers other than the collector (a test, a restore, an operator's INSERT):
-- hands the rows inserted to meter_samples_arrived, which marks them for the
-- rollup. The collector's write (meter_samples_ingest) marks what it inserts
-- itself and sets meter.samples_marked, so this does nothing then. Not on
-- Citus, which keeps no statement trigger (migrations/citus/place.sql drops
-- it): there the collector's write is the only way in.
CREATE OR REPLACE FUNCTION meter_mark_samples() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public AS $$
BEGIN
	IF current_setting('meter.samples_marked', true) = 'on' THEN
		RETURN NULL; -- meter_samples_ingest inserts, and marks itself
	END IF;
	PERFORM meter_samples_arrived(array_agg(ROW(sandbox_id, incarnation, ts, account_id,
	                                             cpu_limit_millicores, memory_limit_bytes,
	                                             ended, end_cpu)::meter_sample_arrival))
	FROM new_samples;
	RETURN NULL;
END
$$;

REVOKE ALL ON FUNCTION meter_mark_samples() FROM PUBLIC;
