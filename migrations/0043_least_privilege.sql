-- 0043_least_privilege: the roles meter's programs log in as, and API keys
-- for hooks.
--
-- meter_api and meter_collector, the groups of 0001, may log in: each program
-- then holds its grants and nothing more. Logged in as meter_collector, a
-- collector's RESET ROLE comes back to meter_collector. meter_reader is for a
-- read replica's connections (meter-api --read-database-url): SELECT on
-- meter's tables, now and later (the default privileges of the role that
-- migrates), nothing else; a replica refuses writes whatever the role. The
-- embedded set-up (scripts/run.sh) runs meter-api and meter-collector as
-- these; an operator gives them passwords or grants them to login roles of
-- their own (docs/operations.md, "Roles and keys"). A role a database
-- administrator made beforehand is left as it is, so a migrating role
-- without CREATEROLE passes.
DO $$
BEGIN
	IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'meter_reader') THEN
		BEGIN
			CREATE ROLE meter_reader LOGIN;
		EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL;
		END;
	END IF;
	IF NOT (SELECT rolcanlogin FROM pg_roles WHERE rolname = 'meter_api') THEN
		ALTER ROLE meter_api LOGIN;
	END IF;
	IF NOT (SELECT rolcanlogin FROM pg_roles WHERE rolname = 'meter_collector') THEN
		ALTER ROLE meter_collector LOGIN;
	END IF;
END
$$;
GRANT USAGE ON SCHEMA public TO meter_reader;
GRANT SELECT ON ALL TABLES IN SCHEMA public TO meter_reader;
ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT SELECT ON TABLES TO meter_reader;

-- The API's upkeep deletes webhook deliveries done with (rollup/upkeep.c).
GRANT DELETE ON webhook_deliveries TO meter_api;

-- A collector writes through meter_samples_ingest alone (SECURITY DEFINER):
-- what it may write is what that function takes.
REVOKE INSERT ON samples FROM meter_collector;

-- A hook key (role 'hook') checks quotas, registers and stops sandboxes, and
-- nothing else: what meter-hook needs on a host, so that no host holds an
-- admin key. With an account_id it does so for that account alone.
ALTER TABLE api_keys DROP CONSTRAINT api_keys_role_check;
ALTER TABLE api_keys DROP CONSTRAINT api_keys_check;
ALTER TABLE api_keys ADD CONSTRAINT api_keys_role_check
	CHECK (role IN ('admin', 'account', 'hook'));
ALTER TABLE api_keys ADD CONSTRAINT api_keys_check
	CHECK (CASE role WHEN 'admin' THEN account_id IS NULL
	                 WHEN 'account' THEN account_id IS NOT NULL ELSE true END);
COMMENT ON COLUMN api_keys.role IS
	'admin: everything; account: what its account may see and do; hook: quota checks, sandbox registrations and stops (of its account when it has one)';
