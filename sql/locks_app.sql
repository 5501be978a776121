-- Named locks for application code (package worker/lock): advisory locks
-- of class skiplock_locks (the table's OID, as a signed integer), keyed by
-- a 32-bit hash of the name, and lease locks in the table's rows.

-- name: LockNameRegister :exec
-- Records a name and its key on first use, for `skiplock locks`.
INSERT INTO skiplock_locks (name, key) VALUES (@name::text, @key::integer)
ON CONFLICT (name) DO NOTHING;

-- name: LockSessionTry :one
-- Tries a session-level lock on the session that will hold it; never waits.
SELECT CASE WHEN @shared::boolean
            THEN pg_try_advisory_lock_shared(c.class, @key::integer)
            ELSE pg_try_advisory_lock(c.class, @key::integer)
       END::boolean AS acquired
FROM (SELECT (o - CASE WHEN o > 2147483647 THEN 4294967296 ELSE 0 END)::integer AS class
      FROM (SELECT 'skiplock_locks'::regclass::oid::bigint AS o) AS r) AS c;

-- name: LockSessionRelease :one
-- Releases one hold of a session-level lock; false when the session did
-- not hold it.
SELECT CASE WHEN @shared::boolean
            THEN pg_advisory_unlock_shared(c.class, @key::integer)
            ELSE pg_advisory_unlock(c.class, @key::integer)
       END::boolean AS released
FROM (SELECT (o - CASE WHEN o > 2147483647 THEN 4294967296 ELSE 0 END)::integer AS class
      FROM (SELECT 'skiplock_locks'::regclass::oid::bigint AS o) AS r) AS c;

-- name: LockTxTry :one
-- Tries a transaction-level lock in the caller's transaction, and records
-- the name once it is taken (taken first, so that a name being recorded
-- by a transaction that holds the lock never makes this one wait). An
-- error aborts the transaction, which releases the lock with it.
WITH l AS MATERIALIZED (
    SELECT CASE WHEN @shared::boolean
                THEN pg_try_advisory_xact_lock_shared(c.class, @key::integer)
                ELSE pg_try_advisory_xact_lock(c.class, @key::integer)
           END::boolean AS acquired
    FROM (SELECT (o - CASE WHEN o > 2147483647 THEN 4294967296 ELSE 0 END)::integer AS class
          FROM (SELECT 'skiplock_locks'::regclass::oid::bigint AS o) AS r) AS c
), registered AS (
    INSERT INTO skiplock_locks (name, key)
    SELECT @name::text, @key::integer FROM l WHERE l.acquired
    ON CONFLICT (name) DO NOTHING
)
SELECT l.acquired FROM l;

-- name: LockLeaseAcquire :one
-- Takes the lease on a name that nobody holds, or whose lease expired,
-- with a new fencing token. No row: someone else holds it.
INSERT INTO skiplock_locks AS l (name, key, holder, token, acquired_at, expires_at)
VALUES (@name::text, @key::integer, @holder::text, nextval('skiplock_locks_token_seq'), now(),
        now() + interval '1 millisecond' * @ttl_ms::bigint)
ON CONFLICT (name) DO UPDATE
SET holder = excluded.holder, token = excluded.token,
    acquired_at = excluded.acquired_at, expires_at = excluded.expires_at
WHERE l.holder IS NULL OR l.expires_at <= now()
RETURNING l.token::bigint AS token, l.expires_at::timestamptz AS expires_at;

-- name: LockLeaseHolder :one
-- Who holds a lease now, for the error of a lease not acquired.
SELECT coalesce(holder, '')::text AS holder, coalesce(token, 0)::bigint AS token,
       coalesce(extract(epoch FROM expires_at - now()), 0)::double precision AS expires_in_seconds
FROM skiplock_locks
WHERE name = @name::text AND holder IS NOT NULL AND expires_at > now();

-- name: LockLeaseRenew :one
-- Extends a lease that is still its holder's, under the same token. No
-- row: it expired, or another holder took it.
UPDATE skiplock_locks
SET expires_at = now() + interval '1 millisecond' * @ttl_ms::bigint
WHERE name = @name::text AND holder = @holder::text AND token = @token::bigint AND expires_at > now()
RETURNING expires_at::timestamptz AS expires_at;

-- name: LockLeaseRelease :execrows
-- Ends a lease at once, if it is still this acquisition's; the token stays
-- as the last one given.
UPDATE skiplock_locks
SET holder = NULL, expires_at = NULL
WHERE name = @name::text AND holder = @holder::text AND token = @token::bigint;

-- name: LockSessionList :many
-- The named session and transaction locks held now: the advisory locks of
-- class skiplock_locks in this database, with the names recorded for
-- their key (several when names share a key) and the session holding
-- each. Materialized and joined on equality, as LockList.
WITH held AS MATERIALIZED (
    SELECT l.pid, l.objid::bigint AS key, l.mode
    FROM pg_catalog.pg_locks AS l
    WHERE l.locktype = 'advisory'
      AND l.objsubid = 2
      AND l.granted
      AND l.classid::bigint = 'skiplock_locks'::regclass::oid::bigint
      AND l.database = (SELECT d.oid FROM pg_catalog.pg_database AS d WHERE d.datname = current_database())
), names AS MATERIALIZED (
    SELECT n.key::bigint & 4294967295 AS key, array_agg(n.name ORDER BY n.name)::text[] AS names
    FROM skiplock_locks AS n
    GROUP BY 1
), sessions AS MATERIALIZED (
    SELECT a.pid, host(a.client_addr) AS client_addr, a.application_name, a.backend_start
    FROM pg_catalog.pg_stat_activity AS a
)
SELECT held.pid::integer AS pid,
       held.key::bigint AS key,
       (held.mode = 'ShareLock')::boolean AS shared,
       coalesce(names.names, '{}')::text[] AS names,
       coalesce(sessions.client_addr, '')::text AS client_addr,
       coalesce(sessions.application_name, '')::text AS application_name,
       coalesce(extract(epoch FROM now() - sessions.backend_start), 0)::double precision AS session_seconds
FROM held
LEFT JOIN names ON names.key = held.key
LEFT JOIN sessions ON sessions.pid = held.pid
ORDER BY 4, 1;

-- name: LockLeaseList :many
-- The lease locks held now, or held and expired with nobody taking them
-- since.
SELECT name, holder::text AS holder, token::bigint AS token,
       acquired_at::timestamptz AS acquired_at, expires_at::timestamptz AS expires_at,
       extract(epoch FROM expires_at - now())::double precision AS expires_in_seconds
FROM skiplock_locks
WHERE holder IS NOT NULL
ORDER BY name;

-- name: LockSessionReleaseAll :exec
-- Releases every session-level advisory lock of the session, before it is
-- closed, so that they are gone when Close returns.
SELECT pg_advisory_unlock_all();
