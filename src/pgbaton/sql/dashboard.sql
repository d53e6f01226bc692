-- The dashboard's reads (pgbaton.web), by name. None of them writes: the job actions
-- are fenced statements at the end of jobs.sql. __schema__ is the quoted schema.
--
-- The job filter (status, queue, task, key, text, since, until) is the job_filter
-- fragment of jobs.sql, put in place of __job_filter__.

-- name: dashboard_queue_counts
-- Per queue: unfinished jobs by state and the failed ones. Each count is its own
-- scan of the partial index whose predicate it repeats, so done rows (nearly all of a
-- busy table) are never read: pending from jobs_claimable, running from
-- jobs_held, failed from jobs_failed (which holds the queue: an index-only
-- scan), or jobs_finished on a schema older than migration 6. A paused queue says so
-- (its pending jobs wait for a resume, not for a worker).
SELECT queue,
       bool_or(coalesce(q.paused, false)) AS paused,
       sum(pending)::bigint AS pending,
       sum(scheduled)::bigint AS scheduled,
       sum(running)::bigint AS running,
       sum(failed)::bigint AS failed,
       max(oldest_pending_seconds) AS oldest_pending_seconds,
       sum(expired_leases)::bigint AS expired_leases
FROM (
    SELECT queue,
           count(*) FILTER (WHERE run_at <= now()) AS pending,
           count(*) FILTER (WHERE run_at > now()) AS scheduled,
           0 AS running, 0 AS failed,
           extract(epoch FROM now() - min(run_at) FILTER (WHERE run_at <= now()))::float8
               AS oldest_pending_seconds,
           0 AS expired_leases
    FROM __schema__.jobs WHERE status = 'pending' GROUP BY queue
    UNION ALL
    SELECT queue, 0, 0, count(*), 0, NULL, count(*) FILTER (WHERE lease_until < now())
    FROM __schema__.jobs WHERE lease_until IS NOT NULL GROUP BY queue
    UNION ALL
    SELECT queue, 0, 0, 0, count(*), NULL, 0
    FROM __schema__.jobs
    WHERE status = 'failed' AND status IN ('done', 'failed', 'cancelled')  -- jobs_failed or jobs_finished
    GROUP BY queue
) AS counted
LEFT JOIN __schema__.queues AS q ON q.name = counted.queue
GROUP BY queue
ORDER BY queue;

-- name: dashboard_minutes
-- The last hour, minute by minute and per queue: jobs finished (by outcome) and their
-- mean and largest queue time (run_at to start). Reads jobs_finished from `since` (the
-- minutes the dashboard has not kept yet; NULL: the whole hour). current_minute tells
-- the caller which minute is still filling up.
SELECT queue,
       date_trunc('minute', finished_at) AS minute,
       date_trunc('minute', now()) AS current_minute,
       count(*) FILTER (WHERE status = 'done') AS done,
       count(*) FILTER (WHERE status = 'failed') AS failed,
       count(*) FILTER (WHERE status = 'cancelled') AS cancelled,
       avg(extract(epoch FROM started_at - run_at))::float8 AS queue_seconds_mean,
       max(extract(epoch FROM started_at - run_at))::float8 AS queue_seconds_max
FROM (
    SELECT queue, status, run_at, started_at, finished_at
    FROM __schema__.jobs
    WHERE status IN ('done', 'failed', 'cancelled')
      AND finished_at >= greatest(date_trunc('minute', now()) - interval '59 minutes',
                                  %(since)s::timestamptz)
    UNION ALL
    -- Done jobs moved within the hour (history_after below an hour): the newest
    -- partitions only, pruned at the executor's start.
    SELECT queue, status, run_at, started_at, finished_at
    FROM __schema__.jobs_history
    WHERE finished_at >= greatest(date_trunc('minute', now()) - interval '59 minutes',
                                  %(since)s::timestamptz)
) AS finished
GROUP BY queue, minute
ORDER BY queue, minute;

-- name: dashboard_workers
-- Workers seen holding a job now (there is no table of workers: an idle worker does
-- not show), with how many jobs each holds and its newest lease.
SELECT worker_id, count(*) AS running, max(lease_until) AS lease_until,
       min(started_at) AS oldest_start
FROM __schema__.jobs
WHERE lease_until IS NOT NULL AND worker_id IS NOT NULL
GROUP BY worker_id
ORDER BY worker_id;

-- name: dashboard_leader
-- The session holding the maintenance leader's advisory lock (leader_try_acquire):
-- pg_locks splits the bigint key into classid (high half) and objid (low half).
SELECT l.pid, a.application_name, a.client_addr::text AS client_addr,
       a.backend_start, extract(epoch FROM now() - a.backend_start)::float8 AS held_seconds
FROM pg_locks AS l
LEFT JOIN pg_stat_activity AS a ON a.pid = l.pid
WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
  AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
  AND ((l.classid::bigint << 32) | l.objid::bigint)
      = hashtext('pgbaton.leader.' || %(schema)s)::bigint;

