-- meter_notify_limit: Records one crossing of a limit in limit_notices
-- (account, limit, period: once per account, limit and period) and, when it is
-- new, sends payload on channel meter_limits (common/limits.h). Returns
-- whether it was new.
CREATE OR REPLACE FUNCTION meter_notify_limit(account text, limit_name text, period text, payload jsonb)
RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
	INSERT INTO limit_notices (account_id, limit_name, period, payload)
	VALUES (account, limit_name, period, payload) ON CONFLICT DO NOTHING;
	IF NOT FOUND THEN
		RETURN false;
	END IF;
	PERFORM pg_notify('meter_limits', payload::text);
	RETURN true;
END
$$;

GRANT EXECUTE ON FUNCTION meter_notify_limit(text, text, text, jsonb) TO meter_api;
