-- name: TaskInsertMany :many
-- Inserts a batch (one task is a batch of one): one round trip, and one
-- notification per queue from the statement trigger. A run_at of the epoch
-- means "now() + delay_ms" on the database's clock, so that a producer's
-- clock skew never delays a task. Empty keys mean none. A task whose unique
-- key is taken is skipped (ON CONFLICT DO NOTHING): rows come back in input
-- order, with their keys, so the caller can tell which were skipped.
INSERT INTO skiplock_tasks (queue, name, payload, metadata, priority, run_at, max_attempts, timeout_ms,
                            unique_key, unique_window_key, exclusive_key, limit_key)
SELECT u.queue, u.name, u.payload, u.metadata, u.priority,
       CASE WHEN u.run_at = 'epoch' THEN now() + u.delay_ms * interval '1 millisecond' ELSE u.run_at END,
       u.max_attempts, nullif(u.timeout_ms, 0),
       nullif(u.unique_key, ''), nullif(u.unique_window_key, ''), nullif(u.exclusive_key, ''),
       nullif(u.limit_key, '')
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
           unnest(@limit_keys::text[])         AS limit_key
) AS u
ON CONFLICT DO NOTHING
RETURNING id, coalesce(unique_key, '')::text AS unique_key, coalesce(unique_window_key, '')::text AS unique_window_key;

-- name: TaskInsertManyPlain :many
-- TaskInsertMany for a batch in which no task has a unique key, so that no
-- row can conflict: without ON CONFLICT, which makes PostgreSQL insert each
-- row speculatively (every unique index checked first, the insert
-- confirmed after). A plain INSERT of 100 tasks took 12.4 us a row of
-- server time against 16.4 with ON CONFLICT DO NOTHING, of one task 129 us
-- against 143 (2 vCPU AMD EPYC, PostgreSQL 15). The rows and their order
-- are TaskInsertMany's.
INSERT INTO skiplock_tasks (queue, name, payload, metadata, priority, run_at, max_attempts, timeout_ms,
                            exclusive_key, limit_key)
SELECT u.queue, u.name, u.payload, u.metadata, u.priority,
       CASE WHEN u.run_at = 'epoch' THEN now() + u.delay_ms * interval '1 millisecond' ELSE u.run_at END,
       u.max_attempts, nullif(u.timeout_ms, 0),
       nullif(u.exclusive_key, ''), nullif(u.limit_key, '')
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
           unnest(@exclusive_keys::text[])     AS exclusive_key,
           unnest(@limit_keys::text[])         AS limit_key
) AS u
RETURNING id, ''::text AS unique_key, ''::text AS unique_window_key;

-- name: TaskUniqueHolders :many
-- The tasks that hold unique keys, for reporting duplicates.
SELECT id, coalesce(unique_key, '')::text AS unique_key, coalesce(unique_window_key, '')::text AS unique_window_key
FROM skiplock_tasks
WHERE (unique_key = ANY(@unique_keys::text[]) AND status IN ('pending', 'running'))
   OR unique_window_key = ANY(@unique_window_keys::text[]);

