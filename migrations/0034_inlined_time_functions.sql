-- 0034_inlined_time_functions: meter_ts and meter_us (0030) give the same
-- values as before, from expressions PostgreSQL may inline.
--
-- PostgreSQL inlines a SQL function into the statement that calls it only
-- when its body is no more volatile than the function is declared. Both are
-- declared immutable, as Citus needs, but their bodies were stable
-- (timestamptz + interval and extract from a timestamptz depend on the time
-- zone in general), so every call ran the function on its own: three calls
-- made the quota check's state (api/queries.c Q_STATE) cost about 1.6 times
-- the same statement with the expressions written out.
--
-- The new bodies take the same path through UTC, where the time zone is
-- named and every operation is immutable: microseconds added to the epoch as
-- a timestamp, then read as UTC; an instant read as UTC, its epoch taken.
-- Microseconds only (no days, no months), so no zone could change either.
-- tests/integration/test_migrate.c compares them with 0030's bodies in
-- several time zones and checks that they are inlined.
CREATE OR REPLACE FUNCTION meter_ts(us bigint) RETURNS timestamptz
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
AS $$ SELECT ('epoch'::timestamp + us * interval '1 microsecond') AT TIME ZONE 'UTC' $$;

CREATE OR REPLACE FUNCTION meter_us(t timestamptz) RETURNS bigint
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
AS $$ SELECT (extract(epoch FROM t AT TIME ZONE 'UTC') * 1000000)::bigint $$;
