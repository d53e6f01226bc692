-- The statements of `pgbaton demo`, by name. The demo runs in a throw-away schema
-- (__schema__) holding pgbaton's own tables and demo_effects, where each task writes
-- what it did: the demo's report is computed from these two tables, never from
-- counters kept by the demo. %(name)s are bound parameters.

-- name: demo_effects_create
CREATE TABLE IF NOT EXISTS __schema__.demo_effects (
    job_id     bigint NOT NULL,
    attempt    int    NOT NULL,
    worker_pid int    NOT NULL,
    what       text   NOT NULL,
    at         timestamptz NOT NULL DEFAULT clock_timestamp()
);

-- name: demo_effects_session_setup
-- The demo's own bookkeeping need not wait for the disk; pgbaton's writes do.
SET synchronous_commit = off;

-- name: demo_effect_record
INSERT INTO __schema__.demo_effects (job_id, attempt, worker_pid, what)
VALUES (%(job_id)s, %(attempt)s, %(worker_pid)s, %(what)s);

-- name: demo_effect_finished_by_another
-- Asked by the stalling task: has a later attempt of its job ended?
SELECT EXISTS (
    SELECT 1 FROM __schema__.demo_effects
    WHERE job_id = %(job_id)s AND attempt > 1 AND what = 'end'
) AS finished;

-- name: demo_effects_count
SELECT count(*) AS n FROM __schema__.demo_effects WHERE what = %(what)s;

-- name: demo_jobs_by_status
SELECT status, count(*) AS n FROM __schema__.jobs GROUP BY status;

-- name: demo_jobs_done_by_pid
-- worker_id is "host:pid:..." as the worker names itself.
SELECT split_part(worker_id, ':', 2)::int AS pid, count(*) AS n
FROM __schema__.jobs
WHERE status = 'done' AND worker_id IS NOT NULL
GROUP BY 1;

-- name: demo_jobs_unfinished
SELECT count(*) AS n FROM __schema__.jobs WHERE status IN ('pending', 'running');

-- name: demo_jobs_done_of_task
SELECT count(*) AS n FROM __schema__.jobs WHERE task = %(task)s AND status = 'done';

-- name: demo_orders_outcome
SELECT count(*) FILTER (WHERE status = 'done') AS done,
       count(*) FILTER (WHERE attempts > 1) AS rerun
FROM __schema__.jobs
WHERE task = 'process_order';

-- name: demo_runs_shared
-- (job, attempt) pairs that two worker processes both started: a double handout. Not
-- one: a job whose worker was killed before its start was recorded (claimed ahead and
-- started within its first second), whose attempt the reaper gave back and recorded
-- as not counted (LeaseExpired, "started": false, that attempt's number): the number is
-- handed out again, to the next live claim (docs/explanation/guarantees.md).
SELECT count(*) AS n
FROM (SELECT job_id, attempt FROM __schema__.demo_effects
      WHERE what = 'start'
      GROUP BY 1, 2
      HAVING count(DISTINCT worker_pid) > 1) AS shared
WHERE NOT EXISTS (
    SELECT 1
    FROM __schema__.jobs AS j, jsonb_array_elements(j.errors) AS e
    WHERE j.id = shared.job_id AND e ->> 'type' = 'LeaseExpired'
      AND e -> 'started' = 'false'::jsonb AND (e ->> 'attempt')::integer = shared.attempt);

-- name: demo_runs_without_claim
-- Runs under an attempt number the job never reached: work done without a claim.
SELECT count(*) AS n
FROM __schema__.demo_effects AS e
JOIN __schema__.jobs AS j ON j.id = e.job_id
WHERE e.attempt > j.attempts;

-- name: demo_long_jobs
SELECT status, attempts, count(*) AS n
FROM __schema__.jobs
WHERE task = 'long_job'
GROUP BY 1, 2;

-- name: demo_slow_report
-- The stalled job: when its first worker woke, and when another worker ended it.
SELECT j.status, j.attempts, j.result,
       (SELECT max(at) FROM __schema__.demo_effects
        WHERE job_id = j.id AND what = 'woke') AS woke,
       (SELECT max(at) FROM __schema__.demo_effects
        WHERE job_id = j.id AND attempt = 2 AND what = 'end') AS finished_by_other
FROM __schema__.jobs AS j
WHERE j.task = 'slow_report';

-- name: demo_poison
SELECT status, attempts, errors FROM __schema__.jobs WHERE task = 'poison';

-- name: demo_key_runs
-- Each job of one key with when its last attempt started and ended.
SELECT j.id,
       min(e.at) FILTER (WHERE e.what = 'start') AS started,
       max(e.at) FILTER (WHERE e.what = 'end') AS ended
FROM __schema__.jobs AS j
JOIN __schema__.demo_effects AS e ON e.job_id = j.id AND e.attempt = j.attempts
WHERE j.key = %(key)s
GROUP BY j.id
ORDER BY j.id;

-- name: demo_customers_in_parallel
-- Sampled every 20th order: how many customers had an order running when it started.
SELECT max((SELECT count(DISTINCT b.key) FROM __schema__.jobs AS b
            WHERE b.task = 'process_order' AND b.started_at <= a.started_at
              AND b.finished_at > a.started_at)) AS n
FROM __schema__.jobs AS a
WHERE a.task = 'process_order' AND a.id %% 20 = 0;

-- name: demo_jobs_of_customer
SELECT count(*) AS n FROM __schema__.jobs WHERE args->>'customer' = %(customer)s;

-- name: demo_orders_span
SELECT extract(epoch FROM max(finished_at) - min(started_at))::float8 AS seconds
FROM __schema__.jobs
WHERE task = 'process_order';

-- name: demo_schema_drop
DROP SCHEMA IF EXISTS __schema__ CASCADE;
