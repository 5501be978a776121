-- Back to migration 17: no batches.
DROP TRIGGER IF EXISTS skiplock_tasks_batch_delete ON skiplock_tasks;
DROP TRIGGER IF EXISTS skiplock_tasks_batch_update ON skiplock_tasks;
DROP FUNCTION IF EXISTS skiplock_batch_advance();
DROP INDEX IF EXISTS skiplock_tasks_batch_idx;
ALTER TABLE skiplock_tasks DROP COLUMN IF EXISTS batch_id;
DROP TABLE IF EXISTS skiplock_batches;

CREATE OR REPLACE FUNCTION skiplock_schema_version() RETURNS integer
LANGUAGE sql IMMUTABLE AS 'SELECT 17';
