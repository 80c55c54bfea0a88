-- meter_refuse_change: The trigger that refuses to change, delete or truncate
-- a final invoice, what it billed, or limit_notices: the database itself, not
-- only the code, keeps them as they were written.
CREATE OR REPLACE FUNCTION meter_refuse_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	IF TG_OP = 'TRUNCATE' THEN
		RAISE EXCEPTION 'final invoices never change' USING ERRCODE = 'integrity_constraint_violation';
	END IF;
	RAISE EXCEPTION 'final invoices never change (% of account %)', OLD.month, OLD.account_id
		USING ERRCODE = 'integrity_constraint_violation';
END
$$;
