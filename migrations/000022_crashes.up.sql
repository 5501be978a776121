-- Poison tasks (worker/isolate.go, docs/RELIABILITY.md): crashes counts the
-- worker processes that died while the task ran in them. A task with
-- crashes > 0 is a suspect: the ordinary claims pass it over, and a worker
-- runs it alone; at Config.MaxCrashes the rescue fails it. Requeue sets it
-- back to 0.
--
-- Expand only: a column with a constant default is a change of the
-- catalog alone since PostgreSQL 11 (no rewrite, a brief exclusive lock),
-- and workers of the previous release, which never name it, keep working
-- (they claim suspects as any task, and their rescues count nothing).
ALTER TABLE skiplock_tasks ADD COLUMN crashes smallint NOT NULL DEFAULT 0;

CREATE OR REPLACE FUNCTION skiplock_schema_version() RETURNS integer
LANGUAGE sql IMMUTABLE AS 'SELECT 22';
