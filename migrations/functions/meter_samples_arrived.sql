-- meter_samples_arrived: What samples that arrived set going, for a batch of
-- them (meter_samples_ingest, meter_mark_samples): each sandbox marked for the
-- rollup from its earliest new sample; a new incarnation registered on its
-- sandbox (from another host than the running one's, only once that one has
-- ended or its host has sent nothing of it for five minutes: until then it
-- waits as next_incarnation), and the collector's end of one (a sample with
-- ended, from the host that began the incarnation) recorded, with the stops
-- and ends computed again (meter_sandbox_ends); a sandbox whose cgroup path named an existing
-- account that allows it (collector_registration), seen for the first time,
-- registered from its cgroup's limits; an account whose running sandboxes reach its limit
-- announced (meter_notify_limit). Each kind of thing is one statement for the
-- whole batch, naming its sandboxes and accounts by = ANY (an array), which
-- Citus sends to their shards only.
CREATE OR REPLACE FUNCTION meter_samples_arrived(batch meter_sample_arrival[]) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public AS $$
DECLARE
	found meter_sample_arrival[];
	accounts_there text[];
	changed text[];
	began text[];
	back text[];
	b record;
	new_ids text[];
	new_incarnations bigint[];
	new_froms timestamptz[];
	ended_ids text[];
	cand_ids text[];
	cand_accounts text[];
	cand_incarnations bigint[];
	count_accounts text[];
	counts bigint[];
	limit_accounts text[];
	limits integer[];
	foreign_ends text[] := '{}';
	m record;
	host_then text;
	host_now text;
	silent_since timestamptz;
	refused text[] := '{}';
	mv_ids text[];
	mv_old bigint[];
	mv_old_from timestamptz[];
	mv_old_stopped timestamptz[];
	mv_next bigint[];
	mv_next_from timestamptz[];
	mv_new bigint[];
	mv_new_from timestamptz[];
	wait_ids text[];
	wait_running bigint[];
	wait_next bigint[];
	wait_ended text[];
	took_over text[];
