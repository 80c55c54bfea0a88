-- meter_webhook_claim: Up to n webhook deliveries that are due, leased for
-- lease (their next_at moved past it, their attempt counted), with what
-- sending them needs (api/webhook.c). In two steps, as meter_rollup_take, for
-- Citus.
CREATE OR REPLACE FUNCTION meter_webhook_claim(n integer, lease interval)
RETURNS TABLE (id text, attempts integer, step integer, body text, url text, secret text,
               account_id text)
LANGUAGE plpgsql SET search_path = public AS $$
DECLARE
	c record;
BEGIN
	IF n < 1 THEN
		RETURN;
	END IF;
	FOR c IN SELECT d.account_id, d.id FROM webhook_deliveries d
	         WHERE d.state = 'pending' AND d.next_at <= now()
	         ORDER BY d.next_at LIMIT 4 * n
	LOOP
		PERFORM 1 FROM webhook_deliveries d
		WHERE d.account_id = c.account_id AND d.id = c.id
		  AND d.state = 'pending' AND d.next_at <= now()
		FOR UPDATE SKIP LOCKED;
		CONTINUE WHEN NOT FOUND;
		RETURN QUERY
		UPDATE webhook_deliveries d SET next_at = now() + lease, step = d.step + 1,
		                                attempts = d.attempts + 1
		FROM webhook_endpoints e
		WHERE d.account_id = c.account_id AND d.id = c.id AND e.id = d.endpoint_id
		RETURNING d.id, d.attempts, d.step, d.body, e.url, e.secret, d.account_id::text;
		IF FOUND THEN
			n := n - 1;
			EXIT WHEN n = 0;
		END IF;
	END LOOP;
END
$$;

REVOKE ALL ON FUNCTION meter_webhook_claim(integer, interval) FROM PUBLIC;

GRANT EXECUTE ON FUNCTION meter_webhook_claim(integer, interval) TO meter_api;
