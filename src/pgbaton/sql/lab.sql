-- The statements of `pgbaton lab`, by name. Each strategy runs in a throw-away schema of
-- its own (__schema__) holding a minimal jobs table and an effects table, where every
-- "performance" of a job leaves one row: doubles are counted there, in SQL.
-- These are teaching tables that show the claim strategies bare, not pgbaton's schema.

-- name: lab_schema_create
CREATE SCHEMA __schema__;

-- name: lab_jobs_create
CREATE TABLE __schema__.jobs (
    id          bigint PRIMARY KEY,
    status      text        NOT NULL DEFAULT 'pending',
    created_at  timestamptz NOT NULL,
    claim_token uuid,
    lease_until timestamptz,
    attempts    integer     NOT NULL DEFAULT 0,
    worker_id   text
);

-- name: lab_jobs_index_create
-- The claim's partial index: the claimable set stays small as jobs finish.
CREATE INDEX jobs_claimable ON __schema__.jobs (created_at, id) WHERE status = 'pending';

-- name: lab_effects_create
CREATE TABLE __schema__.effects (
    job_id bigint      NOT NULL,
    worker text        NOT NULL,
    at     timestamptz NOT NULL
);

-- name: lab_jobs_fill
-- Distinct created_at values, so that "the oldest pending job" is one row for everybody.
INSERT INTO __schema__.jobs (id, created_at)
SELECT i, now() + i * interval '1 microsecond'
FROM generate_series(1, %(jobs)s::int) AS i;

-- name: lab_jobs_analyze
ANALYZE __schema__.jobs;

-- name: lab_schema_drop
DROP SCHEMA IF EXISTS __schema__ CASCADE;

-- name: lab_pending_exists
-- Asked after a claim came back empty: were there jobs left (a lost race) or not (done)?
SELECT EXISTS (SELECT 1 FROM __schema__.jobs WHERE status = 'pending') AS pending;

-- name: lab_naive_select
-- Strategies 1 and 2, step 1 (the first version anyone writes): read the oldest pending job.
SELECT id FROM __schema__.jobs WHERE status = 'pending' ORDER BY created_at, id LIMIT 1;

-- name: lab_naive_update
-- Strategy 1, step 2: nothing checks that the job is still pending.
UPDATE __schema__.jobs
SET status = 'running', worker_id = %(worker)s, attempts = attempts + 1
WHERE id = %(id)s;

-- name: lab_guarded_update
-- Strategy 2, step 2: touches zero rows when another worker got there first.
UPDATE __schema__.jobs
SET status = 'running', worker_id = %(worker)s, attempts = attempts + 1
WHERE id = %(id)s AND status = 'pending';

-- name: lab_job_finish
-- Strategies 1 to 3 have no claim token: the job is simply marked done.
UPDATE __schema__.jobs SET status = 'done' WHERE id = %(id)s;

-- name: lab_locking_select
-- Strategy 3, the practice question: run inside a transaction held for the whole job.
SELECT id FROM __schema__.jobs WHERE status = 'pending' ORDER BY created_at, id LIMIT 1
FOR UPDATE;

-- name: lab_skip_locked_claim
-- Strategies 4 and 5: the SKIP LOCKED claim, one statement and its own transaction.
WITH candidate AS (
    SELECT id
    FROM __schema__.jobs
    WHERE status = 'pending'
    ORDER BY created_at, id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
UPDATE __schema__.jobs AS j
SET status      = 'running',
    claim_token = gen_random_uuid(),
    lease_until = now() + make_interval(secs => %(lease)s::float8),
    attempts    = j.attempts + 1,
    worker_id   = %(worker)s
FROM candidate AS c
WHERE j.id = c.id
RETURNING j.id, j.claim_token;

-- name: lab_skip_locked_complete
-- Strategies 4 and 5: the completion, guarded by the claim token.
UPDATE __schema__.jobs AS j
SET status = 'done', claim_token = NULL, lease_until = NULL
FROM unnest(%(ids)s::bigint[], %(tokens)s::uuid[]) AS held(id, token)
WHERE j.id = held.id AND j.claim_token = held.token AND j.status = 'running';

-- name: lab_effects_insert
INSERT INTO __schema__.effects (job_id, worker, at)
SELECT job_id, worker, to_timestamp(at)
FROM unnest(%(job_ids)s::bigint[], %(workers)s::text[], %(ats)s::float8[])
     AS e(job_id, worker, at);

-- name: lab_outcome
-- What happened to the jobs, from the tables alone.
SELECT (SELECT count(*) FROM __schema__.jobs) AS jobs,
       (SELECT count(*) FROM __schema__.jobs WHERE status <> 'done') AS unfinished,
       (SELECT count(*) FROM __schema__.effects) AS performances,
       (SELECT count(DISTINCT job_id) FROM __schema__.effects) AS performed,
       (SELECT count(*) FROM (SELECT job_id FROM __schema__.effects
                              GROUP BY job_id HAVING count(*) > 1) AS twice) AS doubles;

-- name: lab_activity_sample
-- One look at the lab workers' sessions, by application_name. A session waiting for a
-- lock reports wait_event_type 'Lock'; one inside a transaction or running a statement
-- holds its connection (a pool could not lend it to anybody else).
SELECT clock_timestamp() AS at,
       count(*) FILTER (WHERE wait_event_type = 'Lock') AS waiting,
       count(*) FILTER (WHERE state IN ('active', 'idle in transaction',
                                        'idle in transaction (aborted)')) AS held,
       count(*) AS connected
FROM pg_stat_activity
WHERE starts_with(application_name, %(prefix)s);
