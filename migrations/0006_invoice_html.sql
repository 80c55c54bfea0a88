-- 0006_invoice_html: a final invoice keeps its HTML page too, byte for byte.
-- (Adding a column fires no row trigger: final invoices stay as they were.)
ALTER TABLE invoices ADD COLUMN body_html text;
