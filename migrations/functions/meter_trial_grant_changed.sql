-- meter_trial_grant_changed: The row trigger of accounts on a change of
-- trial_grant_seconds: queues the account in trial_queue, so the rollup finds
-- the hour its grant runs out in again (rule 8).
CREATE OR REPLACE FUNCTION meter_trial_grant_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	INSERT INTO trial_queue (account_id) VALUES (NEW.id) ON CONFLICT DO NOTHING;
	RETURN NULL;
END
$$;
