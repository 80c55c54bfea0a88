-- 0020_listing_later: a paged listing orders its sandboxes when its second page
-- is asked for, not when its first is given.
--
-- head holds the ids of the first page as it was given. ids stays NULL until a
-- client asks for the page after it; it is then head followed by every other
-- sandbox of the range, ranked as they stand at that moment, and fixed from
-- then on. Every sandbox is still listed once whatever usage lands between the
-- pages, and the first page, the one dashboards and most clients read, costs an
-- index scan of its own length instead of the account's whole month.
ALTER TABLE usage_listings ALTER COLUMN ids DROP NOT NULL;
ALTER TABLE usage_listings ADD COLUMN head text[] NOT NULL DEFAULT '{}';
