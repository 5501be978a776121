-- schema-cost.sql: what each part of skiplock_tasks costs the server per
-- task, for a plain task's claim and outcome write.
--
-- Run it with psql on a scratch database that skiplock has migrated:
--
--     go run ./cmd/skiplock migrate up --database-url "$URL"
--     psql -X -q "$URL" -f cmd/skiplock-bench/schema-cost.sql
--
-- where $URL names a database of its own (the copies' rows and writes are
-- those of a backlog of 100,000 tasks).
--
-- It builds copies of skiplock_tasks in the schema skiplock_cost, each
-- with less of the table than the one before:
--
--     full          every index, check and status trigger of skiplock_tasks
--     no_checks     full less its CHECK constraints
--     no_triggers   no_checks less the AFTER UPDATE OF status triggers
--     four_indexes  no_triggers less the partial indexes of features
--                   (keys, sequences, workflows, batches, leases,
--                   suspects): the primary key and the claim, running and
--                   finished indexes
--     two_indexes   four_indexes less the running and finished indexes:
--                   the primary key and the claim index, as the bare SQL
--                   cycle of skiplock-bench compare has
--
-- and works 75,000 of 100,000 fresh tasks (not vacuumed) in each, one
-- statement at a time from a procedure on the server: a claim of 500 rows
-- (FOR UPDATE SKIP LOCKED, then an UPDATE to running, as the worker's
-- claim does without its advisory locks and flow control), committed, then
-- an outcome write of those 500 (an UPDATE to completed by id), committed,
-- with synchronous_commit off, so that no flush of the WAL is timed, and
-- autovacuum off on the copies, so that no round is timed beside a vacuum
-- of another copy: the figures are of the statements alone. The
-- copies take turns, three rounds; the last statement prints the median of
-- the rounds, the server's time per task for each statement, in
-- microseconds, with the indexes, checks and status triggers each copy
-- had. The schema is dropped at the end. Smaller runs: psql -v tasks=N
-- (backlog), -v batch=N (rows a statement), -v claims=N (claims a round).
\set ON_ERROR_STOP on
\if :{?tasks}
\else
\set tasks 100000
\endif
\if :{?batch}
\else
\set batch 500
\endif
\if :{?claims}
\else
\set claims 150
\endif
SET client_min_messages = warning;
SET synchronous_commit = off;
DROP SCHEMA IF EXISTS skiplock_cost CASCADE;
CREATE SCHEMA skiplock_cost;
CREATE TABLE skiplock_cost.results (copy text, round int, claim_us numeric, write_us numeric);

DO $$
DECLARE
    copies text[] := ARRAY['full', 'no_checks', 'no_triggers', 'four_indexes', 'two_indexes'];
    c text;
    r record;
    kept text[] := ARRAY['skiplock_tasks_pkey', 'skiplock_tasks_claim_idx',
                         'skiplock_tasks_running_idx', 'skiplock_tasks_finished_idx'];
BEGIN
    FOREACH c IN ARRAY copies LOOP
        EXECUTE format('CREATE TABLE skiplock_cost.%I (LIKE skiplock_tasks INCLUDING DEFAULTS INCLUDING IDENTITY)', c);
        EXECUTE format('ALTER TABLE skiplock_cost.%I SET (fillfactor = 50, autovacuum_enabled = off)', c);
        FOR r IN SELECT i.indexrelid::regclass::text AS name, pg_get_indexdef(i.indexrelid) AS def
                 FROM pg_index AS i WHERE i.indrelid = 'skiplock_tasks'::regclass LOOP
            CONTINUE WHEN c IN ('four_indexes', 'two_indexes') AND NOT r.name = ANY(kept);
            CONTINUE WHEN c = 'two_indexes' AND r.name IN ('skiplock_tasks_running_idx', 'skiplock_tasks_finished_idx');
            EXECUTE regexp_replace(r.def, 'INDEX \S+ ON \S+',
                                   format('INDEX ON skiplock_cost.%I', c));
        END LOOP;
        IF c = 'full' THEN
            FOR r IN SELECT conname, pg_get_constraintdef(oid) AS def FROM pg_constraint
                     WHERE conrelid = 'skiplock_tasks'::regclass AND contype = 'c' LOOP
                EXECUTE format('ALTER TABLE skiplock_cost.%I ADD CONSTRAINT %I %s', c, r.conname,
                               replace(r.def, ' NOT VALID', ''));
            END LOOP;
        END IF;
        IF c IN ('full', 'no_checks') THEN
            FOR r IN SELECT pg_get_triggerdef(oid) AS def FROM pg_trigger
                     WHERE tgrelid = 'skiplock_tasks'::regclass AND NOT tgisinternal
                       AND tgtype & 16 <> 0 AND tgattr::text <> '' LOOP -- the UPDATE OF status ones
                EXECUTE regexp_replace(r.def, ' ON \S+', format(' ON skiplock_cost.%I', c));
            END LOOP;
        END IF;
    END LOOP;
