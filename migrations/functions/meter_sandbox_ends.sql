-- meter_sandbox_ends: The stop and its author of each sandbox of ids, from the
-- platform's stop (platform_stopped_at, when it is not before the current
-- incarnation began) and the collector's end of its incarnation
-- (incarnation_ends): the earlier one, at started_at at the earliest (rules 3
-- and 9). Only the rows that change are written. PL/pgSQL naming the sandboxes
-- by = ANY (ids) on the updated table too, so Citus sends the update to their
-- shards only. Run as its caller (meter_api's stop, the collector's write
-- through meter_samples_arrived), never as its owner: on Citus a transaction
-- may not write a shard as two users, and a stop updates the sandbox itself
-- first.
CREATE OR REPLACE FUNCTION meter_sandbox_ends(ids text[]) RETURNS void
LANGUAGE plpgsql SET search_path = public AS $$
BEGIN
	UPDATE sandboxes s SET stopped_at = x.stop, ended_by = x.by
	FROM (SELECT v.id,
	             CASE WHEN v.p IS NULL AND v.c IS NULL THEN NULL
	                  ELSE greatest(least(v.p, v.c), v.started_at) END stop,
	             CASE WHEN v.p IS NULL AND v.c IS NULL THEN NULL
	                  WHEN v.c IS NULL OR v.p <= v.c THEN 'platform' ELSE 'collector' END by
	      FROM (SELECT b.id, b.started_at,
	                   CASE WHEN b.platform_stopped_at >= coalesce(b.incarnation_from,
	                                                               '-infinity')
	                        THEN b.platform_stopped_at END p,
	                   e.ended_at c
	            FROM sandboxes b
	            LEFT JOIN incarnation_ends e
	                   ON e.sandbox_id = b.id AND e.incarnation = b.incarnation
	            WHERE b.id = ANY (ids)) v) x
	WHERE s.id = x.id AND s.id = ANY (ids)
	  AND (s.stopped_at IS DISTINCT FROM x.stop OR s.ended_by IS DISTINCT FROM x.by);
END
$$;

REVOKE ALL ON FUNCTION meter_sandbox_ends(text[]) FROM PUBLIC;

GRANT EXECUTE ON FUNCTION meter_sandbox_ends(text[]) TO meter_api;
