-- Every statement pgbaton runs, by name. Names are noun_verb.
-- __schema__ is replaced by the quoted schema name; %(name)s are bound parameters.
-- Each state change guards, in SQL, the state it leaves (docs/state_machine.md).

-- name: server_version
SELECT current_setting('server_version_num')::int AS version_num,
       current_setting('server_version') AS version;

-- name: migration_lock
SELECT pg_advisory_xact_lock(hashtext('pgbaton.migrate.' || %(schema)s));

-- name: schema_create
CREATE SCHEMA IF NOT EXISTS __schema__;

-- name: schema_version_create
CREATE TABLE IF NOT EXISTS __schema__.schema_version (
    version    integer PRIMARY KEY,
    name       text        NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
);

-- name: schema_version_get
SELECT coalesce(max(version), 0) AS version FROM __schema__.schema_version;

-- name: schema_version_table_exists
SELECT to_regclass(%(table)s) IS NOT NULL AS exists;

-- name: schema_version_record
INSERT INTO __schema__.schema_version (version, name) VALUES (%(version)s, %(name)s);

-- name: job_insert
-- A job without an idempotency key: a plain insert, the cheapest there is.
INSERT INTO __schema__.jobs (queue, task, args, priority, run_at, key, max_attempts)
VALUES (%(queue)s, %(task)s, %(args)s::jsonb, %(priority)s,
        coalesce(%(run_at)s::timestamptz, now() + make_interval(secs => %(delay)s::float8)),
        %(key)s, %(max_attempts)s)
RETURNING id;

-- name: job_insert_idempotent
-- A job with an idempotency key: inserted, or the job of the same task that already has
-- the key. ON CONFLICT names no index so that it also skips a conflict in the previous
-- release's global index, which the key of another task's job may hit: then no row
-- comes back, and the caller finds and names that job (docs/guarantees.md).
WITH inserted AS (
    INSERT INTO __schema__.jobs
        (queue, task, args, priority, run_at, key, idempotency_key, max_attempts)
    VALUES (%(queue)s, %(task)s, %(args)s::jsonb, %(priority)s,
            coalesce(%(run_at)s::timestamptz, now() + make_interval(secs => %(delay)s::float8)),
            %(key)s, %(idempotency_key)s, %(max_attempts)s)
    ON CONFLICT DO NOTHING
    RETURNING id
)
SELECT id, true AS created FROM inserted
UNION ALL
SELECT id, false AS created FROM __schema__.jobs
WHERE task = %(task)s AND idempotency_key = %(idempotency_key)s
  AND NOT EXISTS (SELECT 1 FROM inserted);

-- name: job_insert_many
-- The jobs arrive as one JSON array (cheaper to send than an array per column), each
-- job with only the fields that differ from enqueue()'s defaults, which the coalesces
-- below restore (_base.JOB_DEFAULTS is the same list). Ids are drawn before the insert
-- so that each can be matched to its input position.
WITH input AS (
    SELECT nextval('__schema__.jobs_id_seq') AS id, t.*
    FROM ROWS FROM (jsonb_to_recordset(%(jobs)s::jsonb) AS (
            queue text, task text, args jsonb, priority int, run_at timestamptz,
            delay float8, key text, idempotency_key text, max_attempts int))
         WITH ORDINALITY AS t(queue, task, args, priority, run_at, delay, key,
                              idempotency_key, max_attempts, position)
),
inserted AS (
    INSERT INTO __schema__.jobs
        (id, queue, task, args, priority, run_at, key, idempotency_key, max_attempts)
    SELECT id, coalesce(queue, 'default'), task, coalesce(args, '{}'), coalesce(priority, 0),
           coalesce(run_at, now() + make_interval(secs => coalesce(delay, 0))),
           key, idempotency_key, coalesce(max_attempts, 5)
    FROM input ORDER BY position
    ON CONFLICT DO NOTHING  -- as in job_insert_idempotent
    RETURNING id
)
-- One row of two arrays in input order, cheaper to read than a row per job: the new
-- ids (NULL where the idempotency key was taken already), the tasks and the keys.
SELECT array_agg(inserted.id ORDER BY input.position) AS ids,
       array_agg(coalesce(input.task, '') ORDER BY input.position) AS tasks,
       array_agg(input.idempotency_key ORDER BY input.position) AS idempotency_keys
