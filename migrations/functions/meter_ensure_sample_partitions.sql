-- meter_ensure_sample_partitions: Creates the monthly partitions of samples
-- for every month from the one holding from_ts through the one holding
-- through_ts; existing ones are left alone. Returns how many it made.
-- migrations/0001 makes them from the default plan's month to a year ahead,
-- the upkeep (rollup/upkeep.c) three months ahead every hour.
CREATE OR REPLACE FUNCTION meter_ensure_sample_partitions(from_ts timestamptz, through_ts timestamptz)
RETURNS integer LANGUAGE plpgsql SET timezone = 'UTC' AS $$
DECLARE
	m timestamptz := date_trunc('month', from_ts AT TIME ZONE 'UTC') AT TIME ZONE 'UTC';
	made integer := 0;
	part text;
BEGIN
	WHILE m <= through_ts LOOP
		part := 'samples_' || to_char(m AT TIME ZONE 'UTC', 'YYYYMM');
		IF to_regclass(part) IS NULL THEN
			EXECUTE format('CREATE TABLE %I PARTITION OF samples FOR VALUES FROM (%L) TO (%L)',
				part, m, m + interval '1 month');
			made := made + 1;
		END IF;
		m := m + interval '1 month';
	END LOOP;
	RETURN made;
END
$$;

ALTER FUNCTION meter_ensure_sample_partitions(timestamptz, timestamptz)
	SECURITY DEFINER SET search_path = public;

REVOKE ALL ON FUNCTION meter_ensure_sample_partitions(timestamptz, timestamptz) FROM PUBLIC;

GRANT EXECUTE ON FUNCTION meter_ensure_sample_partitions(timestamptz, timestamptz) TO meter_api;
