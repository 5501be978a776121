-- name: TaskInsertSequenced :many
-- TaskInsertMany for a batch in which some tasks have a sequence key
-- (queue.WithSequence; migration 11). skiplock_sequence_enter locks
-- lock_keys (the keys of the whole batch, of which this statement may be a
-- chunk, so that a batch takes all its locks in one order), waiting for
-- other producers of them, and returns those that have a blocking task: a
-- task of one of those, or one after the first of
-- its key in the batch, is inserted waiting, the others pending. The
-- function runs before any row is inserted (the CTE is materialized and
-- every row reads it) and checks with a snapshot taken after its locks.
-- Rows come back in input order, as TaskInsertMany's do.
WITH busy AS MATERIALIZED (
    SELECT skiplock_sequence_enter(@lock_keys::text[]) AS keys
)
INSERT INTO skiplock_tasks (queue, name, payload, metadata, priority, run_at, max_attempts, timeout_ms,
                            unique_key, unique_window_key, exclusive_key, limit_key,
                            sequence_key, sequence_hold, status)
SELECT u.queue, u.name, u.payload, u.metadata, u.priority,
       CASE WHEN u.run_at = 'epoch' THEN now() + u.delay_ms * interval '1 millisecond' ELSE u.run_at END,
       u.max_attempts, nullif(u.timeout_ms, 0),
       nullif(u.unique_key, ''), nullif(u.unique_window_key, ''), nullif(u.exclusive_key, ''),
       nullif(u.limit_key, ''),
       nullif(u.sequence_key, ''),
       CASE WHEN u.sequence_key <> '' AND u.sequence_hold THEN true END,
       CASE WHEN u.sequence_key = '' THEN 'pending'
            WHEN u.nth > 1 OR u.sequence_key = ANY(b.keys) THEN 'waiting'
            ELSE 'pending' END
FROM (
    SELECT o.*, row_number() OVER (PARTITION BY o.sequence_key ORDER BY o.ord) AS nth
    FROM (
        SELECT s.*, row_number() OVER () AS ord
        FROM (
            SELECT unnest(@queues::text[])             AS queue,
                   unnest(@names::text[])              AS name,
                   unnest(@payloads::jsonb[])          AS payload,
                   unnest(@metadatas::jsonb[])         AS metadata,
                   unnest(@priorities::smallint[])     AS priority,
                   unnest(@run_ats::timestamptz[])     AS run_at,
                   unnest(@delay_ms::bigint[])         AS delay_ms,
                   unnest(@max_attempts::integer[])    AS max_attempts,
                   unnest(@timeout_ms::bigint[])       AS timeout_ms,
                   unnest(@unique_keys::text[])        AS unique_key,
                   unnest(@unique_window_keys::text[]) AS unique_window_key,
                   unnest(@exclusive_keys::text[])     AS exclusive_key,
                   unnest(@limit_keys::text[])         AS limit_key,
                   unnest(@sequence_keys::text[])      AS sequence_key,
                   unnest(@sequence_holds::boolean[])  AS sequence_hold
        ) AS s
    ) AS o
) AS u
CROSS JOIN busy AS b
ORDER BY u.ord
ON CONFLICT DO NOTHING
RETURNING id, coalesce(unique_key, '')::text AS unique_key, coalesce(unique_window_key, '')::text AS unique_window_key;

-- name: SequenceReleaseStalled :many
-- The rescuer's sweep: releases each key whose waiting tasks have nothing
-- ahead of them, pending, running or failed and holding. That happens when
-- a release found the key's lock taken by a producer (the trigger only
-- tries it, so that an outcome write never waits on a producer), when a
-- requeue could not take the lock, or in a transaction that was not READ
-- COMMITTED. The keys with waiting tasks are read one index probe each (a
-- loose scan of skiplock_tasks_sequence_waiting_idx), and each key's head
-- is one probe of skiplock_tasks_sequence_head_idx, so a pass costs one
-- probe when no task waits; skiplock_sequence_release re-checks each under
-- the key's lock and skips a key a producer holds now.
WITH RECURSIVE waiting_keys AS (
    (SELECT t.sequence_key AS key
     FROM skiplock_tasks AS t
     WHERE t.sequence_key IS NOT NULL AND t.status = 'waiting'
     ORDER BY t.sequence_key
     LIMIT 1)
    UNION ALL
    SELECT (SELECT t.sequence_key
            FROM skiplock_tasks AS t
            WHERE t.sequence_key > k.key AND t.status = 'waiting'
            ORDER BY t.sequence_key
            LIMIT 1)
    FROM waiting_keys AS k
    WHERE k.key IS NOT NULL
), stalled AS MATERIALIZED (
    SELECT k.key
    FROM waiting_keys AS k
    WHERE k.key IS NOT NULL
      AND NOT EXISTS (
          SELECT 1 FROM skiplock_tasks AS h
          WHERE h.sequence_key = k.key
            AND (h.status IN ('pending', 'running') OR (h.status = 'failed' AND h.sequence_hold)))
)
SELECT s.key::text AS sequence_key, r.id::bigint AS released_id
FROM stalled AS s
CROSS JOIN LATERAL (SELECT skiplock_sequence_release(s.key, @channel::text) AS id) AS r
WHERE r.id IS NOT NULL;

-- name: SequenceTasks :many
-- A sequence's tasks in order: its unfinished ones (pending, running,
-- waiting, failed) from the first, up to max_live, and its latest
-- finished ones (completed, cancelled), up to max_done.
SELECT t.*
FROM skiplock_tasks AS t
WHERE t.id IN (
    (SELECT l.id FROM skiplock_tasks AS l
     WHERE l.sequence_key = @sequence_key::text AND l.status IN ('pending', 'running', 'waiting', 'failed')
     ORDER BY l.id
     LIMIT @max_live::integer)
    UNION ALL
    (SELECT d.id FROM skiplock_tasks AS d
     WHERE d.sequence_key = @sequence_key::text AND d.status IN ('completed', 'cancelled')
     ORDER BY d.id DESC
     LIMIT @max_done::integer))
ORDER BY t.id;

-- name: SequenceCounts :many
-- How many tasks of a sequence are in each status, pending tasks told
-- apart as in TaskStatusMany.
SELECT (CASE WHEN t.status <> 'pending' OR t.run_at <= now() THEN t.status
             WHEN t.attempt > 0 THEN 'retrying' ELSE 'scheduled' END)::text AS status,
       count(*)::bigint AS count
FROM skiplock_tasks AS t
WHERE t.sequence_key = @sequence_key::text
GROUP BY 1;