-- name: dashboard_job_page
-- One page of jobs, newest first, by keyset: `before` is the smallest id of the page
-- before (NULL for the first page). Never OFFSET: a page deep in the table costs what
-- the first one does. The list shows a job's last error, not all of them. Done jobs
-- moved to jobs_history (the history retention mode, docs/explanation/retention.md) are
-- listed with the others: each table gives its newest matching page by its id index and
-- the two are merged. The history is read only when the filter may hold done jobs (this
-- pool plans for the values given, so a list of failed jobs never walks it).
SELECT paged.* FROM (
    (SELECT id, queue, task, status,
            CASE WHEN status = 'pending' AND run_at > now() THEN 'scheduled' ELSE status END
                AS state,
            priority, run_at, attempts, max_attempts, key,
            worker_id, created_at, started_at, finished_at,
            left(args::text, 200) AS args_preview,
            errors -> -1 ->> 'type' AS last_error_type,
            left(errors -> -1 ->> 'message', 200) AS last_error,
            progress, progress_note, progress_at
     FROM __schema__.jobs AS j
     WHERE (%(before)s::bigint IS NULL OR j.id < %(before)s)
       AND __job_filter__
     ORDER BY j.id DESC
     LIMIT %(limit)s)
    UNION ALL
    (SELECT id, queue, task, status,
            CASE WHEN status = 'pending' AND run_at > now() THEN 'scheduled' ELSE status END
                AS state,
            priority, run_at, attempts, max_attempts, key,
            worker_id, created_at, started_at, finished_at,
            left(args::text, 200) AS args_preview,
            errors -> -1 ->> 'type' AS last_error_type,
            left(errors -> -1 ->> 'message', 200) AS last_error,
            progress, progress_note, progress_at
     FROM __schema__.jobs_history AS j
     WHERE (%(before)s::bigint IS NULL OR j.id < %(before)s)
       -- Only done jobs are moved here: a filter of another state reads none of them.
       AND (%(status)s::text IS NULL OR %(status)s::text = 'done')
       AND __job_filter__
     ORDER BY j.id DESC
     LIMIT %(limit)s)
) AS paged
ORDER BY paged.id DESC
LIMIT %(limit)s;

-- name: dashboard_state_counts
-- The job list's state tabs: how many jobs of the filter (its status left out, so
-- `status` is NULL here) are in each state, each count stopping at `cap` (the page
-- says "10,000+"), so that a tab over millions of done jobs reads `cap` rows, not the
-- table. Pending and scheduled read jobs_claimable, failed jobs_failed, running
-- jobs_held (a running job always holds a lease: jobs_token_while_held); done counts
-- jobs_history too (the history retention mode).
SELECT state, count FROM (
    SELECT 1 AS place, 'pending' AS state, (SELECT count(*) FROM (
        SELECT 1 FROM __schema__.jobs AS j
        WHERE j.status = 'pending' AND j.run_at <= now() AND __job_filter__
        LIMIT %(cap)s) AS c) AS count
    UNION ALL
    SELECT 2, 'scheduled', (SELECT count(*) FROM (
        SELECT 1 FROM __schema__.jobs AS j
        WHERE j.status = 'pending' AND j.run_at > now() AND __job_filter__
        LIMIT %(cap)s) AS c)
    UNION ALL
    SELECT 3, 'running', (SELECT count(*) FROM (
        SELECT 1 FROM __schema__.jobs AS j
        WHERE j.status = 'running' AND j.lease_until IS NOT NULL  -- jobs_held's predicate
          AND __job_filter__ LIMIT %(cap)s) AS c)
    UNION ALL
    SELECT 4, 'waiting', (SELECT count(*) FROM (
        SELECT 1 FROM __schema__.jobs AS j
        WHERE j.status = 'waiting' AND __job_filter__ LIMIT %(cap)s) AS c)
    UNION ALL
    SELECT 5, 'done', (SELECT count(*) FROM (
        (SELECT 1 FROM __schema__.jobs AS j
         WHERE j.status = 'done' AND __job_filter__ LIMIT %(cap)s)
        UNION ALL
        (SELECT 1 FROM __schema__.jobs_history AS j
         WHERE __job_filter__ LIMIT %(cap)s)
        LIMIT %(cap)s) AS c)
    UNION ALL
    SELECT 6, 'failed', (SELECT count(*) FROM (
        SELECT 1 FROM __schema__.jobs AS j
        WHERE j.status = 'failed' AND __job_filter__ LIMIT %(cap)s) AS c)
    UNION ALL
    SELECT 7, 'cancelled', (SELECT count(*) FROM (
        SELECT 1 FROM __schema__.jobs AS j
        WHERE j.status = 'cancelled' AND __job_filter__ LIMIT %(cap)s) AS c)
) AS counts
ORDER BY place;

-- name: dashboard_jobs_of_key
-- The other jobs of one key, newest first (the job page's "same key" list).
-- Finished ones too, so no index serves it: every index on key holds only unfinished
-- jobs. The plan walks jobs_pkey backwards (a common key) or reads the table (a rare
-- one): a read of every row for a key with fewer than `limit` other jobs, measured at
-- 40 to 190 ms beside 300,000 done jobs. On purpose: it runs once per job page an
-- operator opens, and in the history mode (the default) the table holds the unfinished
-- jobs, the last hour of done ones and the retention's failed, cancelled and
-- idempotency-keyed ones (docs/explanation/retention.md), where the delete mode holds
-- every finished job of the retention. An index on key over finished rows would cost
-- every keyed job an entry at its enqueue, its claim and its end (a status change is
-- not HOT), for a page view.
SELECT id, queue, task, status, attempts, max_attempts, created_at, finished_at
FROM __schema__.jobs
WHERE key = %(key)s AND id <> %(id)s
ORDER BY id DESC
LIMIT %(limit)s;

-- name: dashboard_ping
SELECT 1 AS ok;