END $$;

CREATE PROCEDURE skiplock_cost.work(copy text, round int, tasks int, batch int, claims int) LANGUAGE plpgsql AS $$
DECLARE
    t regclass := format('skiplock_cost.%I', copy)::regclass;
    ids bigint[];
    t0 timestamptz;
    claim interval := '0';
    write interval := '0';
    n int := 0;
BEGIN
    EXECUTE format('TRUNCATE %s', t);
    EXECUTE format($q$INSERT INTO %s (queue, name, payload)
                      SELECT 'default', 'noop', jsonb_build_object('n', g) FROM generate_series(1, $1) AS g$q$, t) USING tasks;
    COMMIT;
    FOR i IN 1..claims LOOP
        t0 := clock_timestamp();
        EXECUTE format($q$
            WITH picked AS MATERIALIZED (
                SELECT p.id FROM %1$s AS p
                WHERE p.status = 'pending' AND p.queue = 'default' AND p.run_at <= now()
                ORDER BY p.priority, p.run_at, p.id
                LIMIT $1
                FOR UPDATE SKIP LOCKED
            ), claimed AS (
                UPDATE %1$s AS u
                SET status = 'running', attempt = u.attempt + 1, worker_id = 'cost',
                    started_at = now(), finished_at = NULL
                FROM picked WHERE u.id = picked.id
                RETURNING u.id
            )
            SELECT array_agg(id) FROM claimed$q$, t) INTO ids USING batch;
        COMMIT;
        claim := claim + (clock_timestamp() - t0);
        t0 := clock_timestamp();
        EXECUTE format($q$UPDATE %s SET status = 'completed', finished_at = now()
                          WHERE id = ANY($1) AND status = 'running'$q$, t) USING ids;
        COMMIT;
        write := write + (clock_timestamp() - t0);
        n := n + coalesce(cardinality(ids), 0);
    END LOOP;
    INSERT INTO skiplock_cost.results
    VALUES (copy, round, extract(epoch FROM claim) * 1e6 / n, extract(epoch FROM write) * 1e6 / n);
    COMMIT;
END $$;

CALL skiplock_cost.work('full', 1, :tasks, :batch, :claims);
CALL skiplock_cost.work('no_checks', 1, :tasks, :batch, :claims);
CALL skiplock_cost.work('no_triggers', 1, :tasks, :batch, :claims);
CALL skiplock_cost.work('four_indexes', 1, :tasks, :batch, :claims);
CALL skiplock_cost.work('two_indexes', 1, :tasks, :batch, :claims);
CALL skiplock_cost.work('full', 2, :tasks, :batch, :claims);
CALL skiplock_cost.work('no_checks', 2, :tasks, :batch, :claims);
CALL skiplock_cost.work('no_triggers', 2, :tasks, :batch, :claims);
CALL skiplock_cost.work('four_indexes', 2, :tasks, :batch, :claims);
CALL skiplock_cost.work('two_indexes', 2, :tasks, :batch, :claims);
CALL skiplock_cost.work('full', 3, :tasks, :batch, :claims);
CALL skiplock_cost.work('no_checks', 3, :tasks, :batch, :claims);
CALL skiplock_cost.work('no_triggers', 3, :tasks, :batch, :claims);
CALL skiplock_cost.work('four_indexes', 3, :tasks, :batch, :claims);
CALL skiplock_cost.work('two_indexes', 3, :tasks, :batch, :claims);

SELECT r.copy,
       (SELECT count(*) FROM pg_index AS i WHERE i.indrelid = format('skiplock_cost.%I', r.copy)::regclass) AS indexes,
       (SELECT count(*) FROM pg_constraint AS c WHERE c.conrelid = format('skiplock_cost.%I', r.copy)::regclass AND c.contype = 'c') AS checks,
       (SELECT count(*) FROM pg_trigger AS g WHERE g.tgrelid = format('skiplock_cost.%I', r.copy)::regclass AND NOT g.tgisinternal) AS triggers,
       round(percentile_cont(0.5) WITHIN GROUP (ORDER BY claim_us)::numeric, 2) AS claim_us,
       round(percentile_cont(0.5) WITHIN GROUP (ORDER BY write_us)::numeric, 2) AS write_us,
       round(percentile_cont(0.5) WITHIN GROUP (ORDER BY claim_us + write_us)::numeric, 2) AS task_us,
       string_agg(round(claim_us + write_us, 2)::text, ' / ' ORDER BY round) AS rounds
FROM skiplock_cost.results AS r
GROUP BY r.copy
ORDER BY array_position(ARRAY['full', 'no_checks', 'no_triggers', 'four_indexes', 'two_indexes'], r.copy);

DROP SCHEMA skiplock_cost CASCADE;
