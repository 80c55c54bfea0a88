-- 0008_invoices_sealed: what a final invoice billed cannot be changed either.
--
-- invoice_quantities refuses TRUNCATE, and a row may be added only in the
-- transaction that made its invoice final; limit_notices refuses TRUNCATE
-- (clearing it would announce every crossing again).
CREATE TRIGGER invoice_quantities_no_truncate BEFORE TRUNCATE ON invoice_quantities
	FOR EACH STATEMENT EXECUTE FUNCTION meter_refuse_change();
CREATE TRIGGER limit_notices_no_truncate BEFORE TRUNCATE ON limit_notices
	FOR EACH STATEMENT EXECUTE FUNCTION meter_refuse_change();

CREATE FUNCTION meter_quantities_with_invoice() RETURNS trigger LANGUAGE plpgsql AS $$
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
CREATE TRIGGER invoice_quantities_sealed BEFORE INSERT ON invoice_quantities
	FOR EACH ROW EXECUTE FUNCTION meter_quantities_with_invoice();
