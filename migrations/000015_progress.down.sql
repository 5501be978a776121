-- Back to migration 14: no progress, no checkpoints.
ALTER TABLE skiplock_tasks DROP COLUMN IF EXISTS checkpoint;
ALTER TABLE skiplock_tasks DROP COLUMN IF EXISTS progress;

CREATE OR REPLACE FUNCTION skiplock_schema_version() RETURNS integer
LANGUAGE sql IMMUTABLE AS 'SELECT 14';
