-- The queues table: flow control (pause, limits, rates, aging) and per-queue reads.
-- __schema__ is replaced by the quoted schema name; %(name)s are bound parameters.
-- Each state change guards, in SQL, the state it leaves
-- (docs/explanation/state_machine.md).

-- name: queue_flow_state
-- What the claim needs to know, cheaply: whether any queue is paused or limited (then
-- claims go through job_claim_flow), and which are limited (their completions wake the
-- fleet, since a finished job frees room that another worker may be waiting for), and
-- which have a rate (the claim logs their jobs' starts, so a worker claims none ahead).
SELECT count(*) AS controlled,
       coalesce(array_agg(name ORDER BY name) FILTER (
           WHERE NOT paused AND (concurrency IS NOT NULL OR rate_limit IS NOT NULL
                                 OR key_concurrency IS NOT NULL
                                 OR key_rate_limit IS NOT NULL)),
           '{}') AS limited,
       coalesce(array_agg(name ORDER BY name) FILTER (
           WHERE NOT paused AND (rate_limit IS NOT NULL OR key_rate_limit IS NOT NULL)),
           '{}') AS rated
FROM __schema__.queues
WHERE paused OR concurrency IS NOT NULL OR rate_limit IS NOT NULL
   OR key_concurrency IS NOT NULL OR key_rate_limit IS NOT NULL;

-- name: queue_notify_freed
-- Jobs of limited queues finished: wake the workers of those queues (payload: queue).
SELECT pg_notify(%(channel)s, freed.queue)
FROM unnest(%(queues)s::text[]) AS freed(queue);

-- name: queue_set_paused
-- Taking the flow lock alone waits for the flow claims in flight (each holds it shared)
-- and holds back new ones until this commits: a claim that took a paused queue's job
-- began before the pause committed, and one that begins after takes none. (A plain
-- claim dates its jobs at its start, which is before its snapshot.) Resuming wakes the
-- queue's workers.
WITH flow_lock AS (SELECT pg_advisory_xact_lock(
    -- The schema's flow lock: two keys, the second its queues table.
    hashtext('pgbaton.flow'), ('__schema__.queues'::regclass::oid::bigint - 2147483648)::integer)),
changed AS (
    INSERT INTO __schema__.queues AS q (name, paused)
    SELECT %(name)s, %(paused)s FROM flow_lock
    ON CONFLICT (name) DO UPDATE SET paused = EXCLUDED.paused, updated_at = now()
    RETURNING q.name, q.paused
)
SELECT changed.name, changed.paused,
       CASE WHEN NOT changed.paused THEN pg_notify(%(channel)s, changed.name) END AS woken
FROM changed;

-- name: queue_set_limits
-- Each limit is changed only when its set_* flag is true; NULL removes it. The flow
-- lock as in queue_set_paused. Wakes the queue's workers, since a raised limit may let
-- jobs start now.
WITH flow_lock AS (SELECT pg_advisory_xact_lock(
    -- The schema's flow lock: two keys, the second its queues table.
    hashtext('pgbaton.flow'), ('__schema__.queues'::regclass::oid::bigint - 2147483648)::integer)),
changed AS (
    INSERT INTO __schema__.queues AS q (name, concurrency, rate_limit, rate_period,
                                        key_concurrency, key_rate_limit, key_rate_period)
    SELECT %(name)s, %(concurrency)s::integer, %(rate_limit)s::integer,
           make_interval(secs => %(rate_period)s::float8), %(key_concurrency)s::integer,
           %(key_rate_limit)s::integer, make_interval(secs => %(key_rate_period)s::float8)
    FROM flow_lock
    ON CONFLICT (name) DO UPDATE SET
        concurrency = CASE WHEN %(set_concurrency)s THEN EXCLUDED.concurrency
                           ELSE q.concurrency END,
        rate_limit  = CASE WHEN %(set_rate)s THEN EXCLUDED.rate_limit ELSE q.rate_limit END,
        rate_period = CASE WHEN %(set_rate)s THEN EXCLUDED.rate_period ELSE q.rate_period END,
        key_concurrency = CASE WHEN %(set_key_concurrency)s THEN EXCLUDED.key_concurrency
                               ELSE q.key_concurrency END,
        key_rate_limit  = CASE WHEN %(set_key_rate)s THEN EXCLUDED.key_rate_limit
                               ELSE q.key_rate_limit END,
        key_rate_period = CASE WHEN %(set_key_rate)s THEN EXCLUDED.key_rate_period
                               ELSE q.key_rate_period END,
        updated_at  = now()
    RETURNING q.name
)
SELECT changed.name, pg_notify(%(channel)s, changed.name) AS woken FROM changed;

-- name: queue_set_aging
-- NULLs turn aging off. The flow lock as in queue_set_paused.
WITH flow_lock AS (SELECT pg_advisory_xact_lock(
    hashtext('pgbaton.flow'), ('__schema__.queues'::regclass::oid::bigint - 2147483648)::integer)),
changed AS (
    INSERT INTO __schema__.queues AS q (name, aging_every, aging_step, aging_cap)
    SELECT %(name)s, make_interval(secs => %(every)s::float8), %(step)s::integer,
           %(cap)s::integer
    FROM flow_lock
    ON CONFLICT (name) DO UPDATE SET
        aging_every = EXCLUDED.aging_every, aging_step = EXCLUDED.aging_step,
        aging_cap = EXCLUDED.aging_cap, aged_at = NULL, updated_at = now()
    RETURNING q.name
)
SELECT name FROM changed;

-- name: queue_settings_list
-- Every queue that has a setting or a pending or held job, with its settings (none for a
-- queue without a row) and how many jobs it holds now.
WITH RECURSIVE pending_queue(name) AS (
    (SELECT j.queue FROM __schema__.jobs AS j WHERE j.status = 'pending' AND j.queue <> ''
     ORDER BY j.queue LIMIT 1)
    UNION ALL
    SELECT (SELECT j.queue FROM __schema__.jobs AS j
            WHERE j.status = 'pending' AND j.queue <> '' AND j.queue > p.name
            ORDER BY j.queue LIMIT 1)
    FROM pending_queue AS p WHERE p.name IS NOT NULL
),
named AS (
    SELECT name FROM pending_queue WHERE name IS NOT NULL
    UNION
    SELECT name FROM __schema__.queues
    UNION
    SELECT DISTINCT queue FROM __schema__.jobs WHERE lease_until IS NOT NULL AND queue <> ''
)
SELECT named.name, coalesce(q.paused, false) AS paused, q.concurrency, q.rate_limit,
       extract(epoch FROM q.rate_period)::float8 AS rate_period_seconds,
       extract(epoch FROM q.aging_every)::float8 AS aging_every_seconds, q.aging_step,
       q.aging_cap, q.key_concurrency, q.key_rate_limit,
       extract(epoch FROM q.key_rate_period)::float8 AS key_rate_period_seconds,
       (SELECT count(*) FROM __schema__.jobs AS h
        WHERE h.queue = named.name AND h.queue <> '' AND h.lease_until IS NOT NULL) AS held,
       q.updated_at
FROM named LEFT JOIN __schema__.queues AS q ON q.name = named.name
WHERE %(name)s::text IS NULL OR named.name = %(name)s
ORDER BY named.name;

-- name: queue_stats
-- Per queue, the jobs of jobs by state (pending due, scheduled not yet, models.STATES)
-- and whether the queue is paused; `done` counts the done jobs moved to
-- jobs_history as well, so it means the same in both retention modes: the done jobs
-- kept (docs/explanation/retention.md). Each table is read whole, as in delete mode,
-- where the same rows sit in jobs.
SELECT coalesce(j.queue, h.queue) AS queue,
       coalesce(j.pending, 0) AS pending,
       coalesce(j.scheduled, 0) AS scheduled,
       coalesce(q.paused, false) AS paused,
       coalesce(j.running, 0) AS running,
       coalesce(j.done, 0) + coalesce(h.done, 0) AS done,
       coalesce(j.failed, 0) AS failed,
       coalesce(j.cancelled, 0) AS cancelled,
       coalesce(j.expired_leases, 0) AS expired_leases,
       j.oldest_pending_seconds,
       coalesce(j.waiting, 0) AS waiting
FROM (
    SELECT queue,
           count(*) FILTER (WHERE status = 'pending' AND run_at <= now()) AS pending,
           count(*) FILTER (WHERE status = 'pending' AND run_at > now())  AS scheduled,
           count(*) FILTER (WHERE status = 'running')   AS running,
           count(*) FILTER (WHERE status = 'done')      AS done,
           count(*) FILTER (WHERE status = 'failed')    AS failed,
           count(*) FILTER (WHERE status = 'cancelled') AS cancelled,
           count(*) FILTER (WHERE status = 'running' AND lease_until < now())
               AS expired_leases,
           extract(epoch FROM now() - min(run_at) FILTER (
               WHERE status = 'pending' AND run_at <= now()))::float8
               AS oldest_pending_seconds,
           count(*) FILTER (WHERE status = 'waiting')   AS waiting
    FROM __schema__.jobs
    GROUP BY queue
) AS j
FULL JOIN (
    SELECT queue, count(*) AS done FROM __schema__.jobs_history GROUP BY queue
) AS h ON h.queue = j.queue
LEFT JOIN __schema__.queues AS q ON q.name = coalesce(j.queue, h.queue)
ORDER BY 1;
