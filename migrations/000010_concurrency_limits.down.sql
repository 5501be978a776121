ALTER TABLE skiplock_tasks DROP COLUMN IF EXISTS limit_key;
DROP TABLE IF EXISTS skiplock_limits;

CREATE OR REPLACE FUNCTION skiplock_schema_version() RETURNS integer
LANGUAGE sql IMMUTABLE AS 'SELECT 9';
