-- The task names each worker process has handlers for, beside the queues it
-- claims from, so that operators can see pending tasks that no live worker
-- handles (queue.Client.Unhandled, `skiplock stats`, the dashboard). Expand
-- only: a worker built before this column never writes it, and NULL means
-- "unknown", read as handling every name of its queues.
ALTER TABLE skiplock_workers ADD COLUMN names text[];

CREATE OR REPLACE FUNCTION skiplock_schema_version() RETURNS integer
LANGUAGE sql IMMUTABLE AS 'SELECT 23';
