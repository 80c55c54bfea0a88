-- meter_webhook_invoice: The row trigger of invoices: an invoice made final
-- sends invoice.finalized, with its total and where to read it.
CREATE OR REPLACE FUNCTION meter_webhook_invoice() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
	doc jsonb := NEW.body_json::jsonb;
BEGIN
	PERFORM meter_webhook_event(NEW.account_id, 'invoice.finalized',
		jsonb_build_object('account_id', NEW.account_id,
		                   'month', to_char(NEW.month, 'YYYY-MM'),
		                   'total', doc -> 'total',
		                   'total_exact', doc -> 'total_exact',
		                   'finalized_at', to_char(NEW.finalized_at AT TIME ZONE 'UTC',
		                                           'YYYY-MM-DD"T"HH24:MI:SS"Z"'),
		                   'invoice', '/v1/accounts/' || NEW.account_id || '/invoices/'
		                              || to_char(NEW.month, 'YYYY-MM')));
	RETURN NULL;
END
$$;
