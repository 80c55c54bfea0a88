-- meter_quantities_with_invoice: The row trigger that seals invoice_quantities
-- and invoice_sandboxes: a row may be added only in the transaction that made
-- its invoice final (the invoices row's xmin is this transaction).
CREATE OR REPLACE FUNCTION meter_quantities_with_invoice() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	IF NOT EXISTS (SELECT 1 FROM invoices i WHERE i.account_id = NEW.account_id
	               AND i.month = NEW.month
	               AND i.xmin::text::bigint = pg_current_xact_id()::text::bigint % 4294967296) THEN
		RAISE EXCEPTION 'invoice % of account % is final: nothing can be added to it',
			NEW.month, NEW.account_id USING ERRCODE = 'integrity_constraint_violation';
	END IF;
	RETURN NEW;
END
$$;