BEGIN
	IF coalesce(cardinality(batch), 0) = 0 THEN
		RETURN 0;
	END IF;
	INSERT INTO rollup_queue (sandbox_id, from_ts, queued_at)
	SELECT sandbox_id, min(ts), clock_timestamp() FROM unnest(batch) GROUP BY sandbox_id
	ON CONFLICT (sandbox_id) DO UPDATE
		SET from_ts = least(rollup_queue.from_ts, EXCLUDED.from_ts),
		    queued_at = least(rollup_queue.queued_at, EXCLUDED.queued_at),
		    waiting = NULL, waiting_kind = NULL;
	-- a sandbox the collector found runs from its first sample: registered from its
	-- cgroup's limits (its newest sample's) when its path names an account that
	-- exists (otherwise the rollup says why it waits)
	SELECT array_agg((n.sandbox_id, n.incarnation, n.ts, n.account_id, n.cpu_limit_millicores,
	                  n.memory_limit_bytes, n.ended, n.end_cpu)::meter_sample_arrival) INTO found
	FROM (SELECT DISTINCT ON (sandbox_id) * FROM unnest(batch)
	      WHERE account_id IS NOT NULL ORDER BY sandbox_id, ts DESC) n
	WHERE n.cpu_limit_millicores BETWEEN 1 AND 256000
	  AND n.memory_limit_bytes BETWEEN 1 AND 1099511627776;
	IF found IS NOT NULL THEN
		SELECT array_agg(DISTINCT n.account_id) INTO accounts_there FROM unnest(found) n;
		SELECT array_agg(a.id) INTO accounts_there FROM accounts a
		WHERE a.id = ANY (accounts_there) AND a.collector_registration;
		WITH ins AS (
			INSERT INTO sandboxes (id, account_id, vcpus, memory_gib)
			SELECT n.sandbox_id, n.account_id, round(n.cpu_limit_millicores / 1000.0, 3),
			       ceil(n.memory_limit_bytes * 1000.0 / 1073741824) / 1000
			FROM unnest(found) n WHERE n.account_id = ANY (accounts_there)
			ORDER BY n.sandbox_id
			ON CONFLICT (id) DO NOTHING
			RETURNING id)
		SELECT array_agg(id) INTO began FROM ins;
	END IF;
	-- ends, the earliest of each incarnation, with how its CPU is known; each
	-- from the host that sent its incarnation's first sample, no other (a
	-- query per end, by its sandbox: ends are few)
	FOR b IN SELECT e.sandbox_id, e.incarnation, min(e.ts) ts FROM unnest(batch) e
	         WHERE e.ended GROUP BY 1, 2 ORDER BY 1, 2 LOOP
		IF (SELECT s.host FROM samples s WHERE s.sandbox_id = b.sandbox_id
		      AND s.incarnation = b.incarnation ORDER BY s.ts LIMIT 1)
		   IS DISTINCT FROM (SELECT s.host FROM samples s WHERE s.sandbox_id = b.sandbox_id
		      AND s.incarnation = b.incarnation AND s.ts = b.ts) THEN
			RAISE WARNING 'sandbox "%": an end of incarnation % from a host that did not begin it is ignored',
			              b.sandbox_id, b.incarnation;
			foreign_ends := foreign_ends || (b.sandbox_id || '@' || b.incarnation);
		END IF;
	END LOOP;
	INSERT INTO incarnation_ends (sandbox_id, incarnation, ended_at, end_cpu)
	SELECT sandbox_id, incarnation, min(ts), (array_agg(end_cpu ORDER BY ts))[1]
	FROM unnest(batch) WHERE ended AND NOT (sandbox_id || '@' || incarnation) = ANY (foreign_ends)
	GROUP BY sandbox_id, incarnation ORDER BY 1, 2
	ON CONFLICT (sandbox_id, incarnation) DO UPDATE
		SET ended_at = least(incarnation_ends.ended_at, EXCLUDED.ended_at),
		    end_cpu = CASE WHEN EXCLUDED.ended_at < incarnation_ends.ended_at
		                   THEN EXCLUDED.end_cpu ELSE incarnation_ends.end_cpu END;
	-- the newest incarnation of each sandbox, and when it began: one row per
	-- sandbox, worked out here first, so the update below carries those rows
	-- and not the batch, and names its sandboxes by = ANY (an array), which
	-- Citus sends to their shards only (a join with unnest alone goes to all)
	SELECT array_agg(n.sandbox_id), array_agg(n.incarnation), array_agg(n.f)
	INTO new_ids, new_incarnations, new_froms
	FROM (SELECT DISTINCT ON (sandbox_id) sandbox_id, incarnation, f
	      FROM (SELECT sandbox_id, incarnation, min(ts) f FROM unnest(batch) GROUP BY 1, 2) inc
	      ORDER BY sandbox_id, f DESC, incarnation DESC) n;
	WITH moved AS (
		UPDATE sandboxes s SET incarnation = n.incarnation,
		       incarnation_from = CASE WHEN s.incarnation = n.incarnation
		                               THEN least(s.incarnation_from, n.f) ELSE n.f END
		FROM unnest(new_ids, new_incarnations, new_froms) n(sandbox_id, incarnation, f),
		     sandboxes o
		WHERE s.id = n.sandbox_id AND o.id = s.id
		  AND s.id = ANY (new_ids) AND o.id = ANY (new_ids)
		  AND (s.incarnation IS NULL OR s.incarnation_from IS NULL
		       OR (s.incarnation <> n.incarnation AND n.f > s.incarnation_from)
		       OR (s.incarnation = n.incarnation AND n.f < s.incarnation_from))
		RETURNING s.id, o.stopped_at IS NOT NULL AND o.incarnation IS DISTINCT FROM
		          n.incarnation again,
		          o.incarnation old_incarnation, o.incarnation_from old_from,
		          o.stopped_at old_stopped, o.next_incarnation, o.next_incarnation_from,
		          n.incarnation new_incarnation, n.f new_from)
	SELECT array_agg(id), array_agg(id) FILTER (WHERE again),
	       array_agg(id) FILTER (WHERE switch), array_agg(old_incarnation) FILTER (WHERE switch),
	       array_agg(old_from) FILTER (WHERE switch),
	       array_agg(old_stopped) FILTER (WHERE switch),
	       array_agg(next_incarnation) FILTER (WHERE switch),
	       array_agg(next_incarnation_from) FILTER (WHERE switch),
	       array_agg(new_incarnation) FILTER (WHERE switch),
	       array_agg(new_from) FILTER (WHERE switch)
	INTO changed, back, mv_ids, mv_old, mv_old_from, mv_old_stopped, mv_next, mv_next_from,
	     mv_new, mv_new_from
	FROM (SELECT *, coalesce(old_incarnation <> new_incarnation AND old_from IS NOT NULL,
	                         false) switch FROM moved) mv;
	-- a new incarnation from another host takes over a running one only once
	-- that one has ended (or been stopped), or its host has sent nothing of it
	-- for five minutes (a host gone): a host cannot stop another host's
	-- sandbox by starting an incarnation of it and ending that. Otherwise it
	-- waits as next_incarnation, its samples stored and rated, and the move
	-- is undone (the same transaction: nobody sees it). Moves are few: a
	-- query or two each, by the sandbox's samples' key.
	FOR m IN SELECT * FROM unnest(mv_ids, mv_old, mv_old_from, mv_old_stopped, mv_next,
	                                mv_next_from, mv_new, mv_new_from)
	             x(id, old_incarnation, old_from, old_stopped, next_incarnation, next_from,
	               new_incarnation, new_from) LOOP
		SELECT s.host INTO host_then FROM samples s WHERE s.sandbox_id = m.id
		  AND s.ts = m.old_from AND s.incarnation = m.old_incarnation;
		SELECT s.host INTO host_now FROM samples s WHERE s.sandbox_id = m.id
		  AND s.ts = m.new_from AND s.incarnation = m.new_incarnation;
		SELECT max(a.ts) - interval '5 minutes' INTO silent_since FROM unnest(batch) a
		WHERE a.sandbox_id = m.id AND a.incarnation = m.new_incarnation;
		IF host_then IS NULL OR host_now IS NULL OR host_then = host_now
		   OR m.old_stopped IS NOT NULL
		   OR EXISTS (SELECT 1 FROM incarnation_ends e WHERE e.sandbox_id = m.id
		                AND e.incarnation = m.old_incarnation)
		   OR NOT EXISTS (SELECT 1 FROM samples s WHERE s.sandbox_id = m.id
		                    AND s.ts > silent_since AND s.incarnation = m.old_incarnation) THEN
			IF m.next_incarnation IS NOT NULL THEN
				UPDATE sandboxes SET next_incarnation = NULL, next_incarnation_from = NULL,
				       incarnation_from = CASE WHEN m.next_incarnation = m.new_incarnation
				                               THEN least(m.next_from, m.new_from)
				                               ELSE m.new_from END
				WHERE id = m.id;
			END IF;
			CONTINUE;
		END IF;
		IF m.next_incarnation IS DISTINCT FROM m.new_incarnation THEN
			RAISE WARNING 'sandbox "%": incarnation % from host "%" waits while incarnation % of host "%" runs',
			              m.id, m.new_incarnation, host_now, m.old_incarnation, host_then;
		END IF;
		UPDATE sandboxes SET incarnation = m.old_incarnation, incarnation_from = m.old_from,
		       next_incarnation = m.new_incarnation,
		       next_incarnation_from = CASE WHEN m.next_incarnation = m.new_incarnation
		                                    THEN least(m.next_from, m.new_from)
		                                    ELSE m.new_from END
		WHERE id = m.id;
		refused := refused || m.id;
	END LOOP;
	IF cardinality(refused) > 0 THEN
		SELECT array_agg(x) INTO back FROM unnest(back) x WHERE NOT x = ANY (refused);
	END IF;
	SELECT array_agg(DISTINCT sandbox_id) INTO ended_ids FROM unnest(batch) WHERE ended;
	-- the running incarnation ended with one waiting: the waiting one takes
	-- over now, from its first sample, unless it has ended too (a sandbox
	-- moved between hosts, the old host's end arriving after the new host's
	-- first samples)
	IF ended_ids IS NOT NULL THEN
		SELECT array_agg(s.id), array_agg(s.incarnation), array_agg(s.next_incarnation)
		INTO wait_ids, wait_running, wait_next FROM sandboxes s
		WHERE s.id = ANY (ended_ids) AND s.next_incarnation IS NOT NULL;
	END IF;
	IF wait_ids IS NOT NULL THEN
		SELECT array_agg(e.sandbox_id || '@' || e.incarnation) INTO wait_ended
		FROM incarnation_ends e WHERE e.sandbox_id = ANY (wait_ids);
		SELECT array_agg(w.id) FILTER (WHERE NOT (w.id || '@' || w.nxt) = ANY (wait_ended)),
		       array_agg(w.id)
		INTO took_over, wait_ids
		FROM unnest(wait_ids, wait_running, wait_next) w(id, running, nxt)
		WHERE (w.id || '@' || w.running) = ANY (wait_ended);
		UPDATE sandboxes SET incarnation = CASE WHEN id = ANY (took_over) THEN next_incarnation
		                                        ELSE incarnation END,
		       incarnation_from = CASE WHEN id = ANY (took_over) THEN next_incarnation_from
		                               ELSE incarnation_from END,
		       next_incarnation = NULL, next_incarnation_from = NULL
		WHERE id = ANY (wait_ids);
	END IF;
	IF ended_ids IS NOT NULL THEN
		changed := coalesce(changed, '{}') || ended_ids;
	END IF;
	IF changed IS NOT NULL THEN
		PERFORM meter_sandbox_ends(changed);
	END IF;
	-- a sandbox that began to run (found by the collector, or a new incarnation of a
	-- stopped one) and fills its account up announces it, as a registration does
	IF began IS NULL AND back IS NULL THEN
		RETURN cardinality(batch);
	END IF;
	-- the accounts' running counts, each read once for the batch: on Citus a count
	-- by account goes to every sandbox shard
	SELECT array_agg(x.id ORDER BY x.id), array_agg(x.account_id ORDER BY x.id),
	       array_agg(x.incarnation ORDER BY x.id)
	INTO cand_ids, cand_accounts, cand_incarnations
	FROM sandboxes x
	WHERE x.id = ANY (coalesce(began, '{}') || coalesce(back, '{}')) AND x.stopped_at IS NULL;
	IF cand_ids IS NULL THEN
		RETURN cardinality(batch);
	END IF;
	SELECT array_agg(x.account_id), array_agg(x.n) INTO count_accounts, counts
	FROM (SELECT account_id, count(*) n FROM sandboxes
	      WHERE account_id = ANY (cand_accounts) AND stopped_at IS NULL
	      GROUP BY account_id) x;
	SELECT array_agg(a.id), array_agg(a.max_concurrent) INTO limit_accounts, limits
	FROM accounts a WHERE a.id = ANY (cand_accounts);
	FOR b IN SELECT c.id, c.account_id, c.incarnation, r.n running, l.most
	         FROM unnest(cand_ids, cand_accounts, cand_incarnations) c(id, account_id, incarnation)
	         JOIN unnest(count_accounts, counts) r(account_id, n) USING (account_id)
	         JOIN unnest(limit_accounts, limits) l(account_id, most) USING (account_id)
	         WHERE r.n >= l.most
	         ORDER BY c.id
	LOOP
		PERFORM meter_notify_limit(b.account_id, 'concurrency_limit',
		                           CASE WHEN b.id = ANY (coalesce(began, '{}')) THEN b.id
		                                ELSE b.id || '@' || b.incarnation END,
		                           jsonb_build_object('account_id', b.account_id,
		                                              'limit', 'concurrency_limit',
		                                              'running', b.running,
		                                              'max_concurrent', b.most,
		                                              'sandbox_id', b.id));
	END LOOP;
	RETURN cardinality(batch);
END
$$;

REVOKE ALL ON FUNCTION meter_samples_arrived(meter_sample_arrival[]) FROM PUBLIC;