FROM input LEFT JOIN inserted ON inserted.id = input.id;

-- name: job_ids_by_task_idempotency_key
SELECT j.task, j.idempotency_key, j.id
FROM unnest(%(tasks)s::text[], %(keys)s::text[]) AS wanted(task, idempotency_key)
JOIN __schema__.jobs AS j
  ON j.task = wanted.task AND j.idempotency_key = wanted.idempotency_key
WHERE j.idempotency_key IS NOT NULL;  -- jobs_task_idempotency_key_unique's predicate

-- name: job_idempotency_key_holder
-- Which job of another task holds a key in the previous release's global index.
SELECT id, task FROM __schema__.jobs
WHERE idempotency_key = %(idempotency_key)s AND idempotency_key IS NOT NULL
ORDER BY id
LIMIT 1;

-- name: job_claim_many
-- The SKIP LOCKED claim: one statement, its own transaction. SKIP LOCKED passes over rows
-- that another claim holds, so claims neither collide nor wait. A keyed job is a
-- candidate only while no other job of its key runs, none cancelled (or retried since)
-- is still held by its old handler, and none older is pending. With tasks given, only jobs of those tasks
-- are candidates (a worker claims what it can run): jobs of other tasks at the head of
-- jobs_claimable are stepped over, one index entry each.
-- The candidates travel as one array, joined with id = ANY(...): the plan is then the
-- same whatever the LIMIT (the head of jobs_claimable, then the primary key), so the
-- worker's connections keep one generic plan instead of planning every claim.
-- The claim's commit does not wait for the disk (synchronous_commit off for this one
-- transaction): a claim lost in a server crash leaves the job as it was, which is what
-- an expired lease does anyway, and the holder's fenced completion then returns False.
-- The outer SELECT hands the batch back in claim order.
WITH candidate AS (
    SELECT array_agg(picked.id) AS ids
    FROM (
        SELECT c.id
        FROM __schema__.jobs AS c
        WHERE c.status = 'pending'
          AND c.run_at <= now()
          AND (%(queues)s::text[] IS NULL OR c.queue = ANY(%(queues)s::text[]))
          AND (%(tasks)s::text[] IS NULL OR c.task = ANY(%(tasks)s::text[]))
          -- Three probes, one per index, so each costs one index lookup whatever the
          -- number of running jobs: the key's running job, a job of the key cancelled
          -- while its handler ran and not yet let go, then an older pending job.
          AND (c.key IS NULL OR (
                NOT EXISTS (
                    SELECT 1 FROM __schema__.jobs AS running
                    WHERE running.key = c.key AND running.status = 'running'
                      AND running.key IS NOT NULL)  -- jobs_one_running_per_key's predicate
                AND NOT EXISTS (
                    SELECT 1 FROM __schema__.jobs AS held
                    WHERE held.key = c.key AND held.lease_until > now()
                      -- jobs_key_held_after_cancel's predicate
                      AND held.key IS NOT NULL AND held.claim_token IS NOT NULL
                      AND held.status IN ('cancelled', 'pending'))
                AND NOT EXISTS (
                    SELECT 1 FROM __schema__.jobs AS older
                    WHERE older.key = c.key AND older.status = 'pending'
                      AND older.id < c.id)))
        ORDER BY c.priority DESC, c.run_at, c.id
        LIMIT %(limit)s
        FOR UPDATE SKIP LOCKED
    ) AS picked
),
claimed AS (
    UPDATE __schema__.jobs AS j
    SET status      = 'running',
        claim_token = gen_random_uuid(),
        lease_until = now() + make_interval(secs => %(lease)s::float8),
        attempts    = j.attempts + 1,
        worker_id   = %(worker_id)s,
        started_at  = now()
    FROM candidate, (SELECT set_config('synchronous_commit', 'off', true)) AS no_disk_wait
    WHERE j.id = ANY(candidate.ids)
    RETURNING j.id, j.claim_token, j.attempts, j.max_attempts, j.task, j.args, j.key,
              j.queue, j.priority, j.run_at, j.lease_until, j.idempotency_key, j.created_at
)
SELECT * FROM claimed ORDER BY priority DESC, run_at, id;

