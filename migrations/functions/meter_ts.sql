-- meter_ts: The time us µs after the epoch, in UTC: the one way the code's µs
-- become timestamptz. Immutable, as Citus needs to send what uses it to the
-- shards, with a body PostgreSQL inlines (a timestamp plus an interval, read
-- as UTC).
CREATE OR REPLACE FUNCTION meter_ts(us bigint) RETURNS timestamptz
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
AS $$ SELECT ('epoch'::timestamp + us * interval '1 microsecond') AT TIME ZONE 'UTC' $$;
