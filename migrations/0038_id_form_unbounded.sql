-- 0038_id_form_unbounded: the form of an id (the meter_id domain, and on
-- Citus the distribution columns' CHECKs) is checked as a repetition without
-- a bound and a length:
--   VALUE ~ '^[A-Za-z0-9][A-Za-z0-9._:-]*$' AND length(VALUE) <= 128
-- instead of VALUE ~ '^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$'. (Two terms, no
-- BETWEEN: Citus makes each shard's constraints from their text, and a
-- BETWEEN read back from its text is a different expression, which
-- ATTACH PARTITION of a new month's shard refuses.)
--
-- The two accept the same strings (test_migrate's
-- the_id_form_is_rebuilt_on_a_filled_database_as_common_ids_checks_it holds
-- both to common/ids.c). PostgreSQL's regular expressions unroll a bounded
-- repetition into 127 copies of its state, and every row a writer inserts
-- runs the check once per id column: psql \copy into a samples partition
-- holding 3 million rows did 29,000 to 34,000 rows a second with the old
-- check, 56,000 to 61,000 with this one and 56,000 to 60,000 with no check
-- at all.
--
-- The new constraints are added NOT VALID: every stored id passed the old
-- check, which is the same rule, and validating would read every table
-- holding an id (samples whole) under a lock that stops its writers. They
-- are enforced on every row written from now on, as any constraint is.
ALTER DOMAIN meter_id DROP CONSTRAINT meter_id_check;
ALTER DOMAIN meter_id ADD CONSTRAINT meter_id_check
	CHECK (VALUE ~ '^[A-Za-z0-9][A-Za-z0-9._:-]*$' AND length(VALUE) <= 128)
	NOT VALID;

-- On Citus (tables placed before this migration) the distribution columns of
-- accounts, sandboxes and samples are text with the form as a CHECK
-- (citus/place.sql, step 0); ALTER TABLE sends the change to every shard. It
-- needs the three tables to itself, and writers take them in different
-- orders (the collector's write samples first, a registration accounts
-- first), so they are taken together and never waited for long while others
-- are held: each try waits at most 100 ms (below the 1 s deadlock_timeout),
-- lets go of everything and tries again, for up to a minute.
DO $$
DECLARE
	t record;
	waited text := current_setting('lock_timeout');
BEGIN
	IF NOT EXISTS (SELECT 1 FROM pg_constraint WHERE conname = 'samples_sandbox_id_form') THEN
		RETURN;
	END IF;
	FOR attempt IN 1..600 LOOP
		BEGIN
			PERFORM set_config('lock_timeout', '100ms', true);
			LOCK TABLE samples, accounts, sandboxes IN ACCESS EXCLUSIVE MODE;
			EXIT;
		EXCEPTION WHEN lock_not_available THEN
			IF attempt = 600 THEN
				RAISE;
			END IF;
		END;
	END LOOP;
	PERFORM set_config('lock_timeout', waited, true);
	FOR t IN SELECT * FROM (VALUES ('accounts', 'id'), ('sandboxes', 'id'),
	                               ('samples', 'sandbox_id')) AS v (tab, col) LOOP
		EXECUTE format('ALTER TABLE %I DROP CONSTRAINT %I', t.tab,
		               t.tab || '_' || t.col || '_form');
		EXECUTE format('ALTER TABLE %I ADD CONSTRAINT %I CHECK (%I ~ %L AND '
		               'length(%I) <= 128) NOT VALID', t.tab,
		               t.tab || '_' || t.col || '_form', t.col,
		               '^[A-Za-z0-9][A-Za-z0-9._:-]*$', t.col);
	END LOOP;
END
$$;
