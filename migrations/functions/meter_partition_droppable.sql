-- meter_partition_droppable: Whether the raw partition [lo, hi) of samples may
-- be dropped: no mark of the rollup reaches into it (every sample in it rated)
-- and every account with usage in its months has a final invoice for them.
-- PL/pgSQL, not SQL: Citus cannot plan a SQL function's statement over
-- distributed tables with its parameters unresolved.
CREATE OR REPLACE FUNCTION meter_partition_droppable(lo timestamptz, hi timestamptz)
RETURNS boolean LANGUAGE plpgsql STABLE SET search_path = public SET timezone = 'UTC' AS $$
BEGIN
	RETURN NOT EXISTS (SELECT 1 FROM rollup_queue WHERE from_ts < hi)
	   AND NOT EXISTS (
		SELECT 1 FROM account_month am
		WHERE am.month >= lo::date AND am.month < hi::date
		  AND NOT EXISTS (SELECT 1 FROM invoices iv
		                  WHERE iv.account_id = am.account_id AND iv.month = am.month));
END
$$;

REVOKE ALL ON FUNCTION meter_partition_droppable(timestamptz, timestamptz) FROM PUBLIC;