-- name: job_heartbeat_many
-- The *_many statements return the input positions they changed: two claims of one
-- job (a stale and a live one) may share an id, never a token.
-- Like the claim, a heartbeat need not wait for the disk: one lost in a crash only
-- leaves the lease a little shorter.
UPDATE __schema__.jobs AS j
SET lease_until = now() + make_interval(secs => %(lease)s::float8)
FROM unnest(%(ids)s::bigint[], %(tokens)s::uuid[]) WITH ORDINALITY AS held(id, token, position),
     (SELECT set_config('synchronous_commit', 'off', true)) AS no_disk_wait
WHERE j.id = held.id AND j.claim_token = held.token AND j.status = 'running'
RETURNING held.position, j.lease_until;

-- name: job_complete_many
UPDATE __schema__.jobs AS j
SET status      = 'done',
    claim_token = NULL,
    lease_until = NULL,
    result      = held.result,
    finished_at = now()
FROM unnest(%(ids)s::bigint[], %(tokens)s::uuid[], %(results)s::jsonb[])
     WITH ORDINALITY AS held(id, token, result, position)
WHERE j.id = held.id AND j.claim_token = held.token AND j.status = 'running'
RETURNING held.position;

-- name: job_fail_many
UPDATE __schema__.jobs AS j
SET status      = CASE WHEN j.attempts >= j.max_attempts THEN 'failed' ELSE 'pending' END,
    claim_token = NULL,
    lease_until = NULL,
    run_at      = CASE WHEN j.attempts >= j.max_attempts THEN j.run_at
                       ELSE now() + make_interval(secs => held.retry_in) END,
    finished_at = CASE WHEN j.attempts >= j.max_attempts THEN now() END,
    errors      = j.errors || jsonb_build_array(held.error
                      || jsonb_build_object('attempt', j.attempts, 'worker_id', j.worker_id,
                                            'at', now())),
    worker_id   = NULL
FROM unnest(%(ids)s::bigint[], %(tokens)s::uuid[], %(errors)s::jsonb[], %(retry_in)s::float8[])
     WITH ORDINALITY AS held(id, token, error, retry_in, position)
WHERE j.id = held.id AND j.claim_token = held.token AND j.status = 'running'
RETURNING held.position, j.status;

-- name: job_release_many
-- A running job goes back to pending. A job cancelled under its holder (and perhaps
-- retried since) is let go: the holder says its handler has stopped, so the job's key,
-- and the retried job itself, need not wait for the lease. Only the running jobs count
-- as released (the others were lost).
WITH held AS (
    SELECT * FROM unnest(%(ids)s::bigint[], %(tokens)s::uuid[])
                  WITH ORDINALITY AS held(id, token, position)
),
let_go AS (
    UPDATE __schema__.jobs AS j
    SET claim_token = NULL, lease_until = NULL,
        run_at = CASE WHEN j.status = 'pending' THEN least(j.run_at, now()) ELSE j.run_at END
    FROM held
    WHERE j.id = held.id AND j.claim_token = held.token
      AND j.status IN ('cancelled', 'pending')
)
UPDATE __schema__.jobs AS j
SET status      = 'pending',
    claim_token = NULL,
    lease_until = NULL,
    attempts    = j.attempts - 1,
    worker_id   = NULL,
    started_at  = NULL
FROM held
WHERE j.id = held.id AND j.claim_token = held.token AND j.status = 'running'
RETURNING held.position;

-- name: job_reap
-- The reaper. Clearing the token is what fences the stalled holder out.
-- run_at stays, so the job keeps its place in the claim order. Cancelled (or retried)
-- jobs whose old holder's lease has passed are let go on the way: their key is free
-- already, and they leave the lease and key indexes.
WITH expired_holds AS (
    UPDATE __schema__.jobs
    SET claim_token = NULL, lease_until = NULL
    WHERE status <> 'running' AND lease_until < now()
)
UPDATE __schema__.jobs AS j
SET status      = CASE WHEN j.attempts >= j.max_attempts THEN 'failed' ELSE 'pending' END,
    claim_token = NULL,
    lease_until = NULL,
    finished_at = CASE WHEN j.attempts >= j.max_attempts THEN now() END,
    errors      = j.errors || jsonb_build_array(jsonb_build_object(
                      'type', 'LeaseExpired',
                      'message', 'the lease expired before the worker finished the job',
                      'attempt', j.attempts, 'worker_id', j.worker_id, 'at', now())),
    worker_id   = NULL
