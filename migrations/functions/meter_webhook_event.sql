-- meter_webhook_event: Queues an event for every webhook endpoint that takes
-- it (all accounts' or this account's): one delivery each, its body the
-- event's JSON (type, timestamp, data). Wakes the delivery worker (NOTIFY
-- meter_webhooks) on PostgreSQL; on Citus this runs on a worker, in a
-- transaction Citus may prepare, which cannot NOTIFY, and the worker finds the
-- delivery within a second anyway.
CREATE OR REPLACE FUNCTION meter_webhook_event(account text, event text, data jsonb)
RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
	n integer;
BEGIN
	INSERT INTO webhook_deliveries (account_id, id, endpoint_id, type, body)
	SELECT account, 'msg_' || replace(gen_random_uuid()::text, '-', ''), e.id, event,
	       jsonb_build_object('type', event,
	                          'timestamp', to_char(now() AT TIME ZONE 'UTC',
	                                               'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
	                          'data', data)::text
	FROM webhook_endpoints e
	WHERE event = ANY (e.events) AND (e.account_id IS NULL OR e.account_id = account);
	GET DIAGNOSTICS n = ROW_COUNT;
	-- On Citus this runs on a worker, in a transaction that Citus may prepare (two
	-- phase commit), which cannot NOTIFY; meter-api listens on the coordinator
	-- anyway. Its delivery worker looks every second, and finds it then.
	IF n > 0 AND NOT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'citus') THEN
		PERFORM pg_notify('meter_webhooks', '');
	END IF;
	RETURN n;
END
$$;
