-- Named locks for application code (package worker/lock).
--
-- Session and transaction locks are advisory locks in the two-int form
-- (class, key): class is this table's OID, so pg_locks tells them apart
-- from task locks (class skiplock_tasks) and from another schema's, and
-- key is a 32-bit hash of the name. Each name is recorded here on first
-- use, so that `skiplock locks` can name the keys it sees in pg_locks.
--
-- Lease locks, for clients that cannot keep a session (a transaction
-- pooler), live in the same rows: the holder, the fencing token of the
-- current acquisition and when it expires. Tokens come from one sequence,
-- so a token only ever grows, even for a row deleted and made again.
--
-- A row not held (holder NULL, or expired) may be deleted at any time.
CREATE TABLE skiplock_locks (
    name        text        PRIMARY KEY,
    key         integer     NOT NULL,
    holder      text,
    token       bigint,
    acquired_at timestamptz,
    expires_at  timestamptz,
    CONSTRAINT skiplock_locks_name_length CHECK (length(name) BETWEEN 1 AND 512)
);

CREATE INDEX skiplock_locks_key ON skiplock_locks (key);

CREATE SEQUENCE skiplock_locks_token_seq AS bigint;

CREATE OR REPLACE FUNCTION skiplock_schema_version() RETURNS integer
LANGUAGE sql IMMUTABLE AS 'SELECT 16';
