-- 0017_ends: the end the collector sees closes the sandbox (rule 9).
--
-- A cgroup that empties (cgroup.events "populated 0": its final sample) or
-- goes away (the collector then adds a sample at the moment it saw it go,
-- with the last counter it read) ends its incarnation: that sample carries
-- ended = true, written with the others in the same COPY and transaction, so
-- a spool replayed twice records it once. The trigger on samples keeps, per
-- sandbox:
--   - incarnation, incarnation_from: its newest incarnation and when it began
--     (its first sample); a newer one that begins runs again;
--   - incarnation_ends: the earliest end of each incarnation;
--   - stopped_at, ended_by: when the sandbox stopped, the earlier of the
--     platform's stop (platform_stopped_at, POST /v1/sandboxes/{id}/stop)
--     when it came after the newest incarnation began, and that
--     incarnation's end; NULL while it runs. The quota counts running
--     sandboxes by stopped_at IS NULL, as before.
-- It also registers a sandbox the collector found when its cgroup path names
-- an account that exists and its limits are in range, so it counts as
-- running from its first sample, not from the next rollup pass.
ALTER TABLE samples ADD COLUMN ended boolean;
COMMENT ON COLUMN samples.ended IS 'true on the sample that ends its incarnation (the cgroup emptied or went away)';

CREATE TABLE incarnation_ends (
	sandbox_id meter_id NOT NULL,
	incarnation bigint NOT NULL,
	ended_at timestamptz NOT NULL,
	PRIMARY KEY (sandbox_id, incarnation)
);
COMMENT ON TABLE incarnation_ends IS 'the earliest end the collector saw of each sandbox incarnation';

ALTER TABLE sandboxes
	ADD COLUMN platform_stopped_at timestamptz,
	ADD COLUMN ended_by text CHECK (ended_by IN ('platform', 'collector')),
	ADD COLUMN incarnation bigint,
	ADD COLUMN incarnation_from timestamptz;
UPDATE sandboxes SET platform_stopped_at = stopped_at, ended_by = 'platform'
WHERE stopped_at IS NOT NULL;
ALTER TABLE sandboxes ADD CONSTRAINT sandboxes_ended_by CHECK ((stopped_at IS NULL) = (ended_by IS NULL));

-- A stop written straight into stopped_at (as before this migration: a script, a
-- restore) is the platform's.
CREATE FUNCTION meter_sandbox_stop_written() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	IF TG_OP = 'INSERT' THEN
		IF NEW.stopped_at IS NOT NULL AND NEW.ended_by IS NULL AND NEW.platform_stopped_at IS NULL THEN
			NEW.platform_stopped_at := NEW.stopped_at;
			NEW.ended_by := 'platform';
		END IF;
	ELSIF NEW.stopped_at IS DISTINCT FROM OLD.stopped_at
	      AND NEW.ended_by IS NOT DISTINCT FROM OLD.ended_by
	      AND OLD.ended_by IS DISTINCT FROM 'collector' -- an earlier end of the same kind
	      AND NEW.platform_stopped_at IS NOT DISTINCT FROM OLD.platform_stopped_at THEN
		NEW.platform_stopped_at := NEW.stopped_at;
		NEW.ended_by := CASE WHEN NEW.stopped_at IS NULL THEN NULL ELSE 'platform' END;
	END IF;
	RETURN NEW;
END
$$;
CREATE TRIGGER sandboxes_stop_written BEFORE INSERT OR UPDATE ON sandboxes
	FOR EACH ROW EXECUTE FUNCTION meter_sandbox_stop_written();

