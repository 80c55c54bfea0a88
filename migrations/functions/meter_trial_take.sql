-- meter_trial_take: The account of trial_queue queued first that no other
-- worker holds, locked until the transaction ends; no row when there is none.
-- In two steps, as meter_rollup_take, for Citus.
CREATE OR REPLACE FUNCTION meter_trial_take() RETURNS TABLE (account_id text)
LANGUAGE plpgsql SET search_path = public AS $$
DECLARE
	id text;
BEGIN
	FOR id IN SELECT q.account_id FROM trial_queue q ORDER BY q.queued_at LIMIT 8
	LOOP
		RETURN QUERY SELECT q.account_id::text FROM trial_queue q WHERE q.account_id = id
		             FOR UPDATE SKIP LOCKED;
		EXIT WHEN FOUND;
	END LOOP;
END
$$;

REVOKE ALL ON FUNCTION meter_trial_take() FROM PUBLIC;

GRANT EXECUTE ON FUNCTION meter_trial_take() TO meter_api;
