-- Lease mode, for connection poolers in transaction mode, where session
-- advisory locks do not survive between transactions: a claimed task carries
-- locked_until, renewed by its worker's heartbeat. NULL means the task is
-- guarded by an advisory lock instead; each mode's rescuer touches only its
-- own tasks.
ALTER TABLE skiplock_tasks ADD COLUMN locked_until timestamptz;

-- skiplock:concurrently
CREATE INDEX skiplock_tasks_lease_idx
    ON skiplock_tasks (locked_until)
    WHERE status = 'running' AND locked_until IS NOT NULL;

-- Leader election without session locks: a row per maintenance job with its
-- holder and an expiry, renewed by the holder (the lease-lock pattern).
CREATE TABLE skiplock_leaders (
    job        text        PRIMARY KEY,
    holder     text        NOT NULL,
    expires_at timestamptz NOT NULL
);
