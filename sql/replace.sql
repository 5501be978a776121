-- name: TaskInsertReplacing :many
-- Enqueues one task with a replace key (queue.WithReplaceKey,
-- queue.WithDebounce): the task of the key that has not started (pending,
-- never claimed, no history: the predicate of skiplock_tasks_replace_key_idx)
-- becomes this one, keeping its id and created_at; if there is none, the
-- task is inserted. One row comes back, with replaced telling which; none
-- when a concurrent producer inserted a task of the key between the UPDATE
-- and the INSERT (the unique index let it through first): the caller tries
-- again, and replaces that one.
--
-- The UPDATE only touches a row that is still unstarted on its latest
-- version (READ COMMITTED re-checks the WHERE on a row it had to wait for):
-- a worker that claimed the row first has made it running, and a new task
-- is inserted; a claim that comes after skips the locked row (SKIP LOCKED)
-- and takes it, with its new contents, once this transaction commits.
-- A replaced task due now wakes its queue's idle workers at commit, as
-- the insert trigger does for new tasks.
WITH replaced AS (
    UPDATE skiplock_tasks AS t
    SET queue = @queue::text, name = @name::text, payload = @payload::jsonb, metadata = @metadata::jsonb,
        priority = @priority::smallint,
        run_at = CASE WHEN @run_at::timestamptz = 'epoch' THEN now() + interval '1 millisecond' * @delay_ms::bigint
                      ELSE @run_at::timestamptz END,
        max_attempts = @max_attempts::integer, timeout_ms = nullif(@timeout_ms::bigint, 0),
        exclusive_key = nullif(@exclusive_key::text, ''), limit_key = nullif(@limit_key::text, '')
    WHERE t.replace_key = @replace_key::text
      AND t.status = 'pending' AND t.started_at IS NULL AND t.errors = '[]'::jsonb
    RETURNING t.id, t.queue, t.run_at
), inserted AS (
    INSERT INTO skiplock_tasks (queue, name, payload, metadata, priority, run_at, max_attempts, timeout_ms,
                                exclusive_key, limit_key, replace_key)
    SELECT @queue::text, @name::text, @payload::jsonb, @metadata::jsonb, @priority::smallint,
           CASE WHEN @run_at::timestamptz = 'epoch' THEN now() + interval '1 millisecond' * @delay_ms::bigint
                ELSE @run_at::timestamptz END,
           @max_attempts::integer, nullif(@timeout_ms::bigint, 0),
           nullif(@exclusive_key::text, ''), nullif(@limit_key::text, ''), @replace_key::text
    WHERE NOT EXISTS (SELECT 1 FROM replaced)
    ON CONFLICT DO NOTHING
    RETURNING id
), notified AS (
    SELECT pg_notify(left('skiplock_' || n.nspname, 63), r.queue)
    FROM replaced AS r, pg_catalog.pg_class AS c
    JOIN pg_catalog.pg_namespace AS n ON n.oid = c.relnamespace
    WHERE c.oid = 'skiplock_tasks'::regclass AND r.run_at <= now()
)
SELECT r.id, true AS replaced FROM replaced AS r WHERE (SELECT count(*) FROM notified) >= 0
UNION ALL
SELECT i.id, false AS replaced FROM inserted AS i;
