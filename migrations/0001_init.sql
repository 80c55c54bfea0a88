-- 0001_init: the first schema of meter.
--
-- Conventions: money is numeric with 9 decimals (nano-dollars), never a float;
-- usage quantities are bigint counts of µs (CPU, wall time) and of
-- milli-GiB x µs (memory); sizes are numeric with 3 decimals. All times are
-- timestamptz. The meter/ library holds the rating rules: SQL stores and sums.
--
-- The function it defined or changed is now defined in
-- migrations/functions/meter_ensure_sample_partitions.sql, as all functions
-- are since 0040.

-- Roles. NOLOGIN groups: an operator grants them to login roles. Roles are
-- cluster-wide, so creating them tolerates another database having done so.
DO $$
BEGIN
	BEGIN
		CREATE ROLE meter_collector NOLOGIN;
	EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL;
	END;
	BEGIN
		CREATE ROLE meter_api NOLOGIN;
	EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL;
	END;
END
$$;

-- Ids of accounts and sandboxes: what a cgroup folder name may carry.
CREATE DOMAIN meter_id AS text
	CHECK (VALUE ~ '^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$');

CREATE TABLE price_plans (
	id integer GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	name text NOT NULL CHECK (length(name) BETWEEN 1 AND 63),
	effective_from timestamptz NOT NULL UNIQUE,
	cpu_vcpu_hour numeric(20, 9) NOT NULL CHECK (cpu_vcpu_hour >= 0 AND cpu_vcpu_hour <= 1000),
	memory_gib_hour numeric(20, 9) NOT NULL CHECK (memory_gib_hour >= 0 AND memory_gib_hour <= 1000),
	cpu_floor numeric(7, 6) NOT NULL CHECK (cpu_floor >= 0 AND cpu_floor <= 1),
	created_at timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE price_plans IS
	'an interval is rated by the plan with the latest effective_from before its end';

-- The published default plan.
INSERT INTO price_plans (name, effective_from, cpu_vcpu_hour, memory_gib_hour, cpu_floor)
VALUES ('default', '2026-09-25T00:00:00Z', 0.025, 0.0075, 0.025);

CREATE TABLE accounts (
	id meter_id PRIMARY KEY,
	name text NOT NULL CHECK (length(name) BETWEEN 1 AND 200),
	plan text NOT NULL CHECK (plan IN ('trial', 'paid')),
	trial_grant_seconds bigint NOT NULL DEFAULT 180000 CHECK (trial_grant_seconds >= 0),
	max_concurrent integer NOT NULL DEFAULT 100 CHECK (max_concurrent BETWEEN 1 AND 1000000),
	monthly_spend_cap numeric(20, 9) CHECK (monthly_spend_cap >= 0),
	created_at timestamptz NOT NULL DEFAULT now()
);
COMMENT ON COLUMN accounts.trial_grant_seconds IS 'free sandbox time: 50 hours for every new account';

CREATE TABLE api_keys (
	id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	key_hash bytea NOT NULL UNIQUE CHECK (length(key_hash) = 32),
	shown text NOT NULL CHECK (length(shown) <= 11),
	role text NOT NULL CHECK (role IN ('admin', 'account')),
	account_id meter_id REFERENCES accounts (id),
	created_at timestamptz NOT NULL DEFAULT now(),
	revoked_at timestamptz,
	CHECK ((role = 'admin') = (account_id IS NULL))
);
COMMENT ON COLUMN api_keys.key_hash IS 'sha256 of the key; the key itself is never stored';
COMMENT ON COLUMN api_keys.shown IS 'the first characters of the key, to tell keys apart';

CREATE TABLE sandboxes (
	id meter_id PRIMARY KEY,
	account_id meter_id NOT NULL REFERENCES accounts (id),
	vcpus numeric(6, 3) NOT NULL CHECK (vcpus > 0 AND vcpus <= 256),
	memory_gib numeric(8, 3) NOT NULL CHECK (memory_gib > 0 AND memory_gib <= 1024),
	started_at timestamptz,
	stopped_at timestamptz,
	registered_at timestamptz NOT NULL DEFAULT now(),
	CHECK (stopped_at IS NULL OR started_at IS NULL OR stopped_at >= started_at)
);
CREATE INDEX sandboxes_account ON sandboxes (account_id) WHERE stopped_at IS NULL;

-- Raw samples, as collectors read them: cumulative counters, so a lost batch
-- loses nothing. Partitioned by month of ts; a sample is keyed by (sandbox,
-- incarnation, ts) so a batch written twice counts once.
CREATE TABLE samples (
	sandbox_id meter_id NOT NULL,
	incarnation bigint NOT NULL,
	ts timestamptz NOT NULL,
	account_id meter_id,
	host text NOT NULL CHECK (length(host) BETWEEN 1 AND 255),
	cpu_usage_us bigint NOT NULL CHECK (cpu_usage_us >= 0),
	memory_current_bytes bigint CHECK (memory_current_bytes >= 0),
	memory_peak_bytes bigint CHECK (memory_peak_bytes >= 0),
	memory_anon_kernel_bytes bigint CHECK (memory_anon_kernel_bytes >= 0),
	memory_limit_bytes bigint CHECK (memory_limit_bytes >= 0),
	cpu_limit_millicores bigint CHECK (cpu_limit_millicores > 0),
	received_at timestamptz NOT NULL DEFAULT clock_timestamp(),
	PRIMARY KEY (sandbox_id, incarnation, ts)
) PARTITION BY RANGE (ts);
COMMENT ON COLUMN samples.incarnation IS 'inode of the cgroup: a new cgroup under the same id starts a new series';
COMMENT ON COLUMN samples.memory_peak_bytes IS 'NULL when the host does not report it, never 0 for absent';

-- Anything outside the monthly partitions lands here instead of failing.
CREATE TABLE samples_default PARTITION OF samples DEFAULT;

-- From the month the default plan took effect until a year from now.
SELECT meter_ensure_sample_partitions('2026-09-01T00:00:00Z', now() + interval '12 months');

-- Usage per sandbox per hour, made by the rollup worker from the samples with
-- the meter/ rating rules. An interval belongs to the hour in which it ends
-- (an interval ending on the hour belongs to the hour before) and to the plan
-- in force then, hence the plan in the key.
CREATE TABLE usage_hourly (
	account_id meter_id NOT NULL,
	sandbox_id meter_id NOT NULL,
	hour timestamptz NOT NULL CHECK (date_trunc('hour', hour AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' = hour),
	price_plan_id integer NOT NULL REFERENCES price_plans (id),
	cpu_measured_us bigint NOT NULL DEFAULT 0 CHECK (cpu_measured_us >= 0),
	cpu_billed_us bigint NOT NULL DEFAULT 0 CHECK (cpu_billed_us >= 0),
	busy_us bigint NOT NULL DEFAULT 0 CHECK (busy_us >= 0),
	idle_us bigint NOT NULL DEFAULT 0 CHECK (idle_us >= 0),
	wall_us bigint NOT NULL DEFAULT 0 CHECK (wall_us >= 0),
	memory_mgib_us bigint NOT NULL DEFAULT 0 CHECK (memory_mgib_us >= 0),
	updated_at timestamptz NOT NULL DEFAULT now(),
	PRIMARY KEY (account_id, sandbox_id, hour, price_plan_id)
);

-- Privileges. The collector may insert samples and nothing else: no SELECT,
-- UPDATE or DELETE (INSERT ... ON CONFLICT DO NOTHING needs only INSERT).
REVOKE ALL ON ALL TABLES IN SCHEMA public FROM PUBLIC;
GRANT USAGE ON SCHEMA public TO meter_collector, meter_api;
GRANT INSERT ON samples TO meter_collector;

GRANT SELECT ON price_plans, samples TO meter_api;
GRANT SELECT, INSERT, UPDATE ON accounts, sandboxes, api_keys TO meter_api;
GRANT SELECT, INSERT, UPDATE, DELETE ON usage_hourly TO meter_api;
