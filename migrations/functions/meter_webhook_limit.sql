-- meter_webhook_limit: The row trigger of limit_notices: a limit crossed sends
-- limit.trial_exhausted, limit.concurrency_reached or limit.spend_cap_reached,
-- with the notice's payload.
CREATE OR REPLACE FUNCTION meter_webhook_limit() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	PERFORM meter_webhook_event(NEW.account_id,
		CASE NEW.limit_name WHEN 'trial_spent' THEN 'limit.trial_exhausted'
		                    WHEN 'concurrency_limit' THEN 'limit.concurrency_reached'
		                    ELSE 'limit.spend_cap_reached' END,
		NEW.payload);
	RETURN NULL;
END
$$;
