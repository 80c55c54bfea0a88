-- meter_distributed: Whether table t is one Citus has placed (distributed or a
-- reference table): false on a plain PostgreSQL, or before
-- migrations/citus/place.sql ran. Migrations and functions that differ on
-- Citus ask it.
CREATE OR REPLACE FUNCTION meter_distributed(t regclass) RETURNS boolean
LANGUAGE plpgsql STABLE AS $$
DECLARE
	placed boolean := false;
BEGIN
	IF EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'citus') THEN
		EXECUTE 'SELECT EXISTS (SELECT 1 FROM pg_dist_partition WHERE logicalrelid = $1)'
			INTO placed USING t;
	END IF;
	RETURN placed;
END
$$;
