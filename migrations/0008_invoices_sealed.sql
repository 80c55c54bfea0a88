-- 0008_invoices_sealed: what a final invoice billed cannot be changed either.
--
-- invoice_quantities refuses TRUNCATE, and a row may be added only in the
-- transaction that made its invoice final; limit_notices refuses TRUNCATE
-- (clearing it would announce every crossing again).
--
-- The function it defined or changed is now defined in
-- migrations/functions/meter_quantities_with_invoice.sql, as all functions are
-- since 0040.
CREATE TRIGGER invoice_quantities_no_truncate BEFORE TRUNCATE ON invoice_quantities
	FOR EACH STATEMENT EXECUTE FUNCTION meter_refuse_change();
CREATE TRIGGER limit_notices_no_truncate BEFORE TRUNCATE ON limit_notices
	FOR EACH STATEMENT EXECUTE FUNCTION meter_refuse_change();

CREATE TRIGGER invoice_quantities_sealed BEFORE INSERT ON invoice_quantities
	FOR EACH ROW EXECUTE FUNCTION meter_quantities_with_invoice();
