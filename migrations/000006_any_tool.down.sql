DROP FUNCTION IF EXISTS skiplock_enqueue_many(jsonb);
DROP FUNCTION IF EXISTS skiplock_enqueue(text, jsonb, text, timestamptz, integer, integer, interval, text, text, jsonb);
DROP FUNCTION IF EXISTS skiplock_enqueue_task(text, jsonb, text, timestamptz, integer, integer, interval, text, text, jsonb);
-- Before migration 6 the version lived only in a migration tool's table.
DROP FUNCTION IF EXISTS skiplock_schema_version();
