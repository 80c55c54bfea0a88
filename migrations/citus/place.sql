-- migrations/citus/place.sql: meter's tables placed on a Citus cluster.
--
-- `meter migrate` applies it, after the numbered migrations, on a database
-- where the citus extension is installed and worker nodes are added, when
-- `accounts` is not distributed yet; in one transaction, so it is all or
-- nothing. docs/scaling.md says why each table goes where it goes. A numbered
-- migration written after this file ran on a cluster must keep Citus's rules:
-- a new table is distributed (or made a reference table) by that migration,
-- when citus is there; and this file names it as well (for a cluster placed
-- after that migration), skipping it where it does not exist yet (a cluster
-- placed before).
--
-- The ingest side is distributed by sandbox, the billing side by account; the
-- small tables are reference tables.

-- 0. the distribution columns as plain text. On a meter_id (domain) column,
-- Citus 13.2.2 prunes a read that compares the key with text (every $1 and
-- literal meter sends) to no shard: WHERE id = 'sb-1' finds nothing, its plan
-- a filter "false". The form meter_id checks stays, as a CHECK, where ids
-- come in (accounts, sandboxes, samples), written as migration 0038 writes it.
DO $$
DECLARE
	t record;
BEGIN
	FOR t IN SELECT * FROM (VALUES
		('sandboxes', 'id'), ('samples', 'sandbox_id'), ('sample_seeds', 'sandbox_id'),
		('rollup_checkpoints', 'sandbox_id'), ('rollup_queue', 'sandbox_id'),
		('incarnation_ends', 'sandbox_id'), ('accounts', 'id'),
		('usage_hourly', 'account_id'), ('account_month', 'account_id'),
		('account_day', 'account_id'), ('account_month_sandboxes', 'account_id'),
		('invoices', 'account_id'), ('invoice_quantities', 'account_id'),
		('invoice_sandboxes', 'account_id'),
		('limit_notices', 'account_id'), ('usage_unpriced', 'account_id'),
		('trial_crossing', 'account_id'), ('trial_cover', 'account_id'),
		('trial_queue', 'account_id'), ('sandbox_month', 'account_id'),
		('sandbox_month_cost', 'account_id'), ('usage_listings', 'account_id'),
		('account_limits', 'account_id'), ('account_ledger', 'account_id'),
		('webhook_deliveries', 'account_id'),
		('webhook_attempts', 'account_id')) AS v (tab, col)
	LOOP
		-- a table of a later migration than the database has is placed by that migration
		CONTINUE WHEN to_regclass(t.tab) IS NULL;
		EXECUTE format('ALTER TABLE %I ALTER COLUMN %I TYPE text', t.tab, t.col);
		IF t.tab IN ('accounts', 'sandboxes', 'samples') THEN
			EXECUTE format('ALTER TABLE %I ADD CONSTRAINT %I CHECK (%I ~ %L AND '
			               'length(%I) <= 128)', t.tab, t.tab || '_' || t.col || '_form',
			               t.col, '^[A-Za-z0-9][A-Za-z0-9._:-]*$', t.col);
		END IF;
	END LOOP;
END
$$;

-- 1. the foreign keys Citus cannot keep
ALTER TABLE sandboxes DROP CONSTRAINT sandboxes_account_id_fkey;
ALTER TABLE api_keys DROP CONSTRAINT api_keys_account_id_fkey;
ALTER TABLE sessions DROP CONSTRAINT sessions_account_id_fkey;
ALTER TABLE webhook_endpoints DROP CONSTRAINT webhook_endpoints_account_id_fkey;
-- and, until step 6, the keys to the future reference tables: a table that refers
-- to a reference table is drawn into Citus's metadata with everything it is
-- linked to by keys (accounts too), and accounts could then not be distributed
ALTER TABLE usage_hourly DROP CONSTRAINT usage_hourly_price_plan_id_fkey;
ALTER TABLE account_month DROP CONSTRAINT account_month_price_plan_id_fkey;
ALTER TABLE account_day DROP CONSTRAINT account_day_price_plan_id_fkey;
ALTER TABLE sandbox_month DROP CONSTRAINT sandbox_month_price_plan_id_fkey;
ALTER TABLE invoice_quantities DROP CONSTRAINT invoice_quantities_price_plan_id_fkey;
ALTER TABLE IF EXISTS invoice_sandboxes DROP CONSTRAINT invoice_sandboxes_price_plan_id_fkey;
ALTER TABLE trial_cover DROP CONSTRAINT trial_cover_price_plan_id_fkey;
ALTER TABLE webhook_deliveries DROP CONSTRAINT webhook_deliveries_endpoint_id_fkey;

