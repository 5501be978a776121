-- Progress and checkpoints: what a running handler reports
-- (worker.SetProgress) and the state it saves to resume from after a
-- crash or a retry (worker.SaveCheckpoint). Each is written at once, by
-- its own fenced UPDATE, never by the claim or the outcome write. NULL for
-- tasks that record none, which costs a plain task nothing: a null is a
-- bit in the row's null bitmap, and adding a nullable column without a
-- default rewrites no row.
ALTER TABLE skiplock_tasks ADD COLUMN progress jsonb;
ALTER TABLE skiplock_tasks ADD COLUMN checkpoint jsonb;

CREATE OR REPLACE FUNCTION skiplock_schema_version() RETURNS integer
LANGUAGE sql IMMUTABLE AS 'SELECT 15';
