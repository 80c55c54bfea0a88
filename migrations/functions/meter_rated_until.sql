-- meter_rated_until: how far ahead of now samples are rated: an hour, for a
-- host whose clock is a little ahead. A sample stamped later waits, counted,
-- until its time comes within the hour (meter_rollup_read,
-- meter_rollup_after), and a price plan takes effect no earlier than this
-- after it is published (common/plans.c plan_add): no interval rated before a
-- plan was known ends after it (rule 6). STABLE: now() is the transaction's
-- start.
CREATE OR REPLACE FUNCTION meter_rated_until() RETURNS timestamptz
LANGUAGE sql STABLE PARALLEL SAFE
AS $$ SELECT now() + interval '1 hour' $$;

REVOKE ALL ON FUNCTION meter_rated_until() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION meter_rated_until() TO meter_api;