-- name: TaskClaim :many
-- Advisory lock keys use the two-int form (lock_class, low 32 bits of the
-- task id), where lock_class is the OID of skiplock_tasks: pg_locks shows
-- classid = lock_class, objid = id % 2^32, objsubid = 2.
-- The claim. Rows are picked with SKIP LOCKED, then locked with a
-- session-level advisory lock, then marked running, in one statement. Both
-- CTEs are MATERIALIZED so that pg_try_advisory_lock runs exactly once on each
-- picked row and nowhere else: inlined, the planner may push the lock call
-- down into a scan of the table and take locks on rows it then discards. A
-- row whose advisory lock is still held (its previous run is finishing) is
-- skipped and stays pending.
--
-- Flow control rides along: a paused queue yields nothing; only_names are
-- the names the claim may take (a worker passes the names it has handlers
-- for, less its rate-limited ones, or one rate-limited name: a task whose
-- name no running worker handles stays pending; empty means every name),
-- a filter of the claim index's scan, which reads the index in claim order
-- as without it; skip_names are names it must not take; only_ids, when not
-- empty, restricts the claim to the tasks a per-key rate limit granted
-- (RateKeyTake; such claims use no cursor); a task with an exclusive
-- key is picked only while no task of its key runs, at most one per key per
-- claim, and under a transaction-level lock on the key so that two claimers
-- cannot both take one (a unique index on running exclusive keys backs this).
-- "A task of its key runs" is asked one of two ways. While at most 32
-- tasks with a key run (keys_running, read only once a row with a key
-- is), their keys are read once, into the hash of a hashed NOT IN; else
-- each row with a key looks its key up in that index. A look-up costs
-- 1.5-2 us (the index entry and the row it points to), and a claim reads
-- every pending row of keys all taken before it gives up: with 3 keys and
-- 2,000 tasks waiting, 3.2-4.6 ms a claim against 0.7-0.9 ms through the
-- hash; with 2,000 keys running, reading them all cost more than the
-- look-ups of the 250 rows a claim takes (0.8-1.2 ms either way).
--
-- With use_after, the claim starts past a position in claim order (a keyset
-- cursor): the claim is planned per call, so the OR folds away and the row
-- comparison becomes a bound of the index scan, which then starts where the
-- live rows are instead of walking the entries of rows already claimed.
-- Those entries stay in the index until vacuum can remove them, and while
-- another transaction holds the xmin horizon back, nothing can: every claim
-- from the head would walk all of them (worker/claim.go decides when to
-- use the cursor).
--
-- It also releases the locks of tasks whose outcomes were just written
-- (unlock_ids, and their limit slots, unlock_limit_locks), saving the lock
-- session a round trip: "released" is evaluated, before anything is picked,
-- as part of "open".
--
-- Concurrency limits (skiplock_limits; see migration 10): while the table is
-- empty, "bound" is empty and the rest is the claim above. Otherwise each
-- picked row falls under a scope per limit that matches it (its queue's,
-- its name's, and one per key pattern that its limit_key matches, per key),
-- and is taken only if it gets a place in every scope, in one of the
-- scope's blocks (lease mode counts instead: TaskClaimLease). A scope's
-- max_running places come in blocks of g = max(1, max_running / 256) (the
-- last one may be smaller); a block is a session-level advisory lock
-- (limit_class, hash(scope) + block) that one session holds, once, for as
-- long as any of its tasks uses a place in it, and that it alone fills:
-- held_limit_locks and held_limit_counts say which blocks this session
-- holds and how many of its tasks use each (the worker releases a block
-- with the last of them). Free places of held blocks are used first, then
-- new blocks are tried, from a random one on, as many as the remaining rows
-- need. Below 512, a block is one place: one slot lock per running task.
-- Above, a worker's places sit in a few locks, and a place that one
-- session's block holds and does not use waits for that session (at most
-- g - 1 per session and scope). Blocks taken that no taken row uses are
-- released before the statement ends ("surplus").
WITH released AS MATERIALIZED (
    SELECT (SELECT count(*) FILTER (WHERE pg_advisory_unlock(@lock_class::integer, u.id::bit(32)::integer))
            FROM unnest(@unlock_ids::bigint[]) AS u(id))
         + (SELECT count(*) FILTER (WHERE pg_advisory_unlock(@limit_class::integer, k.key))
            FROM unnest(@unlock_limit_locks::integer[]) AS k(key)) AS n
), open AS MATERIALIZED (
    SELECT NOT EXISTS (
        SELECT 1 FROM skiplock_queues AS q WHERE q.name = @queue::text AND q.paused_at IS NOT NULL
    ) AND (SELECT n FROM released) >= 0 AS ok
), any_limits AS MATERIALIZED (
    SELECT EXISTS (SELECT 1 FROM skiplock_limits) AS yes
), running AS MATERIALIZED (
    -- The running rows of each scope with any, in this snapshot, when the
    -- worker asks (check_full: its last claim came back short). Scopes
    -- already at their limit are left out of the batch rather than filling
    -- it only to be refused, which would starve the rest of the queue
    -- behind them; and a claim takes no more rows than a limit on the
    -- queue itself has places left (of one left, one row, not a batch of
    -- rows to lock, bind and refuse). A hint, not the guarantee (places
    -- and counts below are): a dead worker's tasks count here until the
    -- rescuer returns them. Each reference to skiplock_tasks costs the
    -- planner about 0.5 ms (its partial indexes), so there is one.
    SELECT m.kind, m.target, m.max_running,
           CASE m.kind WHEN 'queue' THEN r.queue WHEN 'name' THEN r.name ELSE r.limit_key END AS val,
           count(*) AS n
    FROM skiplock_tasks AS r
    JOIN skiplock_limits AS m
      ON (m.kind = 'queue' AND m.target = @queue::text AND r.queue = m.target)
      OR (m.kind = 'name' AND r.name = m.target)
      OR (m.kind = 'key' AND r.limit_key LIKE m.pattern)
    WHERE r.status = 'running'
      AND @check_full::boolean
      AND (SELECT yes FROM any_limits)
    GROUP BY 1, 2, 3, 4
), full_scopes AS MATERIALIZED (
    SELECT c.kind, c.val FROM running AS c WHERE c.n >= c.max_running
), keys_running AS MATERIALIZED (
    -- Whether few tasks with an exclusive key run (see TaskClaim): read
    -- only when a pending row with a key is.
    SELECT count(*) <= 32 AS few
    FROM (SELECT 1 FROM skiplock_tasks AS r
          WHERE r.exclusive_key IS NOT NULL AND r.status = 'running' LIMIT 33) AS x
), picked AS MATERIALIZED (
    SELECT p.id, p.exclusive_key, p.name, p.limit_key, p.priority, p.run_at
    FROM skiplock_tasks AS p
    WHERE p.status = 'pending'
      AND p.queue = @queue::text
      AND p.run_at <= now()
      AND (SELECT ok FROM open)
      AND (NOT @use_after::boolean
           OR (p.priority, p.run_at, p.id) > (@after_priority::smallint, @after_run_at::timestamptz, @after_id::bigint))
      AND (cardinality(@only_names::text[]) = 0 OR p.name = ANY(@only_names::text[]))
      AND NOT (p.name = ANY(@skip_names::text[]))
      AND (coalesce(cardinality(@only_ids::bigint[]), 0) = 0 OR p.id = ANY(@only_ids::bigint[]))
      -- A suspect (crashes > 0: it was running when a worker process
      -- died) is taken only by id, by the worker that runs it alone.
      AND (p.crashes = 0 OR p.id = ANY(@only_ids::bigint[]))
      AND (p.exclusive_key IS NULL OR CASE WHEN (SELECT few FROM keys_running)
          THEN p.exclusive_key NOT IN (
              SELECT r.exclusive_key FROM skiplock_tasks AS r WHERE r.exclusive_key IS NOT NULL AND r.status = 'running')
          ELSE NOT EXISTS (
              SELECT 1 FROM skiplock_tasks AS r WHERE r.exclusive_key = p.exclusive_key AND r.status = 'running') END)
      AND NOT EXISTS (SELECT 1 FROM full_scopes AS f WHERE f.kind = 'queue')
      AND p.name NOT IN (SELECT f.val FROM full_scopes AS f WHERE f.kind = 'name')
      AND (p.limit_key IS NULL OR p.limit_key NOT IN (SELECT f.val FROM full_scopes AS f WHERE f.kind = 'key'))
    ORDER BY p.priority, p.run_at, p.id
    LIMIT least(@max::integer, greatest(coalesce((SELECT q.max_running - q.n FROM running AS q WHERE q.kind = 'queue'), @max::integer), 0))
    FOR UPDATE SKIP LOCKED
), exclusive_ok AS MATERIALIZED (
    -- A row with an exclusive key is the first of its key in the batch and
    -- gets the key's transaction lock (CASE fixes the order).
    SELECT p.id, p.name, p.limit_key, p.priority, p.run_at
    FROM picked AS p
    WHERE CASE WHEN p.exclusive_key IS NULL THEN true
               WHEN p.id <> (SELECT min(k.id) FROM picked AS k WHERE k.exclusive_key = p.exclusive_key) THEN false
               ELSE pg_try_advisory_xact_lock(hashtextextended(p.exclusive_key, @exclusive_seed::bigint)) END
), bound AS MATERIALIZED (
    -- Every (row, limit) pair. The CTEs below never join two of these
    -- row sets with each other: a backlog without statistics has every
    -- CTE estimated at one row, and such a join is planned as a nested
    -- loop, quadratic in the batch (a 250-row claim spent 20-45 ms in
    -- three of them). Per-scope arrays and hashed NOT IN instead.
    SELECT x.id, x.priority, x.run_at, m.kind, m.max_running,
           CASE m.kind WHEN 'queue' THEN @queue::text WHEN 'name' THEN x.name ELSE x.limit_key END AS val,
           m.kind || ':' || m.target || CASE WHEN m.kind = 'key' THEN ':' || x.limit_key ELSE '' END AS scope
    FROM exclusive_ok AS x
    JOIN skiplock_limits AS m
      ON (m.kind = 'queue' AND m.target = @queue::text)
      OR (m.kind = 'name' AND m.target = x.name)
      OR (m.kind = 'key' AND x.limit_key LIKE m.pattern)
    WHERE (SELECT yes FROM any_limits)
), scopes AS MATERIALIZED (
    -- Per scope: its places come in blocks of g (see "Concurrency limits"
    -- above); base is where its block keys start.
    SELECT c.*, (c.max_running + c.g - 1) / c.g AS blocks,
           floor(random() * ((c.max_running + c.g - 1) / c.g))::bigint AS start
    FROM (
        SELECT b.scope, b.kind, b.val, min(b.max_running)::bigint AS max_running, count(*) AS want,
               greatest(1, min(b.max_running) / 256)::bigint AS g, hashtext(b.scope)::bigint AS base
        FROM bound AS b
        GROUP BY b.scope, b.kind, b.val
    ) AS c
), ranked AS MATERIALIZED (
    SELECT b.id, b.scope, row_number() OVER (PARTITION BY b.scope ORDER BY b.priority, b.run_at, b.id) AS n
    FROM bound AS b
), held AS MATERIALIZED (
    -- Blocks of more than one place that this session holds, with places
    -- its tasks do not use (held_limit_counts: how many use each).
    SELECT s.scope, h.key, least(s.g, s.max_running - i.idx * s.g) - h.n AS free
    FROM scopes AS s
    CROSS JOIN LATERAL (SELECT u.key, (@held_limit_counts::integer[])[u.i] AS n
                        FROM unnest(@held_limit_locks::integer[]) WITH ORDINALITY AS u(key, i)) AS h
    CROSS JOIN LATERAL (SELECT ((h.key::bigint - s.base) % 4294967296 + 4294967296) % 4294967296 AS idx) AS i
    WHERE s.g > 1
      AND i.idx < s.blocks
      AND least(s.g, s.max_running - i.idx * s.g) > h.n
), taken AS MATERIALIZED (
    -- Per scope, the blocks that the places its held blocks lack take:
    -- tried from a random block on, passing over those this session holds.
    SELECT s.scope, t.key, t.cap
    FROM scopes AS s
    CROSS JOIN LATERAL (
        SELECT c.key, c.cap
        FROM (SELECT ((s.base + (s.start + i) % s.blocks)::bit(32))::integer AS key,
                     least(s.g, s.max_running - ((s.start + i) % s.blocks) * s.g) AS cap
              FROM (SELECT generate_series(0::bigint, s.blocks - 1) AS i) AS series) AS c
        -- CASE, unlike AND, fixes the order: the planner puts cheaper
        -- quals first, and a lock tried before the check would be taken
        -- a second time.
        WHERE CASE WHEN c.key = ANY(@held_limit_locks::integer[]) THEN false
                   ELSE pg_try_advisory_lock(@limit_class::integer, c.key) END
        LIMIT ceil(greatest(0, s.want - coalesce((SELECT sum(h.free) FROM held AS h WHERE h.scope = s.scope), 0))::numeric / s.g)
    ) AS t
), slots AS MATERIALIZED (
    -- Per scope, a place for each ranked row, in order: the free places of
    -- held blocks first, then those of the blocks just taken; the n-th
    -- ranked row gets the n-th (its block's key).
    SELECT p.scope, (array_agg(p.key ORDER BY p.o, p.key))[1:min(s.want)] AS keys
    FROM (SELECT h.scope, h.key, 0 AS o FROM held AS h CROSS JOIN generate_series(1, h.free)
          UNION ALL
          SELECT t.scope, t.key, 1 FROM taken AS t CROSS JOIN generate_series(1, t.cap)) AS p
    JOIN scopes AS s ON s.scope = p.scope
    GROUP BY p.scope
), verdict AS MATERIALIZED (
    -- Each limited row: whether it has a place in every scope, and the
    -- blocks of its places.
    SELECT r.id,
           bool_and(k.key IS NOT NULL) AS ok,
           coalesce(array_agg(k.key) FILTER (WHERE k.key IS NOT NULL), '{}')::integer[] AS keys
    FROM ranked AS r
    CROSS JOIN LATERAL (SELECT (SELECT g.keys[r.n] FROM slots AS g WHERE g.scope = r.scope) AS key) AS k
    GROUP BY r.id
), locked AS MATERIALIZED (
    -- The task's advisory lock, for the rows outside every limit and the
    -- limited rows with a place. CASE, unlike AND, fixes the order of
    -- evaluation.
    SELECT x.id, '{}'::integer[] AS limit_locks
    FROM exclusive_ok AS x
    WHERE x.id NOT IN (SELECT v.id FROM verdict AS v)
      AND pg_try_advisory_lock(@lock_class::integer, x.id::bit(32)::integer)
    UNION ALL
    SELECT v.id, v.keys
    FROM verdict AS v
    WHERE CASE WHEN NOT v.ok THEN false
               ELSE pg_try_advisory_lock(@lock_class::integer, v.id::bit(32)::integer) END
), surplus AS MATERIALIZED (
    -- The blocks just taken that no taken row uses, and a second take of
    -- one block (two scopes' keys may meet): a block is held once, however
    -- many of this session's tasks use it.
    SELECT count(*) FILTER (WHERE pg_advisory_unlock(@limit_class::integer, t.key)) AS n
    FROM (SELECT t.key, row_number() OVER (PARTITION BY t.key) AS k FROM taken AS t) AS t
    WHERE t.k > 1
       OR t.key NOT IN (SELECT u.key FROM locked AS l CROSS JOIN LATERAL unnest(l.limit_locks) AS u(key))
)
UPDATE skiplock_tasks AS t
SET status = 'running',
    attempt = t.attempt + 1,
    worker_id = @worker_id::text,
    started_at = now(),
    finished_at = NULL,
    locked_until = NULL
FROM locked
WHERE t.id = locked.id
  -- Evaluated even when nothing is picked (a LIMIT of 0 never runs its
  -- scan, and "open" with it): the unlocks it carries must run.
  AND (SELECT n FROM released) >= 0
  AND (SELECT n FROM surplus) >= 0
RETURNING t.id, t.queue, t.name, t.payload, t.metadata, t.priority, t.attempt,
          t.max_attempts, t.timeout_ms, t.run_at, t.created_at, t.started_at, locked.limit_locks,
          coalesce(t.exclusive_key, '')::text AS exclusive_key;

-- name: TaskClaimLease :many
-- Lease mode's claim while concurrency limits exist (worker/clusterlimits.go,
-- claimLimited): TaskClaim's picking, with no advisory lock at all. A
-- limited row is taken only if, in each of its scopes, the running rows
-- plus its rank among the batch's rows of that scope stay within
-- max_running, counted under the transaction locks on the limits that a
-- previous statement of the same transaction took (LimitLockForClaim;
-- limits_locked); without them, limited rows are left alone. Taken rows
-- run under a lease of lease_ms. See TaskClaim for the cursor, flow
-- control, the hint of full scopes and exclusive keys.
WITH open AS MATERIALIZED (
    SELECT NOT EXISTS (
        SELECT 1 FROM skiplock_queues AS q WHERE q.name = @queue::text AND q.paused_at IS NOT NULL
    ) AS ok
), any_limits AS MATERIALIZED (
    SELECT EXISTS (SELECT 1 FROM skiplock_limits) AS yes
), running AS MATERIALIZED (
    -- The running rows of each scope with any, in this snapshot, when the
    -- worker asks (check_full: its last claim came back short). Scopes
    -- already at their limit are left out of the batch rather than filling
    -- it only to be refused, which would starve the rest of the queue
    -- behind them; and a claim takes no more rows than a limit on the
    -- queue itself has places left (of one left, one row, not a batch of
    -- rows to lock, bind and refuse). A hint, not the guarantee (places
    -- and counts below are): a dead worker's tasks count here until the
    -- rescuer returns them. Each reference to skiplock_tasks costs the
    -- planner about 0.5 ms (its partial indexes), so there is one.
    SELECT m.kind, m.target, m.max_running,
           CASE m.kind WHEN 'queue' THEN r.queue WHEN 'name' THEN r.name ELSE r.limit_key END AS val,
           count(*) AS n
    FROM skiplock_tasks AS r
    JOIN skiplock_limits AS m
      ON (m.kind = 'queue' AND m.target = @queue::text AND r.queue = m.target)
      OR (m.kind = 'name' AND r.name = m.target)
      OR (m.kind = 'key' AND r.limit_key LIKE m.pattern)
    WHERE r.status = 'running'
      AND @check_full::boolean
      AND (SELECT yes FROM any_limits)
    GROUP BY 1, 2, 3, 4
), full_scopes AS MATERIALIZED (
    SELECT c.kind, c.val FROM running AS c WHERE c.n >= c.max_running
), keys_running AS MATERIALIZED (
    -- Whether few tasks with an exclusive key run (see TaskClaim): read
    -- only when a pending row with a key is.
    SELECT count(*) <= 32 AS few
    FROM (SELECT 1 FROM skiplock_tasks AS r
          WHERE r.exclusive_key IS NOT NULL AND r.status = 'running' LIMIT 33) AS x
), picked AS MATERIALIZED (
    SELECT p.id, p.exclusive_key, p.name, p.limit_key, p.priority, p.run_at
    FROM skiplock_tasks AS p
    WHERE p.status = 'pending'
      AND p.queue = @queue::text
      AND p.run_at <= now()
      AND (SELECT ok FROM open)
      AND (NOT @use_after::boolean
           OR (p.priority, p.run_at, p.id) > (@after_priority::smallint, @after_run_at::timestamptz, @after_id::bigint))
      AND (cardinality(@only_names::text[]) = 0 OR p.name = ANY(@only_names::text[]))
      AND NOT (p.name = ANY(@skip_names::text[]))
      AND (coalesce(cardinality(@only_ids::bigint[]), 0) = 0 OR p.id = ANY(@only_ids::bigint[]))
      -- A suspect (crashes > 0: it was running when a worker process
      -- died) is taken only by id, by the worker that runs it alone.
      AND (p.crashes = 0 OR p.id = ANY(@only_ids::bigint[]))
      AND (p.exclusive_key IS NULL OR CASE WHEN (SELECT few FROM keys_running)
          THEN p.exclusive_key NOT IN (
              SELECT r.exclusive_key FROM skiplock_tasks AS r WHERE r.exclusive_key IS NOT NULL AND r.status = 'running')
          ELSE NOT EXISTS (
              SELECT 1 FROM skiplock_tasks AS r WHERE r.exclusive_key = p.exclusive_key AND r.status = 'running') END)
      AND NOT EXISTS (SELECT 1 FROM full_scopes AS f WHERE f.kind = 'queue')
      AND p.name NOT IN (SELECT f.val FROM full_scopes AS f WHERE f.kind = 'name')
      AND (p.limit_key IS NULL OR p.limit_key NOT IN (SELECT f.val FROM full_scopes AS f WHERE f.kind = 'key'))
    ORDER BY p.priority, p.run_at, p.id
    LIMIT least(@max::integer, greatest(coalesce((SELECT q.max_running - q.n FROM running AS q WHERE q.kind = 'queue'), @max::integer), 0))
    FOR UPDATE SKIP LOCKED
), exclusive_ok AS MATERIALIZED (
    -- A row with an exclusive key is the first of its key in the batch and
    -- gets the key's transaction lock (CASE fixes the order).
    SELECT p.id, p.name, p.limit_key, p.priority, p.run_at
    FROM picked AS p
    WHERE CASE WHEN p.exclusive_key IS NULL THEN true
               WHEN p.id <> (SELECT min(k.id) FROM picked AS k WHERE k.exclusive_key = p.exclusive_key) THEN false
               ELSE pg_try_advisory_xact_lock(hashtextextended(p.exclusive_key, @exclusive_seed::bigint)) END
), bound AS MATERIALIZED (
    -- Every (row, limit) pair. The CTEs below never join two of these
    -- row sets with each other: a backlog without statistics has every
    -- CTE estimated at one row, and such a join is planned as a nested
    -- loop, quadratic in the batch (a 250-row claim spent 20-45 ms in
    -- three of them). Per-scope arrays and hashed NOT IN instead.
    SELECT x.id, x.priority, x.run_at, m.kind, m.max_running,
           CASE m.kind WHEN 'queue' THEN @queue::text WHEN 'name' THEN x.name ELSE x.limit_key END AS val,
           m.kind || ':' || m.target || CASE WHEN m.kind = 'key' THEN ':' || x.limit_key ELSE '' END AS scope
    FROM exclusive_ok AS x
    JOIN skiplock_limits AS m
      ON (m.kind = 'queue' AND m.target = @queue::text)
      OR (m.kind = 'name' AND m.target = x.name)
      OR (m.kind = 'key' AND x.limit_key LIKE m.pattern)
    WHERE (SELECT yes FROM any_limits)
), scopes AS MATERIALIZED (
    SELECT b.scope, b.kind, b.val, min(b.max_running) AS max_running
    FROM bound AS b
    GROUP BY b.scope, b.kind, b.val
), ranked AS MATERIALIZED (
    SELECT b.id, b.scope, row_number() OVER (PARTITION BY b.scope ORDER BY b.priority, b.run_at, b.id) AS n
    FROM bound AS b
), counted AS MATERIALIZED (
    SELECT s.scope, s.max_running,
           (SELECT count(*) FROM skiplock_tasks AS r
            WHERE r.status = 'running'
              AND CASE s.kind WHEN 'queue' THEN r.queue = s.val WHEN 'name' THEN r.name = s.val
                              ELSE r.limit_key = s.val END) AS running
    FROM scopes AS s
    WHERE @limits_locked::boolean
), verdict AS MATERIALIZED (
    SELECT r.id,
           bool_and(coalesce((SELECT c.running + r.n <= c.max_running FROM counted AS c WHERE c.scope = r.scope), false)) AS ok
    FROM ranked AS r
    GROUP BY r.id
), locked AS MATERIALIZED (
    SELECT x.id FROM exclusive_ok AS x WHERE x.id NOT IN (SELECT v.id FROM verdict AS v)
    UNION ALL
    SELECT v.id FROM verdict AS v WHERE v.ok
)
UPDATE skiplock_tasks AS t
SET status = 'running',
    attempt = t.attempt + 1,
    worker_id = @worker_id::text,
    started_at = now(),
    finished_at = NULL,
    locked_until = now() + interval '1 millisecond' * @lease_ms::bigint
FROM locked
WHERE t.id = locked.id
RETURNING t.id, t.queue, t.name, t.payload, t.metadata, t.priority, t.attempt,
          t.max_attempts, t.timeout_ms, t.run_at, t.created_at, t.started_at, '{}'::integer[] AS limit_locks,
          coalesce(t.exclusive_key, '')::text AS exclusive_key;

-- name: ClaimPlanSettings :exec
-- Run in the same implicit transaction just before TaskClaimPlain,
-- TaskClaimQueue or TaskClaimHeld, on the lock session (worker/plans.go),
-- in the same round trip and for that transaction only: the claim runs on
-- the session's one generic plan, and whenever PostgreSQL makes that plan
-- (first use, or after the table's statistics or schema change), these
-- make it the claim index read in claim order and the primary key per row,
-- whatever the table's size and statistics then. Left to its estimates, the planner
-- chose a bitmap scan and a sort of every pending row from 1,000 rows up
-- (65-430 ms at 100,000 rows against 3 ms). No path is forbidden, only
-- priced out: the small tables it reads (skiplock_queues, skiplock_limits)
-- are read through their keys.
SELECT set_config('plan_cache_mode', 'force_generic_plan', true),
       set_config('enable_seqscan', 'off', true),
       set_config('enable_bitmapscan', 'off', true),
       set_config('enable_sort', 'off', true),
       set_config('jit', 'off', true);

-- name: ClaimTurn :exec
-- Waits, at most wait_ms, for the queue's claim turn: a transaction lock
-- that the plain claim of every worker process takes, in the same implicit
-- transaction, just before it reads the queue (worker/tasklocks.go). Claims of
-- one queue then run one after another across processes, and each claim's
-- snapshot is taken after the previous one committed: it finds the rows
-- that claim took running, not pending. Claiming at once, eight processes
-- walked the head of the claim index past each other's rows, following
-- each to its running version and locking it before skipping it, and
-- their backends' CPU per task grew from 21 to 32-38 us (two cores); in
-- turns it was 24-27 us (docs/SCALING.md, "Claims take turns").
--
-- The lock lives in the bigint key space (objsubid 1): the tasks' lock
-- class in the high half, as the elections' keys, and the queue's hash with
-- the high bit set in the low half, which no election's job number has.
-- lock_timeout bounds the wait for this statement only: a holder that stalls
-- (its session cut off mid-claim, say) makes the others wait wait_ms, not
-- until the server notices, and the worker then claims without its turn.
WITH before AS MATERIALIZED (
    SELECT current_setting('lock_timeout') AS setting
), wait AS MATERIALIZED (
    SELECT set_config('lock_timeout', (@wait_ms::bigint)::text || 'ms', true) AS setting FROM before
), turn AS MATERIALIZED (
    SELECT pg_advisory_xact_lock((@lock_class_oid::bigint << 32) | 2147483648
                                 | (hashtext(@queue::text)::bigint & 2147483647))::text AS taken
    FROM wait
)
SELECT set_config('lock_timeout', (SELECT before.setting FROM before), true) FROM turn;

-- name: TaskClaimPlain :many
-- The claim of a schema without concurrency limits: TaskClaim less its
-- limit CTEs, which PostgreSQL plans on every call even when they find
-- nothing (planning the full claim measured 1.5 ms, this one 0.9 ms; and
-- per row it skips the sort that picks one task per exclusive key, which
-- here is a look-up only for rows that have a key). The worker uses it
-- while no limit row exists (worker/clusterlimits.go); should one appear
-- in between, "open" is false and the claim takes nothing, which sends the
-- worker to look again and claim with TaskClaim. Everything else is
-- TaskClaim's: see it for the lock keys, the cursor, flow control and the
-- unlocks it carries.
--
-- On the lock session it runs on one plan, made once per session and kept
-- (ClaimPlanSettings, run before it in the same implicit transaction):
-- planning it on every call cost 0.7-1.5 ms of a claim of 250 rows taking
-- 3 ms. Its shape lets that plan be the one a call with real values gets:
-- the cursor is always a bound of the index scan (without use_after, a
-- bound below every row), never an OR that only constant folding removes.
-- Run elsewhere (lease mode, on the pool), it is planned per call.
WITH released AS MATERIALIZED (
    SELECT (SELECT count(*) FILTER (WHERE pg_advisory_unlock(@lock_class::integer, u.id::bit(32)::integer))
            FROM unnest(@unlock_ids::bigint[]) AS u(id))
         + (SELECT count(*) FILTER (WHERE pg_advisory_unlock(@limit_class::integer, k.key))
            FROM unnest(@unlock_limit_locks::integer[]) AS k(key)) AS n
), open AS MATERIALIZED (
    SELECT NOT EXISTS (
        SELECT 1 FROM skiplock_queues AS q WHERE q.name = @queue::text AND q.paused_at IS NOT NULL
    ) AND NOT EXISTS (SELECT 1 FROM skiplock_limits) AND (SELECT n FROM released) >= 0 AS ok
), keys_running AS MATERIALIZED (
    -- Whether few tasks with an exclusive key run (see TaskClaim): read
    -- only when a pending row with a key is.
    SELECT count(*) <= 32 AS few
    FROM (SELECT 1 FROM skiplock_tasks AS r
          WHERE r.exclusive_key IS NOT NULL AND r.status = 'running' LIMIT 33) AS x
), picked AS MATERIALIZED (
    SELECT p.id, p.exclusive_key
    FROM skiplock_tasks AS p
    WHERE p.status = 'pending'
      AND p.queue = @queue::text
      AND p.run_at <= now()
      AND (SELECT ok FROM open)
      AND (p.priority, p.run_at, p.id) > (
          CASE WHEN @use_after::boolean THEN @after_priority::smallint ELSE -32768 END,
          CASE WHEN @use_after::boolean THEN @after_run_at::timestamptz ELSE '-infinity' END,
          CASE WHEN @use_after::boolean THEN @after_id::bigint ELSE -9223372036854775808 END)
      AND (cardinality(@only_names::text[]) = 0 OR p.name = ANY(@only_names::text[]))
      AND NOT (p.name = ANY(@skip_names::text[]))
      AND p.crashes = 0 -- suspects run alone (TaskClaim)
      AND (p.exclusive_key IS NULL OR CASE WHEN (SELECT few FROM keys_running)
          THEN p.exclusive_key NOT IN (
              SELECT r.exclusive_key FROM skiplock_tasks AS r WHERE r.exclusive_key IS NOT NULL AND r.status = 'running')
          ELSE NOT EXISTS (
              SELECT 1 FROM skiplock_tasks AS r WHERE r.exclusive_key = p.exclusive_key AND r.status = 'running') END)
    ORDER BY p.priority, p.run_at, p.id
    LIMIT @max::integer
    FOR UPDATE SKIP LOCKED
), locked AS MATERIALIZED (
    -- Per row, in this order, which one CASE fixes (two conditions joined
    -- by AND are run cheapest first, the task's lock before the key's
    -- test, and a row that then failed the test kept a lock it was not
    -- claimed with): a row with an exclusive key is the first of its key
    -- in the batch and gets the key's transaction lock; then the task's
    -- advisory lock, or in lease mode (lease_ms > 0) none.
    SELECT p.id
    FROM picked AS p
    WHERE CASE WHEN p.exclusive_key IS NULL
                    THEN CASE WHEN @lease_ms::bigint > 0 THEN true
                              ELSE pg_try_advisory_lock(@lock_class::integer, p.id::bit(32)::integer) END
               WHEN p.id <> (SELECT min(k.id) FROM picked AS k WHERE k.exclusive_key = p.exclusive_key) THEN false
               WHEN NOT pg_try_advisory_xact_lock(hashtextextended(p.exclusive_key, @exclusive_seed::bigint)) THEN false
               WHEN @lease_ms::bigint > 0 THEN true
               ELSE pg_try_advisory_lock(@lock_class::integer, p.id::bit(32)::integer) END
)
UPDATE skiplock_tasks AS t
SET status = 'running',
    attempt = t.attempt + 1,
    worker_id = @worker_id::text,
    started_at = now(),
    finished_at = NULL,
    locked_until = CASE WHEN @lease_ms::bigint > 0 THEN now() + interval '1 millisecond' * @lease_ms::bigint END
FROM locked
WHERE t.id = locked.id
  -- Evaluated even when nothing is picked (a LIMIT of 0 never runs its
  -- scan, and "open" with it): the unlocks it carries must run.
  AND (SELECT n FROM released) >= 0
RETURNING t.id, t.queue, t.name, t.payload, t.metadata, t.priority, t.attempt,
          t.max_attempts, t.timeout_ms, t.run_at, t.created_at, t.started_at, NULL::integer[] AS limit_locks,
          coalesce(t.exclusive_key, '')::text AS exclusive_key;

-- name: TaskClaimQueue :many
-- The advisory claim while the only concurrency limits are queue limits
-- (no name or key limit anywhere): each picked row falls under one scope
-- at most, its queue's, so the claim needs none of TaskClaim's per-scope
-- machinery, whose planning alone measured 1.4 ms against this one's
-- fraction of it. The places are TaskClaim's blocks: free places of blocks
-- this session holds first (held_limit_locks, held_limit_counts), then new
-- blocks as the rows need; the n-th picked row gets the n-th place, and a
-- row without one stays pending. With check_full, no more rows are picked
-- than the limit has places left by the running rows of this snapshot
-- (under a limit far above what runs, the worker leaves it off, and a
-- claim within a held block tries no lock but the tasks'). A queue without
-- a limit of its own claims as TaskClaimPlain. It takes nothing once a
-- name or key limit exists (the worker then claims with TaskClaim). See
-- TaskClaim for the lock keys, the cursor, flow control and the unlocks
-- it carries.
WITH released AS MATERIALIZED (
    SELECT (SELECT count(*) FILTER (WHERE pg_advisory_unlock(@lock_class::integer, u.id::bit(32)::integer))
            FROM unnest(@unlock_ids::bigint[]) AS u(id))
         + (SELECT count(*) FILTER (WHERE pg_advisory_unlock(@limit_class::integer, k.key))
            FROM unnest(@unlock_limit_locks::integer[]) AS k(key)) AS n
), open AS MATERIALIZED (
    SELECT NOT EXISTS (
        SELECT 1 FROM skiplock_queues AS q WHERE q.name = @queue::text AND q.paused_at IS NOT NULL
    ) AND NOT EXISTS (
        SELECT 1 FROM skiplock_limits AS m WHERE m.kind <> 'queue'
    ) AND (SELECT n FROM released) >= 0 AS ok
), lim AS MATERIALIZED (
    -- The queue's limit, if it has one: blocks of g places, from base on.
    SELECT c.*, (c.max_running + c.g - 1) / c.g AS blocks,
           floor(random() * ((c.max_running + c.g - 1) / c.g))::bigint AS start
    FROM (SELECT m.max_running::bigint AS max_running, greatest(1, m.max_running / 256)::bigint AS g,
                 hashtext('queue:' || m.target)::bigint AS base
          FROM skiplock_limits AS m
          WHERE m.kind = 'queue' AND m.target = @queue::text) AS c
), room AS MATERIALIZED (
    SELECT l.max_running - (SELECT count(*) FROM skiplock_tasks AS r
                            WHERE r.status = 'running' AND r.queue = @queue::text) AS n
    FROM lim AS l
    WHERE @check_full::boolean
), keys_running AS MATERIALIZED (
    -- Whether few tasks with an exclusive key run (see TaskClaim): read
    -- only when a pending row with a key is.
    SELECT count(*) <= 32 AS few
    FROM (SELECT 1 FROM skiplock_tasks AS r
          WHERE r.exclusive_key IS NOT NULL AND r.status = 'running' LIMIT 33) AS x
), picked AS MATERIALIZED (
    SELECT p.id, p.exclusive_key, p.priority, p.run_at
    FROM skiplock_tasks AS p
    WHERE p.status = 'pending'
      AND p.queue = @queue::text
      AND p.run_at <= now()
      AND (SELECT ok FROM open)
      AND (NOT @use_after::boolean
           OR (p.priority, p.run_at, p.id) > (@after_priority::smallint, @after_run_at::timestamptz, @after_id::bigint))
      AND (cardinality(@only_names::text[]) = 0 OR p.name = ANY(@only_names::text[]))
      AND NOT (p.name = ANY(@skip_names::text[]))
      AND p.crashes = 0 -- suspects run alone (TaskClaim)
      AND (p.exclusive_key IS NULL OR CASE WHEN (SELECT few FROM keys_running)
          THEN p.exclusive_key NOT IN (
              SELECT r.exclusive_key FROM skiplock_tasks AS r WHERE r.exclusive_key IS NOT NULL AND r.status = 'running')
          ELSE NOT EXISTS (
              SELECT 1 FROM skiplock_tasks AS r WHERE r.exclusive_key = p.exclusive_key AND r.status = 'running') END)
    ORDER BY p.priority, p.run_at, p.id
    LIMIT least(@max::integer, greatest(coalesce((SELECT r.n FROM room AS r), @max::integer), 0))
    FOR UPDATE SKIP LOCKED
), held AS MATERIALIZED (
    -- Blocks of more than one place that this session holds, with places
    -- its tasks do not use.
    SELECT h.key, least(l.g, l.max_running - i.idx * l.g) - h.n AS free
    FROM lim AS l
    CROSS JOIN LATERAL (SELECT u.key, (@held_limit_counts::integer[])[u.i] AS n
                        FROM unnest(@held_limit_locks::integer[]) WITH ORDINALITY AS u(key, i)) AS h
    CROSS JOIN LATERAL (SELECT ((h.key::bigint - l.base) % 4294967296 + 4294967296) % 4294967296 AS idx) AS i
    WHERE l.g > 1
      AND i.idx < l.blocks
      AND least(l.g, l.max_running - i.idx * l.g) > h.n
), taken AS MATERIALIZED (
    -- The blocks that the places the held ones lack take (CASE, unlike
    -- AND, fixes the order: a held block is never tried a second time).
    SELECT t.key, t.cap
    FROM lim AS l
    CROSS JOIN LATERAL (
        SELECT c.key, c.cap
        FROM (SELECT ((l.base + (l.start + i) % l.blocks)::bit(32))::integer AS key,
                     least(l.g, l.max_running - ((l.start + i) % l.blocks) * l.g) AS cap
              FROM (SELECT generate_series(0::bigint, l.blocks - 1) AS i) AS series) AS c
        WHERE CASE WHEN c.key = ANY(@held_limit_locks::integer[]) THEN false
                   ELSE pg_try_advisory_lock(@limit_class::integer, c.key) END
        LIMIT ceil(greatest(0, (SELECT count(*) FROM picked) - coalesce((SELECT sum(h.free) FROM held AS h), 0))::numeric / l.g)
    ) AS t
), places AS MATERIALIZED (
    -- A place per picked row at most: of each block, no more than that.
    SELECT (SELECT count(*) FROM lim) > 0 AS limited,
           coalesce((SELECT array_agg(p.key ORDER BY p.o, p.key)
                     FROM (SELECT h.key, 0 AS o FROM held AS h CROSS JOIN generate_series(1, least(h.free, w.n))
                           UNION ALL
                           SELECT t.key, 1 FROM taken AS t CROSS JOIN generate_series(1, least(t.cap, w.n))) AS p), '{}') AS keys
    FROM (SELECT count(*) AS n FROM picked) AS w
), numbered AS MATERIALIZED (
    SELECT p.id, p.exclusive_key, row_number() OVER (ORDER BY p.priority, p.run_at, p.id) AS n
    FROM picked AS p
), locked AS MATERIALIZED (
    -- Per row, in this order (CASE fixes it): a place, when the queue has
    -- a limit; for a row with an exclusive key, being the first of its key
    -- in the batch and the key's transaction lock; then the task's lock.
    SELECT x.id, CASE WHEN f.limited THEN ARRAY[f.keys[x.n]] ELSE '{}' END::integer[] AS limit_locks
    FROM numbered AS x
    CROSS JOIN places AS f
    WHERE CASE WHEN f.limited AND f.keys[x.n] IS NULL THEN false
               WHEN x.exclusive_key IS NULL THEN pg_try_advisory_lock(@lock_class::integer, x.id::bit(32)::integer)
               WHEN x.id <> (SELECT min(k.id) FROM picked AS k WHERE k.exclusive_key = x.exclusive_key) THEN false
               WHEN NOT pg_try_advisory_xact_lock(hashtextextended(x.exclusive_key, @exclusive_seed::bigint)) THEN false
               ELSE pg_try_advisory_lock(@lock_class::integer, x.id::bit(32)::integer) END
), surplus AS MATERIALIZED (
    -- The blocks just taken that no taken row uses.
    SELECT count(*) FILTER (WHERE pg_advisory_unlock(@limit_class::integer, t.key)) AS n
    FROM taken AS t
    WHERE t.key NOT IN (SELECT u.key FROM locked AS l CROSS JOIN LATERAL unnest(l.limit_locks) AS u(key))
)
UPDATE skiplock_tasks AS t
SET status = 'running',
    attempt = t.attempt + 1,
    worker_id = @worker_id::text,
    started_at = now(),
    finished_at = NULL,
    locked_until = NULL
FROM locked
WHERE t.id = locked.id
  -- Evaluated even when nothing is picked (a LIMIT of 0 never runs its
  -- scan, and "open" with it): the unlocks it carries must run.
  AND (SELECT n FROM released) >= 0
  AND (SELECT n FROM surplus) >= 0
RETURNING t.id, t.queue, t.name, t.payload, t.metadata, t.priority, t.attempt,
          t.max_attempts, t.timeout_ms, t.run_at, t.created_at, t.started_at, locked.limit_locks,
          coalesce(t.exclusive_key, '')::text AS exclusive_key;

-- name: TaskClaimHeld :many
-- TaskClaimQueue's claim within a block of the queue's limit that this
-- session holds with places to spare, for a limit far above what runs:
-- TaskClaimPlain, taking at most those places, each row in that block. No
-- block is tried, no place counted, no running row: the block is held
-- already. It takes nothing (and the worker claims with TaskClaimQueue)
-- when a name or key limit exists, or no held block (held_limit_locks,
-- with held_limit_counts as in TaskClaim) has a free place. See TaskClaim
-- for the blocks, the lock keys, the cursor, flow control and the unlocks
-- it carries. It runs as TaskClaimPlain does, on the lock session's one
-- generic plan (ClaimPlanSettings), its cursor written the same way.
WITH released AS MATERIALIZED (
    SELECT (SELECT count(*) FILTER (WHERE pg_advisory_unlock(@lock_class::integer, u.id::bit(32)::integer))
            FROM unnest(@unlock_ids::bigint[]) AS u(id))
         + (SELECT count(*) FILTER (WHERE pg_advisory_unlock(@limit_class::integer, k.key))
            FROM unnest(@unlock_limit_locks::integer[]) AS k(key)) AS n
), place AS MATERIALIZED (
    -- The held block of the queue's limit with the most free places.
    SELECT h.key, least(l.g, l.max_running - i.idx * l.g) - h.n AS free
    FROM (SELECT m.max_running::bigint AS max_running, greatest(1, m.max_running / 256)::bigint AS g,
                 hashtext('queue:' || m.target)::bigint AS base
          FROM skiplock_limits AS m
          WHERE m.kind = 'queue' AND m.target = @queue::text) AS l
    CROSS JOIN LATERAL (SELECT u.key, (@held_limit_counts::integer[])[u.i] AS n
                        FROM unnest(@held_limit_locks::integer[]) WITH ORDINALITY AS u(key, i)) AS h
    CROSS JOIN LATERAL (SELECT ((h.key::bigint - l.base) % 4294967296 + 4294967296) % 4294967296 AS idx) AS i
    WHERE l.g > 1
      AND i.idx < (l.max_running + l.g - 1) / l.g
    ORDER BY 2 DESC
    LIMIT 1
), open AS MATERIALIZED (
    SELECT NOT EXISTS (
        SELECT 1 FROM skiplock_queues AS q WHERE q.name = @queue::text AND q.paused_at IS NOT NULL
    ) AND NOT EXISTS (
        SELECT 1 FROM skiplock_limits AS m WHERE m.kind <> 'queue'
    ) AND (SELECT n FROM released) >= 0 AS ok
), keys_running AS MATERIALIZED (
    -- Whether few tasks with an exclusive key run (see TaskClaim): read
    -- only when a pending row with a key is.
    SELECT count(*) <= 32 AS few
    FROM (SELECT 1 FROM skiplock_tasks AS r
          WHERE r.exclusive_key IS NOT NULL AND r.status = 'running' LIMIT 33) AS x
), picked AS MATERIALIZED (
    SELECT p.id, p.exclusive_key
    FROM skiplock_tasks AS p
    WHERE p.status = 'pending'
      AND p.queue = @queue::text
      AND p.run_at <= now()
      AND (SELECT ok FROM open)
      AND (p.priority, p.run_at, p.id) > (
          CASE WHEN @use_after::boolean THEN @after_priority::smallint ELSE -32768 END,
          CASE WHEN @use_after::boolean THEN @after_run_at::timestamptz ELSE '-infinity' END,
          CASE WHEN @use_after::boolean THEN @after_id::bigint ELSE -9223372036854775808 END)
      AND (cardinality(@only_names::text[]) = 0 OR p.name = ANY(@only_names::text[]))
      AND NOT (p.name = ANY(@skip_names::text[]))
      AND p.crashes = 0 -- suspects run alone (TaskClaim)
      AND (p.exclusive_key IS NULL OR CASE WHEN (SELECT few FROM keys_running)
          THEN p.exclusive_key NOT IN (
              SELECT r.exclusive_key FROM skiplock_tasks AS r WHERE r.exclusive_key IS NOT NULL AND r.status = 'running')
          ELSE NOT EXISTS (
              SELECT 1 FROM skiplock_tasks AS r WHERE r.exclusive_key = p.exclusive_key AND r.status = 'running') END)
    ORDER BY p.priority, p.run_at, p.id
    LIMIT least(@max::integer, coalesce((SELECT greatest(f.free, 0) FROM place AS f), 0))
    FOR UPDATE SKIP LOCKED
), locked AS MATERIALIZED (
    -- As TaskClaimPlain's (advisory mode only), in one CASE.
    SELECT p.id
    FROM picked AS p
    WHERE CASE WHEN p.exclusive_key IS NULL THEN pg_try_advisory_lock(@lock_class::integer, p.id::bit(32)::integer)
               WHEN p.id <> (SELECT min(k.id) FROM picked AS k WHERE k.exclusive_key = p.exclusive_key) THEN false
               WHEN NOT pg_try_advisory_xact_lock(hashtextextended(p.exclusive_key, @exclusive_seed::bigint)) THEN false
               ELSE pg_try_advisory_lock(@lock_class::integer, p.id::bit(32)::integer) END
)
UPDATE skiplock_tasks AS t
SET status = 'running',
    attempt = t.attempt + 1,
    worker_id = @worker_id::text,
    started_at = now(),
    finished_at = NULL,
    locked_until = NULL
FROM locked
WHERE t.id = locked.id
  -- Evaluated even when nothing is picked (a LIMIT of 0 never runs its
  -- scan, and "open" with it): the unlocks it carries must run.
  AND (SELECT n FROM released) >= 0
RETURNING t.id, t.queue, t.name, t.payload, t.metadata, t.priority, t.attempt,
          t.max_attempts, t.timeout_ms, t.run_at, t.created_at, t.started_at,
          ARRAY[(SELECT f.key FROM place AS f)]::integer[] AS limit_locks,
          coalesce(t.exclusive_key, '')::text AS exclusive_key;

-- name: TaskUnlockMany :one
-- Releases the advisory locks of finished tasks and their limit slots;
-- returns how many were held. Must run on the session that took them.
SELECT ((SELECT count(*) FILTER (WHERE pg_advisory_unlock(@lock_class::integer, id::bit(32)::integer))
         FROM unnest(@ids::bigint[]) AS id)
      + (SELECT count(*) FILTER (WHERE pg_advisory_unlock(@limit_class::integer, k.key))
         FROM unnest(@limit_locks::integer[]) AS k(key)))::bigint AS unlocked;

-- name: OutcomePlanSettings :exec
-- Run in the same implicit transaction just before TaskFinishMany or
-- TaskCompleteMany (worker/complete.go), for that transaction only. The
-- outcome write then runs on one generic plan per connection of the pool
-- (pgx caches it as a prepared statement) instead of being planned on
-- every call, which cost 0.3-1.5 ms per write; and whenever PostgreSQL
-- makes that plan, these make it the one safe shape: a nested loop over
-- the batch that finds each task by primary key, whatever the table's
-- size and statistics then (TaskFinishMany).
SELECT set_config('plan_cache_mode', 'force_generic_plan', true),
       set_config('enable_seqscan', 'off', true),
       set_config('enable_bitmapscan', 'off', true),
       set_config('enable_hashjoin', 'off', true),
       set_config('enable_mergejoin', 'off', true),
       set_config('jit', 'off', true);

-- name: HandoffSettings :exec
-- Run first in a claim's implicit transaction when the claim carries the
-- outcomes of tasks that held a place (worker/handoff.go): the outcomes
-- and the claim then commit together, and the commit waits for its WAL
-- flush as an outcome's on the pool does (outcome_commit: the server's
-- synchronous_commit, which the lock session's own setting, off, replaces
-- for claims alone, SessionTune).
SELECT set_config('synchronous_commit', @outcome_commit::text, true);

-- name: TaskFinishMany :many
-- Records the outcome of a batch of attempts. Each write is fenced by the
-- claim (status running, same attempt, same worker, same started_at): a
-- worker that lost its claim, because the task was rescued and maybe
-- claimed again, writes nothing and learns so from the missing id in the
-- result. delay_ms < 0 keeps run_at (a task returned at shutdown keeps its
-- place in line); refund 1 gives the attempt back.
--
-- The worker and the attempt alone do not name a claim. A refund gives
-- the attempt back, and a claim the server loses (committed on the lock
-- session without waiting for its WAL flush, then gone with a crash or a
-- failover) leaves the task pending with its attempt unspent: either way
-- the same worker can claim the task again with the same attempt number,
-- and the late outcome of the earlier claim's run would land on the new
-- one. started_at is the claim's transaction time, which only a claim
-- writes, and two claims of a task are two transactions one after the
-- other. The batch sends it as microseconds since the Unix epoch
-- (claimed_us): every parameter goes as text, and a bigint read back into
-- a timestamp here costs 0.21-0.23 us against 0.39-0.61 for a timestamp
-- sent as text (docs/PERFORMANCE.md), and is formatted for less in the
-- worker; the conversion back is exact (a whole number of microseconds
-- below 2^53 times one microsecond).
--
-- The batch drives the write: each task is found by primary key from the
-- batch's row (a nested loop over the batch), and the fence is a join with
-- the batch, never a filter on the table. It runs after
-- OutcomePlanSettings, in the same implicit transaction, on one generic
-- plan per connection, which those settings make that loop whatever the
-- table held when it was made. Left to its estimates, the planner read a
-- table without statistics (a backlog that has just arrived) through the
-- running index or a sequential scan, guessing a filter on status and
-- worker_id to keep one row in 40,000, and compared each row it found with
-- the whole batch: 60-120 ms per write of 250 rows through the index, and
-- 137-272 us a task through the scan once a write held 1,000 rows
-- (docs/PERFORMANCE.md, "A fresh backlog", "The outcome write"). A
-- condition id = ANY(ids) must not come back: a generic plan reads it as
-- ten rows and scans the table by it, comparing each row found with the
-- whole batch.
--
-- A completed task's output (worker.SetOutput) rides in the same write;
-- JSON null means none and leaves the column as it was.
UPDATE skiplock_tasks AS t
SET status = u.status,
    output = CASE WHEN u.output IS NULL OR u.output = 'null'::jsonb THEN t.output ELSE u.output END,
    run_at = CASE WHEN u.delay_ms >= 0 THEN now() + u.delay_ms * interval '1 millisecond' ELSE t.run_at END,
    attempt = t.attempt - u.refund,
    finished_at = CASE WHEN u.status = 'pending' THEN NULL ELSE now() END,
    worker_id = CASE WHEN u.status = 'pending' THEN NULL ELSE t.worker_id END,
    errors = CASE WHEN u.error IS NULL OR u.error = 'null'::jsonb THEN t.errors ELSE t.errors || jsonb_build_array(u.error) END
FROM (
    SELECT unnest(@ids::bigint[])          AS id,
           unnest(@attempts::integer[])    AS attempt,
           unnest(@statuses::text[])       AS status,
           unnest(@delay_ms::bigint[])     AS delay_ms,
           unnest(@refunds::integer[])     AS refund,
           unnest(@errors::jsonb[])        AS error,
           unnest(@outputs::jsonb[])       AS output,
           'epoch'::timestamptz + unnest(@claimed_us::bigint[]) * interval '1 microsecond' AS started_at,
           @worker_id::text                AS worker_id,
           'running'::text                 AS running
) AS u
WHERE t.id = u.id
  AND t.status = u.running
  AND t.attempt = u.attempt
  AND t.worker_id = u.worker_id
  AND t.started_at = u.started_at
RETURNING t.id;

-- name: TaskCompleteMany :many
-- TaskFinishMany for a batch whose every attempt completed with no output,
-- the common case under load: the same fenced write (see TaskFinishMany
-- for its shape), with two arrays to send and parse instead of seven (two
-- of them jsonb, parsed row by row) and a new row version that copies
-- every other column as it is (docs/PERFORMANCE.md, "The outcome write").
UPDATE skiplock_tasks AS t
SET status = 'completed',
    finished_at = now()
FROM (
    SELECT unnest(@ids::bigint[])               AS id,
           unnest(@attempts::integer[])         AS attempt,
           'epoch'::timestamptz + unnest(@claimed_us::bigint[]) * interval '1 microsecond' AS started_at,
           @worker_id::text                     AS worker_id,
           'running'::text                      AS running
) AS u
WHERE t.id = u.id
  AND t.status = u.running
  AND t.attempt = u.attempt
  AND t.worker_id = u.worker_id
  AND t.started_at = u.started_at
RETURNING t.id;

-- name: TaskCompleteManyDeleting :many
-- TaskCompleteMany for a worker with DeleteCompleted: the same fenced write,
-- except that a completed task nothing reads afterwards is deleted instead
-- of kept as completed. A delete writes no new row version and no index
-- entry; the update writes both. Kept as completed, so that what reads
-- them still can: workflow members (their dependents and the workflow's
-- state), sequence tasks (the next one waits for them), batch members (the
-- batch counts them) and tasks with a windowed unique key (the key holds
-- for its window whatever the status).
--
-- The delete has TaskCompleteMany's shape: rows found by primary key, the
-- fence a join with the batch. The test of what reads a task is part of
-- that join too (compared with the batch's "unread", always true): as a
-- filter on the table it would be guessed to keep one row in thousands,
-- and the planner would then compare every row it found with the whole
-- batch. The rest of the batch is updated as TaskCompleteMany would; it
-- is usually nothing, and then the update reads no row at all (EXISTS is
-- a one-time test above its scans). Both conditions are checked again, as
-- the fence always is, on a row changed since the statement's snapshot (a
-- task rescued and claimed again, a dependent enqueued on it); the two
-- parts change disjoint rows.
WITH deleted AS (
    DELETE FROM skiplock_tasks AS t
    USING (
        SELECT unnest(@ids::bigint[])               AS id,
               unnest(@attempts::integer[])         AS attempt,
               'epoch'::timestamptz + unnest(@claimed_us::bigint[]) * interval '1 microsecond' AS started_at,
               @worker_id::text                     AS worker_id,
               'running'::text                      AS running,
               true                                 AS unread
    ) AS u
    WHERE t.id = ANY(@ids::bigint[])
      AND t.id = u.id
      AND t.status = u.running
      AND t.attempt = u.attempt
      AND t.worker_id = u.worker_id
      AND t.started_at = u.started_at
      AND (t.workflow_id IS NULL AND t.dependents IS NULL AND t.sequence_key IS NULL
           AND t.batch_id IS NULL AND t.unique_window_key IS NULL) = u.unread
    RETURNING t.id
), rest AS MATERIALIZED (
    SELECT r.id, r.attempt, r.started_at, @worker_id::text AS worker_id, 'running'::text AS running
    FROM (SELECT unnest(@ids::bigint[]) AS id, unnest(@attempts::integer[]) AS attempt,
                 'epoch'::timestamptz + unnest(@claimed_us::bigint[]) * interval '1 microsecond' AS started_at) AS r
    WHERE r.id NOT IN (SELECT deleted.id FROM deleted)
), kept AS (
    UPDATE skiplock_tasks AS t
    SET status = 'completed',
        finished_at = now()
    FROM rest
    WHERE EXISTS (SELECT 1 FROM rest AS any_left)
      AND t.id = ANY(@ids::bigint[])
      AND t.id = rest.id
      AND t.status = rest.running
      AND t.attempt = rest.attempt
      AND t.worker_id = rest.worker_id
      AND t.started_at = rest.started_at
    RETURNING t.id
)
SELECT deleted.id FROM deleted
UNION ALL
SELECT kept.id FROM kept;

-- name: TaskRescueOrphans :many
-- Returns running tasks whose worker is gone to pending. A task guarded by
-- an advisory lock (locked_until NULL) is orphaned when nobody holds its
-- lock: its worker's session ended. A task guarded by a lease is orphaned
-- when the lease expired: its worker stopped renewing it. The set
-- difference (EXCEPT) keeps the pg_locks side a hash operation: pg_locks
-- has no statistics, and an anti-join against it can be planned as a
-- nested loop that takes seconds with thousands of running tasks. A rescued
-- task keeps its run_at, so it goes back to the front of its queue, not the
-- end. The UPDATE re-checks status and attempt on the latest row version: a
-- task that finished, or was claimed again, between the snapshot and the
-- read of pg_locks is left alone. The claim is known by its started_at too
-- (see TaskFinishMany): a task handed back with its attempt refunded and
-- claimed again in between has the attempt it had. It looks at the tasks
-- whose id is in [from_id, to_id): all of them in one pass, or a part at a
-- time while a pass of all is slow (worker/rescue.go).
--
-- A rescue charges no attempt: the attempt never reached an outcome, and is
-- given back (attempt - 1). What ends a task that keeps killing its worker
-- is its crash count instead (docs/RELIABILITY.md, "Poison tasks"):
--
--   * The worker process that claimed the task is the one registered under
--     its worker_id (skiplock_workers) if that row's started_at, which a
--     process's first registration sets, is no later than the claim's
--     started_at; otherwise that process is gone (another one registered
--     under the id since) or unknown (its row was pruned).
--   * That process lives, and the rescue counts no death, if it is the
--     rescuer's own (self), or if it has a lock session now: its row's
--     lock_backend_pid is a backend in pg_stat_activity that started no
--     later than the row's last heartbeat (the lock session writes both,
--     so a reused pid does not count). The session that held the task's
--     lock has ended, so this is a new one: the process re-dialled after
--     losing its session (a network cut, a server restart,
--     pg_terminate_backend). In lease mode it lives if it was heard from
--     (heartbeat_at) after its lease ran out.
--   * Otherwise the process is counted dead: the rescue's history entry
--     says so, with the process's worker_id, host, pid and
--     worker_started_at. It is sure ("crash": true) unless the task is an
--     advisory one whose process was heard from within settle_ms, or the
--     server is younger than that: a process that lost only its session
--     re-registers within that time (after a restart, every worker dials
--     again). Then the entry says "crash": null, and the death counts
--     until the process is heard from after it (below). A death not yet
--     sure never fails a task: a task it would fail is left running for a
--     later pass, which knows.
--   * crashes is recounted at each rescue: the entries of earlier rescues
--     marked as deaths, sure or not, less those whose process was heard
--     from after the entry was written (same worker_id and
--     worker_started_at, heartbeat_at later than the entry's finished_at:
--     it lived; it was cut off, as a silent network's session ended by
--     WorkerTerminateStale is, or was still dialling), plus this rescue's
--     death if it is one. A task with crashes > 0 is a
--     suspect: no ordinary claim takes it, a worker runs it alone
--     (worker/isolate.go); at max_crashes it is failed, its error naming
--     each death's worker, host and pid.
WITH held AS MATERIALIZED (
    SELECT l.objid::bigint AS key
    FROM pg_catalog.pg_locks AS l
    WHERE l.locktype = 'advisory'
      AND l.objsubid = 2
      AND l.granted
      AND l.classid::bigint = @lock_class_oid::bigint
      AND l.database = (SELECT d.oid FROM pg_catalog.pg_database AS d WHERE d.datname = current_database())
), orphan_keys AS MATERIALIZED (
    SELECT r.id % 4294967296 AS key FROM skiplock_tasks AS r
    WHERE r.status = 'running' AND r.locked_until IS NULL
      AND r.id >= @from_id::bigint AND r.id < @to_id::bigint
    EXCEPT
    SELECT held.key FROM held
), victims AS MATERIALIZED (
    SELECT v.id, v.attempt, v.worker_id, v.started_at, v.locked_until, w.host, w.pid, v.errors,
           CASE WHEN w.started_at <= v.started_at THEN w.started_at END AS worker_started_at,
           coalesce(v.worker_id = @self::text AND coalesce(w.started_at <= v.started_at, true), false)
           OR coalesce(w.started_at <= v.started_at
                       AND w.lock_backend_pid IS NOT NULL AND w.lock_backend_pid <> 0
                       AND EXISTS (SELECT 1 FROM pg_catalog.pg_stat_activity AS a
                                   WHERE a.pid = w.lock_backend_pid
                                     AND (a.backend_start IS NULL OR a.backend_start <= w.heartbeat_at)), false) AS lives,
           coalesce(w.started_at <= v.started_at
                    AND w.heartbeat_at > now() - interval '1 millisecond' * @settle_ms::bigint, false)
           OR pg_catalog.pg_postmaster_start_time() > now() - interval '1 millisecond' * @settle_ms::bigint AS recent
    FROM skiplock_tasks AS v
    JOIN orphan_keys AS o ON v.id % 4294967296 = o.key
    LEFT JOIN skiplock_workers AS w ON w.id = v.worker_id
    WHERE v.status = 'running' AND v.locked_until IS NULL
      AND v.id >= @from_id::bigint AND v.id < @to_id::bigint
    UNION ALL
    SELECT v.id, v.attempt, v.worker_id, v.started_at, v.locked_until, w.host, w.pid, v.errors,
           CASE WHEN w.started_at <= v.started_at THEN w.started_at END,
           coalesce(v.worker_id = @self::text AND coalesce(w.started_at <= v.started_at, true), false)
           OR coalesce(w.started_at <= v.started_at AND w.heartbeat_at > v.locked_until, false),
           false
    FROM skiplock_tasks AS v
    LEFT JOIN skiplock_workers AS w ON w.id = v.worker_id
    WHERE v.status = 'running' AND v.locked_until < now()
      AND v.id >= @from_id::bigint AND v.id < @to_id::bigint
), judged AS MATERIALIZED (
    -- The deaths of earlier rescues that still count, and this one's.
    SELECT v.id, v.attempt, v.worker_id, v.started_at, v.locked_until, v.host, v.pid, v.worker_started_at,
           NOT v.lives AS died, NOT v.lives AND v.recent AS unsure,
           d.n + CASE WHEN v.lives THEN 0 ELSE 1 END AS crashes,
           concat_ws('; ', d.names, CASE WHEN NOT v.lives THEN
               format('worker %s on host %s, pid %s', coalesce(v.worker_id, '?'), coalesce(v.host, '?'), coalesce(v.pid::text, '?')) END) AS deaths
    FROM victims AS v
    CROSS JOIN LATERAL (
        SELECT count(*)::integer AS n,
               string_agg(format('worker %s on host %s, pid %s', coalesce(e.entry ->> 'worker_id', '?'),
                                 coalesce(e.entry ->> 'host', '?'), coalesce(e.entry ->> 'pid', '?')), '; ' ORDER BY e.i) AS names
        FROM jsonb_array_elements(v.errors) WITH ORDINALITY AS e(entry, i)
        WHERE e.entry ->> 'outcome' = 'rescued'
          AND e.entry ? 'crash'
          AND e.entry -> 'crash' <> 'false'::jsonb
          AND NOT EXISTS (
              SELECT 1 FROM skiplock_workers AS h
              WHERE h.id = e.entry ->> 'worker_id'
                AND h.started_at = (e.entry ->> 'worker_started_at')::timestamptz
                AND h.heartbeat_at > (e.entry ->> 'finished_at')::timestamptz)
    ) AS d
    -- A death not yet sure never fails a task: one that would waits.
    WHERE v.lives OR NOT v.recent OR d.n + 1 < @max_crashes::integer
)
UPDATE skiplock_tasks AS t
SET status = CASE WHEN judged.died AND judged.crashes >= @max_crashes::integer THEN 'failed' ELSE 'pending' END,
    finished_at = CASE WHEN judged.died AND judged.crashes >= @max_crashes::integer THEN now() END,
    worker_id = CASE WHEN judged.died AND judged.crashes >= @max_crashes::integer THEN t.worker_id END,
    attempt = CASE WHEN judged.died AND judged.crashes >= @max_crashes::integer THEN t.attempt ELSE t.attempt - 1 END,
    crashes = least(judged.crashes, 32767),
    locked_until = NULL,
    errors = t.errors || jsonb_build_array(jsonb_build_object(
        'attempt', t.attempt,
        'outcome', 'rescued',
        'error', CASE WHEN judged.died AND judged.crashes >= @max_crashes::integer
                      THEN format('task was running during %s worker deaths (%s); failed as a poison task, not run again until requeued',
                                  judged.crashes, judged.deaths)
                      WHEN judged.unsure
                      THEN 'worker lost its database session (advisory lock released) and has not come back yet: '
                           || 'a death unless it comes back; task rescued'
                      WHEN judged.died AND judged.locked_until IS NULL
                      THEN 'worker process died (its database session ended and it has not come back); task rescued'
                      WHEN judged.died
                      THEN 'worker stopped renewing its lease and has not been heard from since (process died or lost the database); task rescued'
                      WHEN judged.locked_until IS NULL
                      THEN 'worker lost its database session (advisory lock released) and came back; task rescued'
                      ELSE 'worker let its lease expire and was heard from since; task rescued' END,
        'worker_id', judged.worker_id,
        'host', judged.host,
        'pid', judged.pid,
        'worker_started_at', judged.worker_started_at,
        'crash', CASE WHEN NOT judged.unsure THEN judged.died END,
        'crashes', judged.crashes,
        'started_at', judged.started_at,
        'finished_at', now()
    ))
FROM judged
WHERE t.id = judged.id
  AND t.status = 'running'
  AND t.attempt = judged.attempt
  AND t.started_at IS NOT DISTINCT FROM judged.started_at
  AND t.locked_until IS NOT DISTINCT FROM judged.locked_until
RETURNING t.id, t.queue, t.name, t.status, t.attempt, t.crashes, judged.died, judged.worker_id AS lost_worker_id;

-- name: TaskMaxID :one
-- The highest task id there is (0 for none): where a rescuer's sweep of
-- the task ids ends.
SELECT coalesce(max(id), 0)::bigint AS max_id FROM skiplock_tasks;

-- name: TaskLocksHeld :many
-- The task lock keys this session holds, to reconcile after a failed claim:
-- session advisory locks survive the rollback of the statement that took them.
SELECT l.objid::bigint AS key
FROM pg_catalog.pg_locks AS l
WHERE l.locktype = 'advisory'
  AND l.objsubid = 2
  AND l.classid::bigint = @lock_class_oid::bigint
  AND l.pid = pg_backend_pid();

-- name: LeaderTryLock :one
-- Elects one process for a maintenance job (the rescuer, the scheduler):
-- a session-level lock in the bigint key space, (lock class << 32) | job.
SELECT pg_try_advisory_lock(@key::bigint) AS acquired;

-- name: TaskGet :one
SELECT * FROM skiplock_tasks WHERE id = @id::bigint;

-- name: QueueNotify :exec
-- Wakes idle workers of the given queues (the insert trigger does this for
-- new tasks; rescues and requeues call it).
SELECT pg_notify(@channel::text, q)
FROM unnest(@queues::text[]) AS q;

-- name: TaskCancelRequested :many
-- Which of a worker's running tasks have a cancellation request: the
-- fallback for a missed NOTIFY.
SELECT id FROM skiplock_tasks
WHERE id = ANY(@ids::bigint[]) AND status = 'running' AND cancel_requested_at IS NOT NULL;
