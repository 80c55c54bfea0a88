-- meter_us: A timestamptz as µs since the epoch: the one way a time becomes
-- the code's µs. Immutable and inlined, as meter_ts.
CREATE OR REPLACE FUNCTION meter_us(t timestamptz) RETURNS bigint
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
AS $$ SELECT (extract(epoch FROM t AT TIME ZONE 'UTC') * 1000000)::bigint $$;
