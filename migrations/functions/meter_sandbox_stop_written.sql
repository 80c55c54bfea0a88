-- meter_sandbox_stop_written: The row trigger of sandboxes that keeps a stop
-- written straight into stopped_at (a script, a restore) as the platform's:
-- platform_stopped_at and ended_by follow it, unless the collector's end is
-- what moved it.
CREATE OR REPLACE FUNCTION meter_sandbox_stop_written() RETURNS trigger LANGUAGE plpgsql AS $$
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