-- 2. the statement-level triggers (migration 0028: the collector's write marks itself)
DROP TRIGGER samples_mark ON samples;
DROP TRIGGER invoices_no_truncate ON invoices;
DROP TRIGGER invoice_quantities_no_truncate ON invoice_quantities;
DO $$
BEGIN
	IF to_regclass('invoice_sandboxes') IS NOT NULL THEN
		DROP TRIGGER invoice_sandboxes_no_truncate ON invoice_sandboxes;
	END IF;
END
$$;
DROP TRIGGER limit_notices_no_truncate ON limit_notices;
SET citus.enable_unsafe_triggers = on;  -- for the remaining row triggers

-- 3. reference tables first: distributed tables refer to price_plans
SELECT create_reference_table('price_plans');
SELECT create_reference_table('api_keys');
SELECT create_reference_table('sessions');
SELECT create_reference_table('sample_horizon');
SELECT create_reference_table('webhook_endpoints');
SELECT create_reference_table('collector_hosts') WHERE to_regclass('collector_hosts') IS NOT NULL;
-- meter_migrations stays a plain table on the coordinator

-- 4. the sandbox group
SELECT create_distributed_table('sandboxes', 'id', colocate_with => 'none');
SELECT create_distributed_table('samples', 'sandbox_id', colocate_with => 'sandboxes');
SELECT create_distributed_table('sample_seeds', 'sandbox_id', colocate_with => 'sandboxes');
SELECT create_distributed_table('rollup_checkpoints', 'sandbox_id', colocate_with => 'sandboxes');
SELECT create_distributed_table('rollup_queue', 'sandbox_id', colocate_with => 'sandboxes');
SELECT create_distributed_table('incarnation_ends', 'sandbox_id', colocate_with => 'sandboxes');

-- 5. the account group; a referenced table before the tables that refer to it
SELECT create_distributed_table('accounts', 'id', colocate_with => 'none');
SELECT create_distributed_table('usage_hourly', 'account_id', colocate_with => 'accounts');
SELECT create_distributed_table('account_month', 'account_id', colocate_with => 'accounts');
SELECT create_distributed_table('account_day', 'account_id', colocate_with => 'accounts');
SELECT create_distributed_table('account_month_sandboxes', 'account_id', colocate_with => 'accounts');
SELECT create_distributed_table('invoices', 'account_id', colocate_with => 'accounts');
SELECT create_distributed_table('invoice_quantities', 'account_id', colocate_with => 'accounts');
DO $$
BEGIN
	IF to_regclass('invoice_sandboxes') IS NOT NULL THEN
		PERFORM create_distributed_table('invoice_sandboxes', 'account_id', colocate_with => 'accounts');
	END IF;
END
$$;
SELECT create_distributed_table('limit_notices', 'account_id', colocate_with => 'accounts');
SELECT create_distributed_table('usage_unpriced', 'account_id', colocate_with => 'accounts');
SELECT create_distributed_table('trial_crossing', 'account_id', colocate_with => 'accounts');
SELECT create_distributed_table('trial_cover', 'account_id', colocate_with => 'accounts');
SELECT create_distributed_table('trial_queue', 'account_id', colocate_with => 'accounts');
SELECT create_distributed_table('sandbox_month', 'account_id', colocate_with => 'accounts');
SELECT create_distributed_table('sandbox_month_cost', 'account_id', colocate_with => 'accounts');
SELECT create_distributed_table('usage_listings', 'account_id', colocate_with => 'accounts');
SELECT create_distributed_table('account_limits', 'account_id', colocate_with => 'accounts');
DO $$
BEGIN
	IF to_regclass('account_ledger') IS NOT NULL THEN
		PERFORM create_distributed_table('account_ledger', 'account_id', colocate_with => 'accounts');
	END IF;
END
$$;
SELECT create_distributed_table('webhook_deliveries', 'account_id', colocate_with => 'accounts');
SELECT create_distributed_table('webhook_attempts', 'account_id', colocate_with => 'accounts');

-- 6. the keys from distributed tables to reference tables, back
ALTER TABLE usage_hourly ADD CONSTRAINT usage_hourly_price_plan_id_fkey
	FOREIGN KEY (price_plan_id) REFERENCES price_plans (id);
ALTER TABLE account_month ADD CONSTRAINT account_month_price_plan_id_fkey
	FOREIGN KEY (price_plan_id) REFERENCES price_plans (id);
ALTER TABLE account_day ADD CONSTRAINT account_day_price_plan_id_fkey
	FOREIGN KEY (price_plan_id) REFERENCES price_plans (id);
ALTER TABLE sandbox_month ADD CONSTRAINT sandbox_month_price_plan_id_fkey
	FOREIGN KEY (price_plan_id) REFERENCES price_plans (id);
ALTER TABLE invoice_quantities ADD CONSTRAINT invoice_quantities_price_plan_id_fkey
	FOREIGN KEY (price_plan_id) REFERENCES price_plans (id);
ALTER TABLE IF EXISTS invoice_sandboxes ADD CONSTRAINT invoice_sandboxes_price_plan_id_fkey
	FOREIGN KEY (price_plan_id) REFERENCES price_plans (id);
ALTER TABLE trial_cover ADD CONSTRAINT trial_cover_price_plan_id_fkey
	FOREIGN KEY (price_plan_id) REFERENCES price_plans (id);
ALTER TABLE webhook_deliveries ADD CONSTRAINT webhook_deliveries_endpoint_id_fkey
	FOREIGN KEY (endpoint_id) REFERENCES webhook_endpoints (id) ON DELETE CASCADE;

-- 7. Citus opens its connections to the workers as the role a statement runs as,
-- and meter's programs switch to meter_collector and meter_api (SET ROLE): those
-- roles log in on the workers (allow them from the coordinator in pg_hba.conf)
ALTER ROLE meter_collector LOGIN;
ALTER ROLE meter_api LOGIN;

-- 8. the rollup's reads plan as PostgreSQL chooses (migration 0036 fixes their
-- plans on a single PostgreSQL): Citus must see each sandbox's id in a custom
-- plan to send the read to its shard
ALTER FUNCTION meter_rollup_read(text[], bigint[], timestamptz, timestamptz, bigint[], bigint[])
	RESET plan_cache_mode;
ALTER FUNCTION meter_rollup_after(text[], bigint[], bigint[], bigint[]) RESET plan_cache_mode;
