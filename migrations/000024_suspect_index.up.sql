-- Suspects (pending tasks with crashes > 0, worker/isolate.go) found by an
-- index of their own. Each worker looks for them at start, and whenever
-- it is told some may exist: without this index the look walked the
-- claim index of its queues, every pending task, twice (the recount, then
-- the next suspect). Eight worker processes started at once on a backlog
-- of 50,000 tasks spent 1.2 s of server time on those walks before their
-- claims had the machine to themselves; the walk grows with the backlog.
--
-- The index is empty but for suspects, which are rare: a new row version
-- that is not a suspect only evaluates the predicate. It takes HOT from no
-- update of a plain task: status is already in the claim index's
-- predicate, and crashes changes only with a rescue or a requeue, which
-- change status too, and with the recount of a suspect.
--
-- Expand only: workers of the previous release read suspects the same
-- way, and are only faster for it.

-- skiplock:concurrently
CREATE INDEX skiplock_tasks_suspect_idx
    ON skiplock_tasks (queue, priority, run_at, id)
    WHERE status = 'pending' AND crashes > 0;

CREATE OR REPLACE FUNCTION skiplock_schema_version() RETURNS integer
LANGUAGE sql IMMUTABLE AS 'SELECT 24';
