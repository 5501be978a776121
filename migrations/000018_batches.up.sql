-- Batches: a group of tasks enqueued together (the members) and up to two
-- callback tasks, one that runs once every member has finished whatever
-- the outcomes (on_finish), and one that runs only if every member
-- completed (on_success).
--
-- A member is finished when its status is terminal: completed, failed (for
-- good: a failed attempt with a retry left is pending again, not failed)
-- or cancelled. The batch's row keeps the counts of its finished members by
-- outcome; the trigger below moves them in the transaction, and the
-- statement, that changes a member's status, whoever makes the change (a
-- worker's outcome write, the rescuer, an operator's cancel or requeue).
-- It locks the batch's row to do so, so concurrent finishers, on any
-- number of processes, take their turns: the one whose count makes the
-- finished members the whole batch is the one that releases the callbacks,
-- and there is only one such count.
--
-- Callbacks are inserted 'waiting', outside the claim's index, like a
-- workflow's dependents. They carry the batch's id too, so that a handler
-- reads its batch's counts from its own task; the trigger tells them from
-- members by the ids the batch's row keeps.
--
-- batch_id is NULL on every other task, and the triggers' WHEN clauses test
-- it first: a task outside batches pays nothing but a bit in the null
-- bitmap that every row already has.
CREATE TABLE skiplock_batches (
    id                 bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name               text        NOT NULL DEFAULT '',
    total              integer     NOT NULL,
    completed          integer     NOT NULL DEFAULT 0,
    failed             integer     NOT NULL DEFAULT 0,
    cancelled          integer     NOT NULL DEFAULT 0,
    on_finish_task_id  bigint,
    on_success_task_id bigint,
    created_at         timestamptz NOT NULL DEFAULT now(),
    -- When every member had first finished; the callbacks were released
    -- then. A member requeued later lowers the counts but leaves this set:
    -- the callbacks run once.
    finished_at        timestamptz,
    CONSTRAINT skiplock_batches_total_check CHECK (total > 0),
    CONSTRAINT skiplock_batches_counts_check
        CHECK (completed >= 0 AND failed >= 0 AND cancelled >= 0 AND completed + failed + cancelled <= total)
);

ALTER TABLE skiplock_tasks ADD COLUMN batch_id bigint;

-- A batch's tasks, for `skiplock batch show`, the dashboard and retention.
-- skiplock:concurrently
CREATE INDEX skiplock_tasks_batch_idx
    ON skiplock_tasks (batch_id)
    WHERE batch_id IS NOT NULL;

-- Counts a member's change of status in its batch's row and, when the last
-- member finishes, releases the callbacks:
--   into a terminal status (completed, failed, cancelled): one more of that
--     outcome; from a terminal status (a requeue, a failed task
--     cancelled): one fewer of the old outcome.
--   deleted before it finished: counted as cancelled (it will never finish
--     otherwise). A member deleted after it finished keeps its count, so
--     that retention does not change a batch's outcome.
--   the first time the counts reach the total: finished_at is set; the
--     on_finish callback becomes pending; the on_success callback becomes
--     pending if every member completed, and is cancelled otherwise (with
--     the counts in its history).
--   reaching the total again after a requeue: no callback runs again, but
--     an on_success callback cancelled by the first finish becomes pending
--     if now every member completed.
-- Callbacks' own changes of status count for nothing.
CREATE FUNCTION skiplock_batch_advance() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    channel text := left('skiplock_' || TG_TABLE_SCHEMA, 63);
    task skiplock_tasks;
    was text;
    now_is text;
    b skiplock_batches;
    c integer;
    f integer;
    x integer;
    q text;
