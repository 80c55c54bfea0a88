-- 0024_plans_from_the_api: price plans published through meter-api
-- (POST /v1/price-plans) as well as `meter plan add`. Both insert a plan only
-- when its effective_from is after the database's now(), in the insert itself:
-- hours already rated keep the prices they were rated at.
GRANT INSERT ON price_plans TO meter_api;
