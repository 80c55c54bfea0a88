-- 0003_usage_by_hour: an account's hours in order, for the trial's crossing month.
CREATE INDEX usage_hourly_account_hour ON usage_hourly (account_id, hour);