WHERE j.status = 'running' AND j.lease_until < now()
RETURNING j.id, j.status;

-- name: job_cancel
-- A running job keeps its claim token and lease: its handler may still be running, so
-- its key stays held until the holder releases it or the lease runs out. The holder's
-- heartbeat and completion no longer match (status is not 'running'): it learns at its
-- next heartbeat that it lost the job.
UPDATE __schema__.jobs
SET status = 'cancelled', finished_at = now()
WHERE id = %(id)s AND status IN ('pending', 'running')
RETURNING id;

-- name: job_retry
-- A cancelled job whose handler may still run keeps that holder's token and lease, and
-- becomes due when the holder lets go (job_release_many) or its lease runs out
-- (greatest() passes over a NULL lease): the job never runs twice at once.
UPDATE __schema__.jobs
SET status = 'pending', attempts = 0, run_at = greatest(now(), lease_until),
    claim_token = CASE WHEN lease_until > now() THEN claim_token END,
    lease_until = CASE WHEN lease_until > now() THEN lease_until END,
    finished_at = NULL, worker_id = NULL
WHERE id = %(id)s AND status IN ('failed', 'cancelled')
RETURNING id;

-- name: job_get
SELECT id, queue, task, args, status, priority, run_at, attempts, max_attempts, key,
       idempotency_key, claim_token, lease_until, worker_id, errors, result, created_at,
       started_at, finished_at
FROM __schema__.jobs
WHERE id = %(id)s;

-- name: job_list
SELECT id, queue, task, args, status, priority, run_at, attempts, max_attempts, key,
       idempotency_key, claim_token, lease_until, worker_id, errors, result, created_at,
       started_at, finished_at
FROM __schema__.jobs
WHERE (%(status)s::text IS NULL OR status = %(status)s)
  AND (%(queue)s::text IS NULL OR queue = %(queue)s)
  AND (%(task)s::text IS NULL OR task = %(task)s)
ORDER BY id DESC
LIMIT %(limit)s;

-- name: queue_stats
SELECT queue,
       count(*) FILTER (WHERE status = 'pending')   AS pending,
       count(*) FILTER (WHERE status = 'running')   AS running,
       count(*) FILTER (WHERE status = 'done')      AS done,
       count(*) FILTER (WHERE status = 'failed')    AS failed,
       count(*) FILTER (WHERE status = 'cancelled') AS cancelled,
       count(*) FILTER (WHERE status = 'running' AND lease_until < now()) AS expired_leases,
       extract(epoch FROM now() - min(run_at) FILTER (
           WHERE status = 'pending' AND run_at <= now()))::float8 AS oldest_pending_seconds
FROM __schema__.jobs
GROUP BY queue
ORDER BY queue;

-- name: job_prune
-- Finished jobs older than the retention go, a bounded batch at a time so that a
-- large backlog never makes one long transaction.
DELETE FROM __schema__.jobs
WHERE id IN (
    SELECT id FROM __schema__.jobs
    WHERE status IN ('done', 'failed', 'cancelled')
      AND finished_at < now() - make_interval(secs => %(retention)s::float8)
    LIMIT %(limit)s
)
RETURNING id;

-- name: leader_try_acquire
-- A session-level lock: held while the leader's connection lives, released by
-- PostgreSQL the moment that connection dies.
SELECT pg_try_advisory_lock(hashtext('pgbaton.leader.' || %(schema)s)) AS acquired;

