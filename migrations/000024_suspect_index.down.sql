DROP INDEX IF EXISTS skiplock_tasks_suspect_idx;

CREATE OR REPLACE FUNCTION skiplock_schema_version() RETURNS integer
LANGUAGE sql IMMUTABLE AS 'SELECT 23';
