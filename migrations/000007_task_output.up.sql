-- Task output: the JSON result a handler records (worker.SetOutput),
-- written with the completion in the same statement (TaskFinishMany).
-- NULL for tasks that recorded none, which costs a plain task nothing: a
-- null is a bit in the row's null bitmap, which every row already has.
ALTER TABLE skiplock_tasks ADD COLUMN output jsonb;

CREATE OR REPLACE FUNCTION skiplock_schema_version() RETURNS integer
LANGUAGE sql IMMUTABLE AS 'SELECT 7';
