-- Back to migration 16: no per-key rate limits.
DROP TABLE IF EXISTS skiplock_rate_keys;

CREATE OR REPLACE FUNCTION skiplock_schema_version() RETURNS integer
LANGUAGE sql IMMUTABLE AS 'SELECT 16';
