-- 0044_collector_bounds: what a collector's samples may do besides being
-- billed, bounded to what its host may report.
--
-- accounts.collector_registration: whether a sandbox the platform never
-- registered is registered into the account by the collector, from its
-- cgroup's limits, at its first sample (meter_samples_arrived). Off unless
-- the operator turns it on (POST or PATCH /v1/accounts): a collector's role
-- could otherwise register a sandbox of any size into any account. Samples
-- of an unregistered sandbox are kept all the same, and billed once the
-- platform registers it. Accounts made before this migration keep what they
-- had: registration by the collector.
ALTER TABLE accounts ADD COLUMN collector_registration boolean NOT NULL DEFAULT false;
UPDATE accounts SET collector_registration = true;
COMMENT ON COLUMN accounts.collector_registration IS
	'a sandbox the platform never registered is registered by its first sample (from its cgroup''s limits)';

-- collector_hosts: the hosts a login role may send samples of. A role with
-- rows here sends its hosts' samples only (meter_samples_ingest refuses the
-- batch otherwise); a role without any sends every host's (the embedded
-- set-up, one host). An end a collector sees counts only from the host that
-- sent its incarnation's first sample (meter_samples_arrived): bound, a
-- host's collector cannot end another host's sandboxes.
CREATE TABLE collector_hosts (
	role text NOT NULL CHECK (length(role) BETWEEN 1 AND 63),
	host text NOT NULL CHECK (length(host) BETWEEN 1 AND 255),
	PRIMARY KEY (role, host)
);
COMMENT ON TABLE collector_hosts IS
	'the hosts whose samples a login role may send; a role with no row may send any host''s';
GRANT SELECT ON collector_hosts TO meter_api, meter_reader;

DO $$
BEGIN
	IF meter_distributed('accounts') THEN
		PERFORM create_reference_table('collector_hosts');
	END IF;
END
$$;