-- name: server_ping
-- The cheapest round trip: proves a session (the leader's, or a pooled one) still works.
SELECT 1 AS alive;

-- name: channel_listen
-- LISTEN for new jobs of the schema; the channel name is spliced in (an identifier).
LISTEN __channel__;

-- name: job_delete
-- ==================================================================================
-- Operator actions: the dashboard's and the command line's (pgbaton.web), one job or
-- every job of a filter. Each guards, in SQL, the states it may leave, so a job that
-- moved on between the page and the click is left alone, and a running job keeps its
-- holder (only cancel takes a running job, keeping its token as a hold as job_cancel
-- does; delete and run-now leave a held job alone).
-- The *_matching statements take the filter of dashboard.sql (docs/dashboard.md) and
-- `upto`, the newest id counted when the operator confirmed: jobs that arrive after
-- the count are never swept in. job_retry and job_cancel above serve one job.
-- ==================================================================================
-- Not a job whose old handler may still run (a cancelled or retried job's hold): its key
-- stays held until that handler lets go or its lease ends.
DELETE FROM __schema__.jobs
WHERE id = %(id)s AND status IN ('pending', 'done', 'failed', 'cancelled')
  AND (claim_token IS NULL OR lease_until <= now())
RETURNING id;

-- name: job_run_now
-- A scheduled job becomes due now, and the workers of its queue are woken.
WITH moved AS (
    UPDATE __schema__.jobs
    SET run_at = now()
    WHERE id = %(id)s AND status = 'pending' AND run_at > now()
      AND (claim_token IS NULL OR lease_until <= now())  -- not before a hold ends
    RETURNING id, queue
)
SELECT moved.id, pg_notify(%(channel)s, moved.queue) FROM moved;

-- name: job_set_priority
UPDATE __schema__.jobs
SET priority = %(priority)s
WHERE id = %(id)s AND status = 'pending'
RETURNING id;

-- name: job_count_matching
-- What a bulk action would change: the jobs of the filter in the action's states, and
-- the newest of their ids (the action's `upto`).
SELECT count(*) AS count, max(j.id) AS upto
FROM __schema__.jobs AS j
WHERE j.status = ANY(%(statuses)s::text[])
      AND (%(status)s::text IS NULL OR j.status = %(status)s)
      AND (%(queue)s::text IS NULL OR j.queue = %(queue)s)
      AND (%(task)s::text IS NULL OR j.task = %(task)s)
      AND (%(key)s::text IS NULL OR j.key = %(key)s)
      AND (%(text)s::text IS NULL
           OR strpos(lower(j.args::text), lower(%(text)s)) > 0
           OR strpos(lower(j.errors::text), lower(%(text)s)) > 0)
      AND (%(since)s::timestamptz IS NULL OR coalesce(j.finished_at, j.created_at) >= %(since)s)
      AND (%(until)s::timestamptz IS NULL OR coalesce(j.finished_at, j.created_at) < %(until)s);

-- name: job_retry_matching
WITH retried AS (
    UPDATE __schema__.jobs AS j
    -- As job_retry: a held job stays held, and is due when its old handler lets go.
    SET status = 'pending', attempts = 0, run_at = greatest(now(), j.lease_until),
        claim_token = CASE WHEN j.lease_until > now() THEN j.claim_token END,
        lease_until = CASE WHEN j.lease_until > now() THEN j.lease_until END,
        finished_at = NULL, worker_id = NULL
    WHERE j.id <= %(upto)s AND j.status IN ('failed', 'cancelled')
      AND (%(status)s::text IS NULL OR j.status = %(status)s)
      AND (%(queue)s::text IS NULL OR j.queue = %(queue)s)
      AND (%(task)s::text IS NULL OR j.task = %(task)s)
      AND (%(key)s::text IS NULL OR j.key = %(key)s)
      AND (%(text)s::text IS NULL
           OR strpos(lower(j.args::text), lower(%(text)s)) > 0
           OR strpos(lower(j.errors::text), lower(%(text)s)) > 0)
      AND (%(since)s::timestamptz IS NULL OR coalesce(j.finished_at, j.created_at) >= %(since)s)
      AND (%(until)s::timestamptz IS NULL OR coalesce(j.finished_at, j.created_at) < %(until)s)
    RETURNING j.queue
),
woken AS (SELECT pg_notify(%(channel)s, queue) FROM (SELECT DISTINCT queue FROM retried) AS q)
SELECT (SELECT count(*) FROM retried) AS changed, (SELECT count(*) FROM woken) AS queues;

-- name: job_cancel_matching
-- As job_cancel: a running job keeps its token and lease as a hold on its key.
UPDATE __schema__.jobs AS j
SET status = 'cancelled', finished_at = now()
WHERE j.id <= %(upto)s AND j.status IN ('pending', 'running')
  AND (%(status)s::text IS NULL OR j.status = %(status)s)
  AND (%(queue)s::text IS NULL OR j.queue = %(queue)s)
  AND (%(task)s::text IS NULL OR j.task = %(task)s)
  AND (%(key)s::text IS NULL OR j.key = %(key)s)
  AND (%(text)s::text IS NULL
       OR strpos(lower(j.args::text), lower(%(text)s)) > 0
       OR strpos(lower(j.errors::text), lower(%(text)s)) > 0)
  AND (%(since)s::timestamptz IS NULL OR coalesce(j.finished_at, j.created_at) >= %(since)s)
  AND (%(until)s::timestamptz IS NULL OR coalesce(j.finished_at, j.created_at) < %(until)s)
RETURNING j.id;

-- name: job_delete_matching
DELETE FROM __schema__.jobs AS j
WHERE j.id <= %(upto)s AND j.status IN ('pending', 'done', 'failed', 'cancelled')
  AND (j.claim_token IS NULL OR j.lease_until <= now())
  AND (%(status)s::text IS NULL OR j.status = %(status)s)
  AND (%(queue)s::text IS NULL OR j.queue = %(queue)s)
  AND (%(task)s::text IS NULL OR j.task = %(task)s)
  AND (%(key)s::text IS NULL OR j.key = %(key)s)
  AND (%(text)s::text IS NULL
       OR strpos(lower(j.args::text), lower(%(text)s)) > 0
       OR strpos(lower(j.errors::text), lower(%(text)s)) > 0)
  AND (%(since)s::timestamptz IS NULL OR coalesce(j.finished_at, j.created_at) >= %(since)s)
  AND (%(until)s::timestamptz IS NULL OR coalesce(j.finished_at, j.created_at) < %(until)s)
RETURNING j.id;

-- name: job_run_now_matching
WITH moved AS (
    UPDATE __schema__.jobs AS j
    SET run_at = now()
    WHERE j.id <= %(upto)s AND j.status = 'pending' AND j.run_at > now()
      AND (j.claim_token IS NULL OR j.lease_until <= now())
      AND (%(status)s::text IS NULL OR j.status = %(status)s)
      AND (%(queue)s::text IS NULL OR j.queue = %(queue)s)
      AND (%(task)s::text IS NULL OR j.task = %(task)s)
      AND (%(key)s::text IS NULL OR j.key = %(key)s)
      AND (%(text)s::text IS NULL
           OR strpos(lower(j.args::text), lower(%(text)s)) > 0
           OR strpos(lower(j.errors::text), lower(%(text)s)) > 0)
      AND (%(since)s::timestamptz IS NULL OR coalesce(j.finished_at, j.created_at) >= %(since)s)
      AND (%(until)s::timestamptz IS NULL OR coalesce(j.finished_at, j.created_at) < %(until)s)
    RETURNING j.queue
),
woken AS (SELECT pg_notify(%(channel)s, queue) FROM (SELECT DISTINCT queue FROM moved) AS q)
SELECT (SELECT count(*) FROM moved) AS changed, (SELECT count(*) FROM woken) AS queues;

-- name: job_set_priority_matching
UPDATE __schema__.jobs AS j
SET priority = %(priority)s
WHERE j.id <= %(upto)s AND j.status = 'pending'
  AND (%(status)s::text IS NULL OR j.status = %(status)s)
  AND (%(queue)s::text IS NULL OR j.queue = %(queue)s)
  AND (%(task)s::text IS NULL OR j.task = %(task)s)
  AND (%(key)s::text IS NULL OR j.key = %(key)s)
  AND (%(text)s::text IS NULL
       OR strpos(lower(j.args::text), lower(%(text)s)) > 0
       OR strpos(lower(j.errors::text), lower(%(text)s)) > 0)
  AND (%(since)s::timestamptz IS NULL OR coalesce(j.finished_at, j.created_at) >= %(since)s)
  AND (%(until)s::timestamptz IS NULL OR coalesce(j.finished_at, j.created_at) < %(until)s)
RETURNING j.id;