-- stopped_at and ended_by of the sandboxes ids, from their platform stop, their
-- newest incarnation and its end; only rows that change are written.
CREATE FUNCTION meter_sandbox_ends(ids text[]) RETURNS void
LANGUAGE sql SECURITY DEFINER SET search_path = public AS $$
	UPDATE sandboxes s SET stopped_at = x.stop, ended_by = x.by
	FROM (SELECT b.id,
	             CASE WHEN v.p IS NULL AND v.c IS NULL THEN NULL
	                  ELSE greatest(least(v.p, v.c), b.started_at) END stop,
	             CASE WHEN v.p IS NULL AND v.c IS NULL THEN NULL
	                  WHEN v.c IS NULL OR v.p <= v.c THEN 'platform' ELSE 'collector' END by
	      FROM sandboxes b CROSS JOIN LATERAL (
	        SELECT CASE WHEN b.platform_stopped_at >= coalesce(b.incarnation_from, '-infinity')
	                    THEN b.platform_stopped_at END p,
	               (SELECT e.ended_at FROM incarnation_ends e
	                WHERE e.sandbox_id = b.id AND e.incarnation = b.incarnation) c) v
	      WHERE b.id = ANY (ids)) x
	WHERE s.id = x.id AND (s.stopped_at IS DISTINCT FROM x.stop OR s.ended_by IS DISTINCT FROM x.by);
$$;
REVOKE ALL ON FUNCTION meter_sandbox_ends(text[]) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION meter_sandbox_ends(text[]) TO meter_api;

CREATE OR REPLACE FUNCTION meter_mark_samples() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public AS $$
DECLARE
	changed text[];
BEGIN
	INSERT INTO rollup_queue (sandbox_id, from_ts, queued_at)
	SELECT sandbox_id, min(ts), clock_timestamp() FROM new_samples GROUP BY sandbox_id
	ON CONFLICT (sandbox_id) DO UPDATE
		SET from_ts = least(rollup_queue.from_ts, EXCLUDED.from_ts),
		    queued_at = least(rollup_queue.queued_at, EXCLUDED.queued_at),
		    waiting = NULL, waiting_kind = NULL;
	-- a sandbox the collector found runs from its first sample: registered from its
	-- cgroup's limits when its path names an account that exists (otherwise the rollup
	-- says why it waits)
	INSERT INTO sandboxes (id, account_id, vcpus, memory_gib)
	SELECT n.sandbox_id, n.account_id, round(n.cpu_limit_millicores / 1000.0, 3),
	       ceil(n.memory_limit_bytes * 1000.0 / 1073741824) / 1000
	FROM (SELECT DISTINCT ON (sandbox_id) * FROM new_samples
	      WHERE account_id IS NOT NULL ORDER BY sandbox_id, ts DESC) n
	JOIN accounts a ON a.id = n.account_id
	WHERE n.cpu_limit_millicores BETWEEN 1 AND 256000
	  AND n.memory_limit_bytes BETWEEN 1 AND 1099511627776
	  AND NOT EXISTS (SELECT 1 FROM sandboxes s WHERE s.id = n.sandbox_id)
	ON CONFLICT (id) DO NOTHING;
	-- ends, the earliest of each incarnation
	INSERT INTO incarnation_ends (sandbox_id, incarnation, ended_at)
	SELECT sandbox_id, incarnation, min(ts) FROM new_samples WHERE ended
	GROUP BY sandbox_id, incarnation ORDER BY 1, 2
	ON CONFLICT (sandbox_id, incarnation) DO UPDATE
		SET ended_at = least(incarnation_ends.ended_at, EXCLUDED.ended_at);
	-- the newest incarnation of each sandbox, and when it began
	WITH inc AS (SELECT sandbox_id, incarnation, min(ts) f FROM new_samples GROUP BY 1, 2),
	newest AS (SELECT DISTINCT ON (sandbox_id) sandbox_id, incarnation, f FROM inc
	           ORDER BY sandbox_id, f DESC, incarnation DESC),
	moved AS (UPDATE sandboxes s SET incarnation = n.incarnation,
	            incarnation_from = CASE WHEN s.incarnation = n.incarnation
	                                    THEN least(s.incarnation_from, n.f) ELSE n.f END
	          FROM newest n WHERE s.id = n.sandbox_id
	            AND (s.incarnation IS NULL OR s.incarnation_from IS NULL
	                 OR n.f > s.incarnation_from
	                 OR (s.incarnation = n.incarnation AND n.f < s.incarnation_from))
	          RETURNING s.id)
	SELECT array_agg(id) INTO changed
	FROM (SELECT id FROM moved UNION SELECT DISTINCT sandbox_id FROM new_samples WHERE ended) x;
	IF changed IS NOT NULL THEN
		PERFORM meter_sandbox_ends(changed);
	END IF;
	RETURN NULL;
END
$$;

GRANT SELECT ON incarnation_ends TO meter_api;
