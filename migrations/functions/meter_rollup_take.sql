-- meter_rollup_take: Up to n ready marks of rollup_queue (not parked, not
-- waiting for a retry), oldest first, locked until the transaction ends. In
-- two steps, the same on PostgreSQL and on Citus (which locks rows only in a
-- statement that goes to one shard): the oldest candidates read without a
-- lock, then locked one by one by their key with FOR UPDATE SKIP LOCKED until
-- it holds n; one another worker took meanwhile is skipped.
CREATE OR REPLACE FUNCTION meter_rollup_take(n integer)
RETURNS TABLE (sandbox_id text, from_ts timestamptz)
LANGUAGE plpgsql SET search_path = public AS $$
DECLARE
	id text;
BEGIN
	IF n < 1 THEN
		RETURN;
	END IF;
	FOR id IN SELECT q.sandbox_id FROM rollup_queue q
	          WHERE q.waiting IS NULL
	            AND (q.retry_after IS NULL OR q.retry_after <= clock_timestamp())
	          ORDER BY q.queued_at LIMIT 4 * n
	LOOP
		RETURN QUERY SELECT q.sandbox_id::text, q.from_ts FROM rollup_queue q
		             WHERE q.sandbox_id = id AND q.waiting IS NULL
		               AND (q.retry_after IS NULL OR q.retry_after <= clock_timestamp())
		             FOR UPDATE SKIP LOCKED;
		IF FOUND THEN
			n := n - 1;
			EXIT WHEN n = 0;
		END IF;
	END LOOP;
END
$$;

REVOKE ALL ON FUNCTION meter_rollup_take(integer) FROM PUBLIC;

GRANT EXECUTE ON FUNCTION meter_rollup_take(integer) TO meter_api;
