-- A task's run_at is a point in time. The SQL enqueue functions accepted
-- 'infinity' and '-infinity', which no client reads into a time (Go's
-- time.Time has none): one pending task at '-infinity' made every claim
-- of its queue fail, and one at 'infinity' every Get or List that met it.
--
-- Existing such rows first: '-infinity' was due at once, so it becomes the
-- task's creation time; 'infinity' (never due) becomes the last time
-- PostgreSQL has. The scan for them takes no lock that stops workers. The
-- constraint is then added NOT VALID, which needs no scan under its
-- brief exclusive lock: every row already satisfies it, and every new row
-- version is checked.
UPDATE skiplock_tasks
SET run_at = CASE WHEN run_at = '-infinity' THEN created_at
                  ELSE '294276-12-31 23:59:59.999999+00'::timestamptz END
WHERE NOT isfinite(run_at);

ALTER TABLE skiplock_tasks
    ADD CONSTRAINT skiplock_tasks_run_at_check CHECK (isfinite(run_at)) NOT VALID;

CREATE OR REPLACE FUNCTION skiplock_schema_version() RETURNS integer
LANGUAGE sql IMMUTABLE AS 'SELECT 21';