BEGIN
    IF TG_OP = 'DELETE' THEN
        task := OLD;
        was := OLD.status;
        now_is := 'cancelled';
    ELSE
        task := NEW;
        was := OLD.status;
        now_is := NEW.status;
    END IF;

    -- The callback ids never change: no lock to tell a callback.
    SELECT * INTO b FROM skiplock_batches WHERE id = task.batch_id;
    IF NOT FOUND OR task.id = b.on_finish_task_id OR task.id = b.on_success_task_id THEN
        RETURN NULL;
    END IF;

    -- Concurrent finishers of one batch queue here; each reads the counts
    -- the one before it committed.
    SELECT * INTO b FROM skiplock_batches WHERE id = task.batch_id FOR NO KEY UPDATE;
    c := b.completed; f := b.failed; x := b.cancelled;
    CASE was
        WHEN 'completed' THEN c := c - 1;
        WHEN 'failed' THEN f := f - 1;
        WHEN 'cancelled' THEN x := x - 1;
        ELSE NULL;
    END CASE;
    CASE now_is
        WHEN 'completed' THEN c := c + 1;
        WHEN 'failed' THEN f := f + 1;
        WHEN 'cancelled' THEN x := x + 1;
        ELSE NULL;
    END CASE;
    UPDATE skiplock_batches
    SET completed = c, failed = f, cancelled = x,
        finished_at = CASE WHEN c + f + x = b.total THEN coalesce(b.finished_at, now()) ELSE b.finished_at END
    WHERE id = b.id;

    IF c + f + x < b.total OR b.completed + b.failed + b.cancelled = b.total THEN
        RETURN NULL;
    END IF;

    IF b.finished_at IS NULL THEN
        FOR q IN
            UPDATE skiplock_tasks AS t
            SET status = 'pending', run_at = greatest(t.run_at, now())
            WHERE t.id IN (b.on_finish_task_id, CASE WHEN c = b.total THEN b.on_success_task_id END)
              AND t.status = 'waiting'
            RETURNING t.queue
        LOOP
            PERFORM pg_notify(channel, q);
        END LOOP;
        IF c < b.total THEN
            UPDATE skiplock_tasks AS t
            SET status = 'cancelled',
                finished_at = now(),
                errors = t.errors || jsonb_build_array(jsonb_build_object(
                    'attempt', t.attempt, 'outcome', 'batch_failed',
                    'error', format('batch %s finished with %s completed, %s failed and %s cancelled of %s', b.id, c, f, x, b.total),
                    'finished_at', now()))
            WHERE t.id = b.on_success_task_id AND t.status = 'waiting';
        END IF;
    ELSIF c = b.total THEN
        -- Every member completed at last, after requeues: the success
        -- callback that the first finish cancelled runs now.
        FOR q IN
            UPDATE skiplock_tasks AS t
            SET status = 'pending', run_at = now(), finished_at = NULL,
                errors = t.errors || jsonb_build_array(jsonb_build_object(
                    'attempt', t.attempt, 'outcome', 'requeued',
                    'error', format('batch %s: every member has completed', b.id),
                    'finished_at', now()))
            WHERE t.id = b.on_success_task_id AND t.status = 'cancelled'
              AND t.errors -> -1 ->> 'outcome' = 'batch_failed'
            RETURNING t.queue
        LOOP
            PERFORM pg_notify(channel, q);
        END LOOP;
    END IF;
    RETURN NULL;
END;
$$;

DO $$ BEGIN
    EXECUTE format('ALTER FUNCTION skiplock_batch_advance() SET search_path = %I, pg_temp', current_schema());
END $$;

-- The WHEN clauses keep the function off every task outside batches, and
-- off every change of a member's that neither enters nor leaves a terminal
-- status (a claim, a retry).
CREATE TRIGGER skiplock_tasks_batch_update
    AFTER UPDATE OF status ON skiplock_tasks
    FOR EACH ROW
    WHEN (NEW.batch_id IS NOT NULL AND OLD.status IS DISTINCT FROM NEW.status
          AND (NEW.status IN ('completed', 'failed', 'cancelled') OR OLD.status IN ('completed', 'failed', 'cancelled')))
    EXECUTE FUNCTION skiplock_batch_advance();

CREATE TRIGGER skiplock_tasks_batch_delete
    AFTER DELETE ON skiplock_tasks
    FOR EACH ROW
    WHEN (OLD.batch_id IS NOT NULL AND OLD.status NOT IN ('completed', 'failed', 'cancelled'))
    EXECUTE FUNCTION skiplock_batch_advance();

CREATE OR REPLACE FUNCTION skiplock_schema_version() RETURNS integer
LANGUAGE sql IMMUTABLE AS 'SELECT 18';
