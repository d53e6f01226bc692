-- The history retention mode (docs/explanation/retention.md): done jobs move from jobs
-- to the partitioned jobs_history and leave it a partition at a time. The leader's
-- pruner and `pgbaton prune` run these, a few times a minute at most, so each step is a
-- statement of its own run from Python (AsyncQueue.archive and drop_history, the
-- partition arithmetic in pgbaton/history.py): a round trip costs nothing here, and a
-- plain statement is read, planned and changed like every other.
--
-- Two advisory locks, keyed by jobs_history's oid so that two schemas never share them:
-- 'pgbaton.history', shared by every mover until its transaction ends and taken alone by
-- a drop, so no partition is dropped under a move; 'pgbaton.history.create', taken alone
-- by a mover that must create a partition, so two movers (the leader and `pgbaton
-- prune`) never create one partition twice.
-- Statements whose name ends in _ddl are templates: {partition}, {from_at} and {to_at}
-- are filled in by psycopg.sql (an identifier and two literals) and run unprepared.

-- name: history_lock_share
-- The mover's first statement, in the transaction of its move: held until commit.
SELECT pg_advisory_xact_lock_shared(
    hashtext('pgbaton.history'),
    ('__schema__.jobs_history'::regclass::oid::bigint - 2147483648)::integer
);

-- name: history_prepare
-- The partition bins (date_bin of finished_at by `width` seconds, from midnight UTC) of
-- the next `limit` jobs the mover may move: done, no idempotency key, finished more than
-- `after` seconds ago. The jobs are locked (SKIP LOCKED: those another mover holds are
-- passed over, so two movers take different jobs and make ready the bins of their own);
-- job_archive then takes only jobs of these bins, so a job finished meanwhile in another
-- bin waits for the next batch instead of failing this one.
SELECT coalesce(array_agg(DISTINCT date_bin(make_interval(secs => %(width)s::float8),
                                            c.finished_at,
                                            timestamptz '2000-01-01 00:00:00+00')),
                '{}') AS bins
FROM (SELECT j.finished_at FROM __schema__.jobs AS j
      WHERE j.status = 'done' AND j.idempotency_key IS NULL
        AND j.finished_at < now() - make_interval(secs => %(after)s::float8)
      ORDER BY j.finished_at
      LIMIT %(limit)s
      FOR UPDATE SKIP LOCKED) AS c;

-- name: history_partitions_overlapping
-- The partitions that overlap any of the bins, `width` seconds each, oldest first: what
-- covers them already (a width changed later leaves partitions of the old width).
SELECT p.from_at, p.to_at
FROM __schema__.jobs_history_partitions() AS p
WHERE EXISTS (SELECT 1 FROM unnest(%(bins)s::timestamptz[]) AS b(bin)
              WHERE p.from_at < b.bin + make_interval(secs => %(width)s::float8)
                AND p.to_at > b.bin)
ORDER BY p.from_at;

-- name: history_lock_create
-- Taken before creating a partition, until commit; the mover then looks again
-- (history_partitions_overlapping): another may have created it meanwhile.
SELECT pg_advisory_xact_lock(
    hashtext('pgbaton.history.create'),
    ('__schema__.jobs_history'::regclass::oid::bigint - 2147483648)::integer
);

-- name: history_partition_create_ddl
-- A partition is created apart and then attached (history_partition_attach_ddl):
-- ATTACH takes SHARE UPDATE EXCLUSIVE on jobs_history, so readers and other movers'
-- inserts go on meanwhile, where CREATE TABLE ... PARTITION OF would take ACCESS
-- EXCLUSIVE. LIKE copies jobs_history's columns and NOT NULLs, nothing more.
CREATE TABLE __schema__.{partition} (LIKE __schema__.jobs_history);

-- name: history_partition_attach_ddl
-- The new table is empty, so the attach's check of its rows and the build of its id
-- index cost nothing.
ALTER TABLE __schema__.jobs_history ATTACH PARTITION __schema__.{partition}
    FOR VALUES FROM ({from_at}) TO ({to_at});

-- name: job_archive
-- Step two, one statement: done jobs without an explicit idempotency key (those keep
-- enqueue_once's window in jobs until the retention), finished more than `after`
-- seconds ago and in the bins history_prepare made ready, move from jobs to
-- jobs_history, a bounded batch at a time, oldest first. SKIP LOCKED: it never waits
-- for a worker or another mover, and two movers never take one job. Leaving jobs by
-- DELETE, a job fires jobs_ended_by_delete exactly as a pruned one does. Column for
-- column (SELECT *): jobs_history has jobs' columns in jobs' order.
WITH candidate AS (
    SELECT id FROM __schema__.jobs
    WHERE status = 'done' AND idempotency_key IS NULL
      AND finished_at < now() - make_interval(secs => %(after)s::float8)
      AND date_bin(make_interval(secs => %(width)s::float8), finished_at,
                   timestamptz '2000-01-01 00:00:00+00') = ANY(%(bins)s::timestamptz[])
    ORDER BY finished_at
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
),
moved AS (
    DELETE FROM __schema__.jobs AS j
    USING candidate
    WHERE j.id = candidate.id AND j.status = 'done'
    RETURNING j.*
),
archived AS (
    INSERT INTO __schema__.jobs_history SELECT * FROM moved
    RETURNING 1
)
SELECT count(*) AS moved FROM archived;

-- name: history_lock_wait_set
-- The drop's first statement: every lock it waits for (the movers' advisory lock, each
-- partition's ACCESS EXCLUSIVE) waits at most `lock_wait` seconds, for this transaction
-- only. A DROP queued behind a long reader would hold up every reader queued behind it;
-- a lock not granted leaves the partition for the next run.
SELECT set_config('lock_timeout', ceil(%(lock_wait)s::float8 * 1000)::bigint::text || 'ms',
                  true);

-- name: history_lock_take
-- The drop waits, alone, for the movers to commit: no partition is dropped under a move.
SELECT pg_advisory_xact_lock(
    hashtext('pgbaton.history'),
    ('__schema__.jobs_history'::regclass::oid::bigint - 2147483648)::integer
);

-- name: history_partitions_expired
-- The partitions whose whole range ended more than `retention` seconds ago, oldest first:
-- a partition goes only once its last possible job is past the retention. Read once
-- before the drop takes its lock (most runs find none and stop there), then again
-- under it.
SELECT p.name
FROM __schema__.jobs_history_partitions() AS p
WHERE p.to_at < now() - make_interval(secs => %(retention)s::float8)
ORDER BY p.from_at;

-- name: history_partition_logs_delete_ddl
-- The log lines of the partition's jobs (job_logs, migration 15) go first, in the
-- drop's savepoint: a drop not granted its lock in time rolls them back with it.
DELETE FROM __schema__.job_logs AS l
USING __schema__.{partition} AS p
WHERE l.job_id = p.id;

-- name: history_partition_drop_ddl
-- Each drop in a savepoint of its own: one not granted its lock in time ends the run,
-- and those dropped before it stay dropped.
DROP TABLE __schema__.{partition};

-- name: history_partitions_list
-- The partitions of jobs_history, oldest first, with their bounds and sizes (`pgbaton
-- doctor`, tests).
SELECT p.name, p.from_at, p.to_at,
       pg_total_relation_size(('__schema__.' || quote_ident(p.name))::regclass) AS bytes
FROM __schema__.jobs_history_partitions() AS p
ORDER BY p.from_at;
