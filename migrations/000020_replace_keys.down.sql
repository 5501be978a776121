-- Back to migration 19: no replace keys.
DROP FUNCTION IF EXISTS skiplock_enqueue_replace(text, jsonb, text, interval, text, timestamptz, integer, integer, interval, text, jsonb);
DROP INDEX IF EXISTS skiplock_tasks_replace_key_idx;
ALTER TABLE skiplock_tasks DROP COLUMN IF EXISTS replace_key;

CREATE OR REPLACE FUNCTION skiplock_schema_version() RETURNS integer
LANGUAGE sql IMMUTABLE AS 'SELECT 19';
