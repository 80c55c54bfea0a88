-- meter_samples_ingest: The collector's write (collector/writer.c): inserts a
-- batch of samples, each end with how its CPU is known (end_cpu, the same
-- order; migration 0042), and hands the rows inserted to
-- meter_samples_arrived, in the collector's one transaction; the only thing
-- the collector's role may call. A sample is keyed by (sandbox, incarnation, timestamp), so a batch
-- sent twice counts once. The batch goes in with a plain INSERT first, in a
-- block of its own (a subtransaction): nearly every batch is new, and a plain
-- INSERT checks a key's uniqueness in the one descent that stores it, where ON
-- CONFLICT makes every row a speculative insertion. When it meets a sample
-- already stored (a batch sent twice, or one overlapping a batch written
-- before), all of it is undone and the batch goes in again with ON CONFLICT DO
-- NOTHING: the same rows are stored either way, and only the ones inserted are
-- handed on. A batch sent twice at once waits on the first's rows and, once
-- that commits, inserts none (test_ledger
-- the_same_batch_written_at_once_is_stored_once). One statement, run by
-- EXECUTE with or without its ON CONFLICT clause, planned for each batch. Any
-- other error (a check, a lock's timeout) ends the write. A login role bound
-- to hosts (collector_hosts, migration 0044) sends their samples only: a
-- batch holding another host's is refused whole (insufficient_privilege),
-- and the collector keeps it and says so.
CREATE OR REPLACE FUNCTION meter_samples_ingest(batch meter_sample_row[], end_cpu text[])
RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public
AS $$
DECLARE
	-- %s: nothing the first time, ON CONFLICT DO NOTHING after a duplicate; unnest
	-- gives each row's columns, then its end_cpu (NULL past the end of $2)
	ins constant text := $q$
		WITH ins AS (
			INSERT INTO samples (sandbox_id, incarnation, ts, account_id, host,
			                     cpu_usage_us, memory_current_bytes, memory_peak_bytes,
			                     memory_anon_kernel_bytes, memory_limit_bytes,
			                     cpu_limit_millicores, ended, end_cpu)
			SELECT * FROM unnest($1, $2) %s
			RETURNING sandbox_id, incarnation, ts, account_id, cpu_limit_millicores,
			          memory_limit_bytes, ended, end_cpu)
		SELECT array_agg(ROW(sandbox_id, incarnation, ts, account_id, cpu_limit_millicores,
		                     memory_limit_bytes, ended, end_cpu)::meter_sample_arrival)
		FROM ins$q$;
	arrived meter_sample_arrival[];
	-- meter.samples_marked tells samples_mark (meter_mark_samples) that this
	-- marks what it inserts. Set for the insert and back after it, by
	-- set_config: a function's SET clause of a custom setting needs a
	-- superuser to create it, and the owner of the database is not one. An
	-- error on the way rolls the setting back with the (sub)transaction.
	prior constant text := coalesce(current_setting('meter.samples_marked', true), '');
	hosts text[];
	stray text;
BEGIN
	-- (session_user: the role logged in, whatever it SET ROLE to since)
	hosts := ARRAY(SELECT host FROM collector_hosts WHERE role = session_user);
	IF cardinality(hosts) > 0 THEN
		SELECT b.host INTO stray FROM unnest(batch) b WHERE NOT b.host = ANY (hosts) LIMIT 1;
		IF FOUND THEN
			RAISE EXCEPTION 'role "%" may not send samples of host "%"', session_user, stray
				USING ERRCODE = 'insufficient_privilege',
				      HINT = 'collector_hosts names the hosts each login role sends samples of';
		END IF;
	END IF;
	PERFORM set_config('meter.samples_marked', 'on', true);
	BEGIN
		EXECUTE format(ins, '') INTO arrived USING batch, end_cpu;
	EXCEPTION WHEN unique_violation THEN
		EXECUTE format(ins, 'ON CONFLICT DO NOTHING') INTO arrived USING batch, end_cpu;
	END;
	PERFORM set_config('meter.samples_marked', prior, true);
	RETURN meter_samples_arrived(arrived);
END
$$;

REVOKE ALL ON FUNCTION meter_samples_ingest(meter_sample_row[], text[]) FROM PUBLIC;

GRANT EXECUTE ON FUNCTION meter_samples_ingest(meter_sample_row[], text[]) TO meter_collector;

-- The form of collectors before end_cpu (and of tests): no end says how its
-- counter is known.
CREATE OR REPLACE FUNCTION meter_samples_ingest(batch meter_sample_row[]) RETURNS bigint
LANGUAGE sql SECURITY DEFINER SET search_path = public
AS $$ SELECT meter_samples_ingest(batch, NULL::text[]) $$;

REVOKE ALL ON FUNCTION meter_samples_ingest(meter_sample_row[]) FROM PUBLIC;

GRANT EXECUTE ON FUNCTION meter_samples_ingest(meter_sample_row[]) TO meter_collector;
