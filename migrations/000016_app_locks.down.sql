-- Back to migration 15: no named application locks.
DROP SEQUENCE IF EXISTS skiplock_locks_token_seq;
DROP TABLE IF EXISTS skiplock_locks;

CREATE OR REPLACE FUNCTION skiplock_schema_version() RETURNS integer
LANGUAGE sql IMMUTABLE AS 'SELECT 15';
