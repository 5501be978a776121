ALTER TABLE skiplock_tasks DROP CONSTRAINT IF EXISTS skiplock_tasks_run_at_check;

CREATE OR REPLACE FUNCTION skiplock_schema_version() RETURNS integer
LANGUAGE sql IMMUTABLE AS 'SELECT 20';
