-- The jobs table: enqueue, claim, the worker's fenced writes, the reaper, reads,
-- retention and the operator's actions.
-- __schema__ is replaced by the quoted schema name; %(name)s are bound parameters.
-- Each state change guards, in SQL, the state it leaves
-- (docs/explanation/state_machine.md).

-- name: job_insert
-- A job without an idempotency key: a plain insert, the cheapest there is.
INSERT INTO __schema__.jobs (queue, task, args, priority, run_at, key, max_attempts, meta,
                             limit_key)
VALUES (%(queue)s, %(task)s, %(args)s::jsonb, %(priority)s,
        coalesce(%(run_at)s::timestamptz, now() + make_interval(secs => %(delay)s::float8)),
        %(key)s, %(max_attempts)s, %(meta)s::jsonb, %(limit_key)s)
RETURNING id;

-- name: job_insert_idempotent
-- A job with an idempotency key: inserted, or the job of the same task that already has
-- the key. ON CONFLICT names no index so that it also skips a conflict in the previous
-- release's global index, which the key of another task's job may hit: then no row
-- comes back, and the caller finds and names that job (docs/explanation/guarantees.md).
WITH inserted AS (
    INSERT INTO __schema__.jobs
        (queue, task, args, priority, run_at, key, idempotency_key, max_attempts, meta,
         limit_key)
    VALUES (%(queue)s, %(task)s, %(args)s::jsonb, %(priority)s,
            coalesce(%(run_at)s::timestamptz, now() + make_interval(secs => %(delay)s::float8)),
            %(key)s, %(idempotency_key)s, %(max_attempts)s, %(meta)s::jsonb, %(limit_key)s)
    ON CONFLICT DO NOTHING
    RETURNING id
)
SELECT id, true AS created FROM inserted
UNION ALL
SELECT id, false AS created FROM __schema__.jobs
WHERE task = %(task)s AND idempotency_key = %(idempotency_key)s
  AND NOT EXISTS (SELECT 1 FROM inserted);

-- name: job_insert_unique
-- A unique job (docs/howto/unique.md): inserted unless a job of its unique key is in one
-- of its blocking states (jobs_unique_key). The key is the caller's digest of the task,
-- the chosen args and the queue, with the number of the run_at's window of `period`
-- seconds counted from the epoch (numeric: a float's rounding would move the edges).
-- "replace" and "debounce" first update the key's pending job, which stays locked until
-- the transaction ends; a job in another state is never locked (its worker's writes
-- must not wait for a caller). The insert runs only when nothing was updated, and its
-- ON CONFLICT waits for a racing enqueue of the key to commit or roll back. No row back:
-- the job that blocked was committed after this statement's snapshot; the caller runs
-- it again, and the next snapshot sees that job.
WITH new AS (
    SELECT due.run_at,
           sha256(convert_to(%(unique_base)s || coalesce(
               ':' || floor(extract(epoch FROM due.run_at)
                            / %(unique_period)s::numeric)::text, ''), 'UTF8')) AS unique_key
    FROM (SELECT CASE WHEN %(conflict)s = 'debounce'
                      THEN now() + make_interval(secs => %(unique_delay)s::float8)
                      ELSE coalesce(%(run_at)s::timestamptz,
                                    now() + make_interval(secs => %(delay)s::float8))
                 END AS run_at) AS due
),
changed AS (
    UPDATE __schema__.jobs AS j
    SET args = %(args)s::jsonb, priority = %(priority)s, run_at = new.run_at
    FROM new
    WHERE %(conflict)s <> 'keep'
      AND j.unique_key = new.unique_key AND j.status = 'pending'
      AND j.unique_key IS NOT NULL AND j.status = ANY (j.unique_states)  -- the index's
    RETURNING j.id, j.status
),
inserted AS (
    INSERT INTO __schema__.jobs (queue, task, args, priority, run_at, key, max_attempts, meta,
                                 limit_key, unique_key, unique_states)
    SELECT %(queue)s, %(task)s, %(args)s::jsonb, %(priority)s, new.run_at, %(key)s,
           %(max_attempts)s, %(meta)s::jsonb, %(limit_key)s, new.unique_key,
           %(unique_states)s::text[]
    FROM new
    WHERE NOT EXISTS (SELECT 1 FROM changed)
    ON CONFLICT DO NOTHING
    RETURNING id, status
)
SELECT id, status, 'created' AS outcome FROM inserted
UNION ALL
SELECT id, status, CASE %(conflict)s WHEN 'debounce' THEN 'debounced' ELSE 'replaced' END
FROM changed
UNION ALL
SELECT j.id, j.status, 'kept'
FROM __schema__.jobs AS j, new
WHERE j.unique_key = new.unique_key
  AND j.unique_key IS NOT NULL AND j.status = ANY (j.unique_states)  -- the index's
  AND NOT EXISTS (SELECT 1 FROM inserted) AND NOT EXISTS (SELECT 1 FROM changed);

-- name: job_insert_many
-- The jobs arrive as one JSON array (cheaper to send than an array per column), each
-- job with only the fields that differ from enqueue()'s defaults, which the coalesces
-- below restore (_base.JOB_DEFAULTS is the same list). Ids are drawn before the insert
-- so that each can be matched to its input position. `meta` is one for the whole batch
-- (the trace context of the span around it), sent once rather than in every job.
WITH input AS (
    SELECT nextval('__schema__.jobs_id_seq') AS id, t.*
    FROM ROWS FROM (jsonb_to_recordset(%(jobs)s::jsonb) AS (
            queue text, task text, args jsonb, priority int, run_at timestamptz,
            delay float8, key text, idempotency_key text, max_attempts int,
            limit_key text))
         WITH ORDINALITY AS t(queue, task, args, priority, run_at, delay, key,
                              idempotency_key, max_attempts, limit_key, position)
),
inserted AS (
    INSERT INTO __schema__.jobs
        (id, queue, task, args, priority, run_at, key, idempotency_key, max_attempts, meta,
         limit_key)
    SELECT id, coalesce(queue, 'default'), task, coalesce(args, '{}'), coalesce(priority, 0),
           coalesce(run_at, now() + make_interval(secs => coalesce(delay, 0))),
           key, idempotency_key, coalesce(max_attempts, 5), %(meta)s::jsonb, limit_key
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

-- name: job_ids_reserve
-- The ids of a batch written by COPY (enqueue_many's large batches), drawn first so that
-- they come back in input order, lowest first, and the transaction's now(): what
-- job_insert_many's coalesce gives a job with a delay, computed the same way by the
-- client. `ids` is NULL when they run from `first` without a gap (no other session drew
-- from the sequence meanwhile, the usual case): the client counts them from there, and
-- the array is not sent and read.
SELECT min(id) AS first,
       CASE WHEN max(id) - min(id) + 1 = count(*) THEN NULL
            ELSE array_agg(id ORDER BY id) END AS ids,
       now() AS now
FROM (SELECT nextval('__schema__.jobs_id_seq') AS id
      FROM generate_series(1, %(count)s)) AS reserved;

-- name: job_copy
-- A large batch in which every job is due at once: the column defaults give run_at and
-- created_at the transaction's now(), as job_insert_many does. COPY fires the insert
-- triggers as an INSERT does, so jobs_notify_inserted wakes the workers at commit.
-- The columns a row's fields come in (_copy_rows.py): those the client fills in at the
-- write (the reserved id, the enqueue hook's meta) first, then the job's own.
COPY __schema__.jobs (id, meta, queue, task, args, priority, key, max_attempts, limit_key)
FROM STDIN;

-- name: job_copy_scheduled
-- As job_copy, for a batch in which some job has a run_at or a delay: each row carries
-- its run_at (the reserved now() where the job gave none).
COPY __schema__.jobs
    (id, meta, run_at, queue, task, args, priority, key, max_attempts, limit_key)
FROM STDIN;

-- name: job_ids_written
-- After a COPY batch lost its connection: how many of its reserved ids were written, or
-- NULL while the backend that ran it has not ended (its commit may still come).
SELECT CASE WHEN EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid = %(pid)s) THEN NULL
            ELSE (SELECT count(*) FROM __schema__.jobs WHERE id = ANY(%(ids)s::bigint[]))
       END AS written;

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
-- is still held by its old handler, and none older is pending or waiting for its
-- parents (claim_key_free below; docs/explanation/guarantees.md, "Per-key order"). With
-- tasks given, only jobs of those tasks are candidates (a worker claims what it can
-- run): jobs of other tasks at the head of the index are stepped over, one index entry
-- each.
-- This claim reads the head of jobs_claimable, for a worker of every queue; a worker that
-- names its queues claims by job_claim_queues, the same claim from jobs_queue_claimable.
-- Two statements and not one CASE of two arms: the executor readies a statement's whole
-- plan at every run, the arm it does not take too, and that made a claim of one job a
-- fifth dearer (docs/explanation/performance.md, "What a statement costs before its
-- first row").
-- The mark (`after`, JSON: {"every": [priority, run_at, id]}) is the last job this
-- worker claimed from that head; NULL (as a rule) reads from the head.
-- Claimed jobs leave their entries at the head of the index until a VACUUM removes
-- them, and while some session holds an old snapshot (a held xmin) none can, nor can a
-- scan mark them dead: every claim from the head reads every one, a heap fetch each.
-- When that makes a claim from the head slow (claim_marks.py), a claim reads its
-- priority from the mark on (the btree descends straight past the dead head), after the
-- higher priorities from their head and before the lower ones; each part is read only
-- as far as the LIMIT needs, so no row is locked that is not claimed. What became
-- pending behind the mark (a reaped job, a dependency's child, the next job of a key
-- that was busy) waits for the next claim from the head: a second away, or ten times
-- that claim's length when it is longer, at most 30 s (docs/explanation/scaling.md, "A
-- held xmin"). The candidates travel as one array, joined with id = ANY(...): the plan
-- is then the same whatever the LIMIT (the head of an index, then the primary key), so
-- the worker's connections keep one generic plan instead of planning every claim.
WITH candidate AS MATERIALIZED (  -- run once: never copied into per_claim's columns
    SELECT (
        SELECT array_agg(every.id)
        FROM (
            SELECT c.id
            FROM (SELECT %(after)s::jsonb -> 'every' AS m) AS mark
            -- Past the mark (see above): its priority's jobs after it, then the lower
            -- priorities; the higher ones first, from their head. No mark: the whole index.
            CROSS JOIN LATERAL (VALUES
                ((mark.m ->> 0)::bigint + 1, 2147483647::bigint, '-infinity'::timestamptz,
                 0::bigint),
                ((mark.m ->> 0)::bigint, (mark.m ->> 0)::bigint, (mark.m ->> 1)::timestamptz,
                 (mark.m ->> 2)::bigint),
                (-2147483648::bigint, coalesce((mark.m ->> 0)::bigint - 1, 2147483647),
                 '-infinity'::timestamptz, 0::bigint)
            ) AS part(low, high, after_run_at, after_id)
            CROSS JOIN LATERAL (
            SELECT c.id
            FROM __schema__.jobs AS c
            WHERE c.status = 'pending'
              AND c.run_at <= now()
              AND c.priority >= part.low AND c.priority <= part.high
              AND (c.run_at, c.id) > (part.after_run_at, part.after_id)
              AND (%(tasks)s::text[] IS NULL OR c.task = ANY(%(tasks)s::text[]))
              -- Paused and limited queues are job_claim_flow's
              -- (docs/explanation/flow_control.md): one read of the small queues table
              -- per claim, hashed, then a probe per row. NOT IN on purpose: the planner
              -- prices a subquery's filter at one half, where `queue <> ALL(array)`
              -- would be priced by the queue column's statistics, near zero when one
              -- queue has all the jobs: a claim that seems to read the whole index (and
              -- gets JIT-compiled, 60 ms).
              AND c.queue NOT IN (
                    SELECT q.name FROM __schema__.queues AS q
                    WHERE q.paused OR q.concurrency IS NOT NULL OR q.rate_limit IS NOT NULL
                       OR q.key_concurrency IS NOT NULL OR q.key_rate_limit IS NOT NULL)
              AND __claim_key_free__
            ORDER BY c.priority DESC, c.run_at, c.id
            LIMIT %(limit)s
            FOR UPDATE SKIP LOCKED
            ) AS c
            WHERE part.low IS NOT NULL  -- no mark: one part, the whole index
            LIMIT %(limit)s
        ) AS every) AS ids
),
__claim_write__

-- name: job_claim_queues
-- job_claim_many for a worker that names its queues (`queues`, not NULL): the head of
-- each named queue in jobs_queue_claimable, merged in claim order. It can never read
-- jobs_claimable, whatever the plan: a generic plan, which a worker's connection ends
-- on, does not know how much of the table the named queues hold, and jobs_claimable
-- filtered by queue walks every other queue's older and higher-priority jobs before the
-- first of them. So its queue test is a range of one name, ordered by queue first,
-- which only jobs_queue_claimable hands over in order (an equality would make that
-- order redundant, and the index choice the statistics'). Each named queue locks up to
-- the limit and the best of them are claimed; the rest are let go at the commit. The
-- mark (`after`, JSON: {"queues": {name: [priority, run_at, id]}}) is read queue by
-- queue as job_claim_many reads its own.
WITH candidate AS MATERIALIZED (  -- run once: never copied into per_claim's columns
    SELECT (
        SELECT array_agg(picked.id ORDER BY picked.priority DESC, picked.run_at, picked.id)
        FROM (
            SELECT named.id, named.priority, named.run_at
            FROM (SELECT DISTINCT u.name FROM unnest((SELECT %(queues)s::text[])) AS u(name)
                  WHERE u.name NOT IN (  -- as above, once per named queue
                        SELECT q.name FROM __schema__.queues AS q
                        WHERE q.paused OR q.concurrency IS NOT NULL OR q.rate_limit IS NOT NULL
                           OR q.key_concurrency IS NOT NULL OR q.key_rate_limit IS NOT NULL)
                 ) AS wanted
            CROSS JOIN LATERAL (
              SELECT c.id, c.priority, c.run_at
              FROM (SELECT %(after)s::jsonb -> 'queues' -> wanted.name AS m) AS mark
              CROSS JOIN LATERAL (VALUES  -- as in job_claim_many, with the queue's mark
                  ((mark.m ->> 0)::bigint + 1, 2147483647::bigint, '-infinity'::timestamptz,
                   0::bigint),
                  ((mark.m ->> 0)::bigint, (mark.m ->> 0)::bigint, (mark.m ->> 1)::timestamptz,
                   (mark.m ->> 2)::bigint),
                  (-2147483648::bigint, coalesce((mark.m ->> 0)::bigint - 1, 2147483647),
                   '-infinity'::timestamptz, 0::bigint)
              ) AS part(low, high, after_run_at, after_id)
              CROSS JOIN LATERAL (
                SELECT c.id, c.priority, c.run_at
                FROM __schema__.jobs AS c
                -- The range of one queue name, and jobs_queue_claimable's predicate.
                WHERE c.queue >= wanted.name AND c.queue <= wanted.name AND c.queue <> ''
                  AND c.status = 'pending'
                  AND c.run_at <= now()
                  AND c.priority >= part.low AND c.priority <= part.high
                  AND (c.run_at, c.id) > (part.after_run_at, part.after_id)
                  AND (%(tasks)s::text[] IS NULL OR c.task = ANY(%(tasks)s::text[]))
                  AND __claim_key_free__
                ORDER BY c.queue, c.priority DESC, c.run_at, c.id
                LIMIT %(limit)s
                FOR UPDATE SKIP LOCKED
              ) AS c
              WHERE part.low IS NOT NULL
              LIMIT %(limit)s
            ) AS named
            ORDER BY named.priority DESC, named.run_at, named.id
            LIMIT %(limit)s
        ) AS picked) AS ids
),
__claim_write__

-- part: claim_write
-- The claim's write, the end of job_claim_many and of job_claim_queues, after their
-- `candidate` (one row: `ids`, the jobs locked, in claim order).
-- The claim's commit does not wait for the disk (synchronous_commit off for this one
-- transaction): a claim lost in a server crash leaves the job as it was, which is what
-- an expired lease does anyway, and the holder's fenced completion then returns False.
-- The outer SELECT hands the batch back in claim order.
-- What a claim needs once is made once, in `per_claim`, not for each row (counted in
-- instructions on the server: docs/explanation/performance.md, "The claim's work a job,
-- counted"): the first `starting` ids, and the tokens' random half. A claim token is
-- that half, drawn once a claim, and the job's id: unique for each job and claim, which
-- is all the fence asks of it (a stale holder's token names its old claim), where a
-- random UUID a row from OpenSSL's generator was a fourteenth of the claim's work.
-- `starting`: how many of the batch start at once (the worker's free slots); only they
-- get started_at, the first in claim order. The others wait in the worker (claimed
-- ahead); their start is recorded by their outcome or heartbeat (job_complete_many,
-- job_heartbeat_many), or by job_start_many for a worker that hears no cancels: a
-- running job with no started_at has no start recorded, and job_reap gives its attempt
-- back. A job claimed ahead counts a hold (holds + 1), which the write that records its
-- start, its release or the let-go of a cancel takes back once: what stays counted are
-- the holds its workers died in, until an operator's retry counts afresh. A job held 3
-- times so is started at its claim, wherever it stands in the batch, so a job that
-- kills its worker as it starts spends its attempts instead of coming back for ever
-- (docs/explanation/architecture.md, "Claiming ahead sized by the worker").
per_claim AS (
    SELECT candidate.ids, candidate.ids[1:%(starting)s::integer] AS starting_ids,
           left(replace(gen_random_uuid()::text, '-', ''), 16) AS token_head
    FROM candidate
),
claimed AS (
    UPDATE __schema__.jobs AS j
    SET status      = 'running',
        claim_token = (per_claim.token_head || lpad(to_hex(j.id), 16, '0'))::uuid,
        lease_until = now() + make_interval(secs => %(lease)s::float8),
        attempts    = j.attempts + 1,
        worker_id   = %(worker_id)s,
        waiting_event = NULL,  -- woken: no longer waiting (jobs_waiting_event_only_pending)
        -- The candidates' array is in claim order. Most claims start all they take:
        -- the first test spares them the search.
        started_at  = CASE WHEN %(starting)s::integer >= %(limit)s::integer
                             OR j.id = ANY(per_claim.starting_ids)
                             OR j.holds >= 3
                           THEN now() END,
        holds       = j.holds + CASE WHEN %(starting)s::integer >= %(limit)s::integer
                                       OR j.id = ANY(per_claim.starting_ids)
                                       OR j.holds >= 3
                                     THEN 0 ELSE 1 END
    FROM per_claim, (SELECT set_config('synchronous_commit', 'off', true)) AS no_disk_wait
    WHERE j.id = ANY(per_claim.ids)
    RETURNING j.id, j.claim_token, j.attempts, j.max_attempts, j.task, j.args, j.key,
              j.queue, j.priority, j.run_at, j.lease_until, j.idempotency_key, j.created_at,
              j.meta, j.started_at IS NOT NULL AS started
)
SELECT * FROM claimed ORDER BY priority DESC, run_at, id;

-- fragment: claim_key_free
-- Whether the candidate job c may run now for its key, in job_claim_many and
-- job_claim_queues (job_claim_flow in schema.sql repeats it word for word:
-- tests/engine/test_per_key_paths.py). Four probes, one per index, so none reads the
-- table whatever the number of running jobs: the key's running job, a job of the key
-- cancelled while its handler ran and not yet let go, an older pending job (due or
-- not), then an older job waiting for its parents (migration 10). The planner may read
-- the first two's small indexes whole, once a claim (a hashed subplan), while few keyed
-- jobs run, and by key once many do.
c.key IS NULL OR (
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
          AND older.id < c.id)
    AND NOT EXISTS (
        SELECT 1 FROM __schema__.jobs AS parked
        WHERE parked.key = c.key AND parked.status = 'waiting'
          AND parked.key IS NOT NULL  -- jobs_key_waiting's predicate
          AND parked.id < c.id))

-- name: job_claim_flow
-- The claim when some queue is paused or limited (docs/explanation/flow_control.md):
-- the function job_claim_flow in schema.sql locks the limited queues' rows, counts what
-- they hold and started after the lock, and claims queue by queue from
-- jobs_queue_claimable. It returns the claimed jobs in claim order and, when a
-- rate-limited queue is full, one more row with no job whose next_slot_at says when its
-- next start is due. `finished`: the worker's jobs whose handlers ended and whose
-- outcomes are not written yet, which no longer count against their limits (NULL:
-- none). `starting` as in job_claim_many. `after`: the marks of this worker's flow
-- claims, per queue whether or not the claim names queues (the function reads queue by
-- queue); NULL reads each queue from its head (migration 24).
SELECT * FROM __schema__.job_claim_flow(
    %(worker_id)s, %(limit)s, %(lease)s::float8, %(queues)s::text[], %(tasks)s::text[],
    %(finished)s::uuid[], %(starting)s::integer, %(after)s::jsonb);

-- name: job_age_priority
-- The leader's aging pass: for each queue whose aging_every has passed since its last
-- pass, the jobs due at least that long gain aging_step of priority, up to aging_cap;
-- at most %(limit)s jobs per queue and pass. The jobs are found queue by queue through
-- jobs_queue_claimable, skipping rows a claim holds; the claim keeps reading
-- jobs_claimable, whose order is the (now raised) priority.
WITH due AS (
    UPDATE __schema__.queues AS q SET aged_at = now()
    WHERE q.aging_every IS NOT NULL AND NOT q.paused
      AND (q.aged_at IS NULL OR q.aged_at <= now() - q.aging_every)
    RETURNING q.name, q.aging_every, q.aging_step, q.aging_cap
),
picked AS (
    SELECT c.id, due.aging_step, due.aging_cap
    FROM due
    CROSS JOIN LATERAL (
        SELECT j.id FROM __schema__.jobs AS j
        WHERE j.queue = due.name AND j.queue <> '' AND j.status = 'pending'
          AND j.run_at <= now() - due.aging_every AND j.priority < due.aging_cap
        LIMIT %(limit)s
        FOR UPDATE SKIP LOCKED
    ) AS c
),
aged AS (
    UPDATE __schema__.jobs AS j
    SET priority = least(j.priority + picked.aging_step, picked.aging_cap)
    FROM picked
    WHERE j.id = picked.id AND j.status = 'pending'
    RETURNING j.id
)
SELECT count(*) AS aged FROM aged;

-- name: job_heartbeat_many
-- The *_many statements return the input positions they changed: two claims of one
-- job (a stale and a live one) may share an id, never a token. Their arrays travel in
-- binary (placeholders ending in b): a draining worker sends thousands of elements a
-- second, and the text format costs a quoting test per element on the client.
-- They read their ids through a scalar subquery, `(SELECT %(ids)b::bigint[])`, so no
-- plan knows how many there are: planned for its own values, a statement of fewer
-- elements than the generic plan's estimate (ten) always looks cheaper, and
-- PostgreSQL would plan it afresh at every call, which costs as much as running it for
-- eight jobs (fourteen indexes, most of them partial, looked over each time). Hidden,
-- the estimate is the same either way and the cached generic plan is used from the
-- sixth call (tests/sql/test_generic_plans.py).
-- Like the claim, a heartbeat need not wait for the disk: one lost in a crash only
-- leaves the lease a little shorter.
-- It also records the start of each job claimed ahead whose handler has run `ran`
-- seconds and whose start no write has recorded yet (a negative `ran`: not started, or
-- recorded): a job started from the jobs ahead has no statement of its own
-- (job_complete_many).
UPDATE __schema__.jobs AS j
SET lease_until = now() + make_interval(secs => %(lease)s::float8),
    started_at  = CASE WHEN j.started_at IS NULL AND held.ran >= 0
                       THEN now() - make_interval(secs => held.ran) ELSE j.started_at END,
    holds       = CASE WHEN j.started_at IS NULL AND held.ran >= 0
                       THEN greatest(j.holds - 1, 0) ELSE j.holds END
FROM unnest((SELECT %(ids)b::bigint[]), %(tokens)b::uuid[], %(ran)b::float8[])
     WITH ORDINALITY AS held(id, token, ran, position),
     (SELECT set_config('synchronous_commit', 'off', true)) AS no_disk_wait
WHERE j.id = held.id AND j.claim_token = held.token AND j.status = 'running'
RETURNING held.position, j.lease_until;

-- name: job_hold_key_many
-- A job cancelled (or cancelled and retried since) while its sync handler's thread runs
-- on keeps its key held by its lease (the claim's `held` probe), not by its status: the
-- worker extends that lease with this statement until the thread returns, then lets
-- the job go (job_release_many). Fenced by the token: a job another worker claimed
-- since is left alone. A job retried since (pending) is due when its old handler lets
-- go or its lease ends (job_retry): its run_at moves with the lease, or a job with no
-- key, which no key probe holds back, would be claimed beside the thread.
UPDATE __schema__.jobs AS j
SET lease_until = now() + make_interval(secs => %(lease)s::float8),
    run_at      = CASE WHEN j.status = 'pending'
                       THEN greatest(j.run_at, now() + make_interval(secs => %(lease)s::float8))
                       ELSE j.run_at END
FROM unnest((SELECT %(ids)b::bigint[]), %(tokens)b::uuid[])
     WITH ORDINALITY AS held(id, token, position)
WHERE j.id = held.id AND j.claim_token = held.token AND j.status IN ('cancelled', 'pending')
RETURNING held.position;

-- name: job_claims_lost
-- Why claims a heartbeat found gone were lost, for the worker's log and the handler's
-- stop reason: cancelled, taken by another worker once the lease ran out, back to
-- pending, finished, or deleted (no row). Read only after a loss, never on the drain.
SELECT held.position, j.status, j.worker_id, j.claim_token = held.token AS same_token
FROM unnest(%(ids)b::bigint[], %(tokens)b::uuid[]) WITH ORDINALITY AS held(id, token, position)
LEFT JOIN __schema__.jobs AS j ON j.id = held.id
ORDER BY held.position;

-- name: job_start_many
-- Jobs claimed ahead start (their started_at was left unset by the claim): all that a
-- worker is about to start at one moment, in one statement, each fenced by its token.
-- A worker uses it only while it hears no cancels (no LISTEN session): otherwise a
-- cancel reaches it by notification and the start is recorded by the job's next write
-- (job_complete_many).
-- A job cancelled, or taken by another worker after its lease, since its claim is not
-- changed and must not start. The start takes back the hold its claim counted, once:
-- only the start that finds started_at unset counts as the job's start. A start sent
-- again (its first answer lost after the server committed it) and the start a job
-- its claim started by the holds rule gets at its slot take nothing back (that claim
-- counted no hold), so the holds counted for workers that died stay.
-- The lease is left alone: the heartbeat renews every lease the worker holds, waiting
-- or started, and lease_until is in the lease indexes' keys and predicates, so writing
-- it would make every start a non-HOT update (a new entry in each index); started_at
-- and holds are in none, so a start is a HOT update.
-- Like the claim, a start need not wait for the disk: one lost in a server crash is
-- lost with its claim's lease, as if the worker had died before the start.
UPDATE __schema__.jobs AS j
SET started_at  = now(),
    holds       = CASE WHEN j.started_at IS NULL THEN greatest(j.holds - 1, 0)
                       ELSE j.holds END
FROM unnest((SELECT %(ids)b::bigint[]), %(tokens)b::uuid[])
     WITH ORDINALITY AS held(id, token, position),
     (SELECT set_config('synchronous_commit', 'off', true)) AS no_disk_wait
WHERE j.id = held.id AND j.claim_token = held.token AND j.status = 'running'
RETURNING held.position, j.lease_until;

-- name: job_progress_many
-- The worker's progress flush (docs/howto/progress-and-logs.md): the latest fraction
-- and note of each running job whose handler reported since the last flush, at most
-- one statement a second per worker, each row fenced like the heartbeat. progress_at
-- is the server's time, comparable with started_at.
UPDATE __schema__.jobs AS j
SET progress = held.fraction, progress_note = held.note, progress_at = now()
FROM unnest((SELECT %(ids)b::bigint[]), %(tokens)b::uuid[], %(fractions)b::float4[],
            %(notes)b::text[])
     WITH ORDINALITY AS held(id, token, fraction, note, position),
     (SELECT set_config('synchronous_commit', 'off', true)) AS no_disk_wait
WHERE j.id = held.id AND j.claim_token = held.token AND j.status = 'running'
RETURNING held.position;

-- name: job_logs_insert_many
-- The log lines of a batch of runs, one row each, written just before their outcomes
-- (by the completer; a run that suspends or is released at shutdown, by the executor or
-- the stopping worker), each fenced by its claim token while the job still runs: the
-- lines of a lost claim are refused as its outcome is. Each row takes the job's next
-- run number (a read of its few rows by primary key); a second write of the same run
-- (its token there already) changes nothing.
WITH fenced AS (
    SELECT DISTINCT ON (held.id, held.token) held.*  -- a run named twice: written once
    FROM unnest((SELECT %(ids)b::bigint[]), %(tokens)b::uuid[], %(attempts)b::int4[],
                %(lines)b::jsonb[], %(dropped)b::int4[], %(ended)b::text[])
         WITH ORDINALITY AS held(id, token, attempt, lines, dropped, ended, position)
    JOIN __schema__.jobs AS j
      ON j.id = held.id AND j.claim_token = held.token AND j.status = 'running'
    WHERE NOT EXISTS (SELECT 1 FROM __schema__.job_logs AS l
                      WHERE l.job_id = held.id AND l.token = held.token)
    ORDER BY held.id, held.token, held.position
),
written AS (
    INSERT INTO __schema__.job_logs (job_id, attempt, lines, dropped, run, token, ended)
    SELECT id, attempt, lines, dropped,
           coalesce((SELECT max(l.run) FROM __schema__.job_logs AS l
                     WHERE l.job_id = fenced.id), 0) + 1,
           token, ended
    FROM fenced
    RETURNING job_id, token
)
SELECT fenced.position
FROM fenced
JOIN written ON written.job_id = fenced.id AND written.token = fenced.token;

-- name: job_logs_get
-- A job's log lines, one row per run that kept lines, in the order the runs wrote
-- them (Queue.logs, `pgbaton show --logs`, the job page).
SELECT attempt, lines, dropped, created_at, run, ended
FROM __schema__.job_logs
WHERE job_id = %(id)s
ORDER BY run;

-- name: job_complete_many
-- The outcomes (job_complete_many, job_fail_many, job_end_many) record the start of a
-- job claimed ahead where nothing has yet: its handler ran `ran` seconds before the
-- write was sent, and its claim's hold is taken back, once (only the write that finds
-- started_at unset counts as the job's start). A worker starts a job claimed ahead
-- without a statement of its own (docs/explanation/architecture.md, "Claiming ahead");
-- one that dies before its job's outcome or first heartbeat leaves no started_at, and
-- job_reap gives the attempt back while the hold stays counted (the holds rule).
UPDATE __schema__.jobs AS j
SET status      = 'done',
    claim_token = NULL,
    lease_until = NULL,
    result      = held.result,
    finished_at = now(),
    started_at  = coalesce(j.started_at, now() - make_interval(secs => held.ran)),
    holds       = CASE WHEN j.started_at IS NULL THEN greatest(j.holds - 1, 0)
                       ELSE j.holds END
FROM unnest((SELECT %(ids)b::bigint[]), %(tokens)b::uuid[], %(results)b::jsonb[],
            %(ran)b::float8[])
     WITH ORDINALITY AS held(id, token, result, ran, position)
WHERE j.id = held.id AND j.claim_token = held.token AND j.status = 'running'
RETURNING held.position;

-- name: job_fail_many
-- A NULL retry_in fails the job now, attempts left or not (args its task rejects). The
-- start is recorded as job_complete_many's.
UPDATE __schema__.jobs AS j
SET status      = CASE WHEN j.attempts >= j.max_attempts OR held.retry_in IS NULL
                       THEN 'failed' ELSE 'pending' END,
    claim_token = NULL,
    lease_until = NULL,
    run_at      = CASE WHEN j.attempts >= j.max_attempts OR held.retry_in IS NULL
                       THEN j.run_at ELSE now() + make_interval(secs => held.retry_in) END,
    finished_at = CASE WHEN j.attempts >= j.max_attempts OR held.retry_in IS NULL
                       THEN now() END,
    errors      = j.errors || jsonb_build_array(held.error
                      || jsonb_build_object('attempt', j.attempts, 'worker_id', j.worker_id,
                                            'at', now())),
    worker_id   = NULL,
    started_at  = coalesce(j.started_at, now() - make_interval(secs => held.ran)),
    holds       = CASE WHEN j.started_at IS NULL THEN greatest(j.holds - 1, 0)
                       ELSE j.holds END
FROM unnest((SELECT %(ids)b::bigint[]), %(tokens)b::uuid[], %(errors)b::jsonb[],
            %(retry_in)b::float8[], %(ran)b::float8[])
     WITH ORDINALITY AS held(id, token, error, retry_in, ran, position)
WHERE j.id = held.id AND j.claim_token = held.token AND j.status = 'running'
RETURNING held.position, j.status;

-- name: job_release_many
-- A running job goes back to pending with its attempt given back (attempts - 1): a
-- worker shutting down, a job claimed ahead that never started, and a handler's snooze
-- (pgbaton.Snooze). A plain release keeps run_at, so the job keeps its place in the
-- claim order; a snooze moves it (`until`, else now() + `delay`; both NULL: it stays)
-- and counts itself in `snoozes` (`snooze`). A snooze past `max_snoozes` (NULL: no
-- limit) ends the job as `failed` instead, with `error` appended: a job that only ever
-- snoozes must end. A keyed job keeps its id whatever it does here, so it stays its
-- key's oldest and the later jobs of its key wait for it (docs/howto/per-key-ordering.md).
-- A job cancelled under its holder (and perhaps retried since) is let go: the holder
-- says its handler has stopped, so the job's key, and the retried job itself, need not
-- wait for the lease; one cancelled while it waited in the worker (claimed ahead, never
-- started) gets back the hold its claim counted, as a release does. Only the running
-- jobs count as released (the others were lost). A snooze past its limit records the
-- start of a job claimed ahead as job_complete_many does (`ran`: how long its handler
-- ran; -1 for a release, whose job goes back to pending with no start).
-- The extra arrays but `ran` travel as text: they are rare, and mostly NULLs.
WITH held AS (
    SELECT * FROM unnest((SELECT %(ids)b::bigint[]), %(tokens)b::uuid[], %(delays)s::float8[],
                         %(untils)s::timestamptz[], %(snoozes)s::boolean[],
                         %(max_snoozes)s::integer[], %(errors)s::jsonb[], %(ran)b::float8[])
                  WITH ORDINALITY AS held(id, token, delay, until, snooze, max_snoozes,
                                          error, ran, position)
),
let_go AS (
    UPDATE __schema__.jobs AS j
    SET claim_token = NULL, lease_until = NULL,
        run_at = CASE WHEN j.status = 'pending' THEN least(j.run_at, now()) ELSE j.run_at END,
        holds = CASE WHEN j.started_at IS NULL THEN greatest(j.holds - 1, 0) ELSE j.holds END
    FROM held
    WHERE j.id = held.id AND j.claim_token = held.token
      AND j.status IN ('cancelled', 'pending')
)
-- Each CASE asks first whether the snooze is one too many: NULL there (no limit, or no
-- snooze) falls through to the release.
UPDATE __schema__.jobs AS j
SET status      = CASE WHEN held.snooze AND j.snoozes >= held.max_snoozes THEN 'failed'
                       ELSE 'pending' END,
    claim_token = NULL,
    lease_until = NULL,
    attempts    = j.attempts - 1,
    run_at      = CASE WHEN held.snooze AND j.snoozes >= held.max_snoozes THEN j.run_at
                       ELSE coalesce(held.until,
                                     now() + make_interval(secs => held.delay), j.run_at)
                  END,
    snoozes     = CASE WHEN held.snooze AND j.snoozes >= held.max_snoozes THEN j.snoozes
                       WHEN held.snooze THEN j.snoozes + 1 ELSE j.snoozes END,
    finished_at = CASE WHEN held.snooze AND j.snoozes >= held.max_snoozes THEN now() END,
    errors      = CASE WHEN held.snooze AND j.snoozes >= held.max_snoozes
                       THEN j.errors || jsonb_build_array(held.error || jsonb_build_object(
                           'attempt', j.attempts - 1, 'worker_id', j.worker_id, 'at', now()))
                       ELSE j.errors END,
    worker_id   = NULL,
    started_at  = CASE WHEN held.snooze AND j.snoozes >= held.max_snoozes
                       THEN coalesce(j.started_at, CASE WHEN held.ran >= 0
                                     THEN now() - make_interval(secs => held.ran) END)
                  END,
    -- A job released before it started was held ahead by a worker that lived to hand
    -- it back: the hold its claim counted is taken back (job_claim_many).
    holds       = CASE WHEN j.started_at IS NULL THEN greatest(j.holds - 1, 0)
                       ELSE j.holds END
FROM held
WHERE j.id = held.id AND j.claim_token = held.token AND j.status = 'running'
RETURNING held.position, j.status;

-- name: job_end_many
-- A handler ends its job at once, whatever attempts are left: `failed` (raise
-- pgbaton.Discard, or an error its task does not retry) or `cancelled` (raise
-- pgbaton.Cancel). The error, or the reason, is appended to errors. Fenced as every
-- worker write: a worker that lost the claim changes nothing. The start is recorded as
-- job_complete_many's.
UPDATE __schema__.jobs AS j
SET status      = held.status,
    claim_token = NULL,
    lease_until = NULL,
    finished_at = now(),
    errors      = j.errors || jsonb_build_array(held.error
                      || jsonb_build_object('attempt', j.attempts, 'worker_id', j.worker_id,
                                            'at', now())),
    worker_id   = NULL,
    started_at  = coalesce(j.started_at, now() - make_interval(secs => held.ran)),
    holds       = CASE WHEN j.started_at IS NULL THEN greatest(j.holds - 1, 0)
                       ELSE j.holds END
FROM unnest(%(ids)b::bigint[], %(tokens)b::uuid[], %(statuses)s::text[], %(errors)s::jsonb[],
            %(ran)b::float8[])
     WITH ORDINALITY AS held(id, token, status, error, ran, position)
WHERE j.id = held.id AND j.claim_token = held.token AND j.status = 'running'
  AND held.status IN ('failed', 'cancelled')
RETURNING held.position, j.status;

-- name: job_reap
-- The reaper. Clearing the token is what fences the stalled holder out.
-- run_at stays, so the job keeps its place in the claim order. Cancelled (or retried)
-- jobs whose old holder's lease has passed are let go on the way: their key is free
-- already, and they leave the lease and key indexes.
-- A job with no started_at was claimed ahead and its start was never recorded (its
-- outcome or heartbeat records it, job_complete_many): its worker died while the job
-- waited, or before its handler's first heartbeat. It goes back to pending with its
-- attempt given back, and the record says so; the hold its claim counted stays, so a
-- job that kills its worker as it starts is started at its claim from its third hold
-- (job_claim_many) and spends its attempts from then: it cannot come back for ever.
WITH expired_holds AS (
    UPDATE __schema__.jobs
    SET claim_token = NULL, lease_until = NULL
    WHERE status <> 'running' AND lease_until < now()
)
UPDATE __schema__.jobs AS j
SET status      = CASE WHEN j.attempts >= j.max_attempts AND j.started_at IS NOT NULL
                       THEN 'failed' ELSE 'pending' END,
    claim_token = NULL,
    lease_until = NULL,
    attempts    = CASE WHEN j.started_at IS NULL THEN j.attempts - 1 ELSE j.attempts END,
    finished_at = CASE WHEN j.attempts >= j.max_attempts AND j.started_at IS NOT NULL
                       THEN now() END,
    errors      = j.errors || jsonb_build_array(jsonb_build_object(
                      'type', 'LeaseExpired',
                      'message', CASE WHEN j.started_at IS NULL
                          THEN 'the worker stopped before the job''s start was '
                               'recorded (its lease expired while the job waited in '
                               'the worker, or within its first heartbeat): this '
                               'attempt was not counted'
                          ELSE 'the lease expired before the worker finished the job' END,
                      'started', j.started_at IS NOT NULL,
                      'attempt', j.attempts, 'worker_id', j.worker_id, 'at', now())),
    worker_id   = NULL
WHERE j.status = 'running' AND j.lease_until < now()
RETURNING j.id, j.status;

-- name: job_cancel
-- A running job keeps its claim token and lease: its handler may still be running, so
-- its key stays held until the holder releases it or the lease runs out. The holder's
-- heartbeat and completion no longer match (status is not 'running'): the trigger
-- jobs_status_changed makes it beat at once, and it learns that it lost the job. A
-- waiting job (docs/explanation/dependencies.md) may be cancelled too; the jobs that wait
-- for it are then cancelled by jobs_status_changed. A job that waited for an event waits
-- no more (jobs_waiting_event_only_pending).
UPDATE __schema__.jobs
SET status = 'cancelled', finished_at = now(), waiting_event = NULL
WHERE id = %(id)s AND status IN ('pending', 'running', 'waiting')
RETURNING id;

-- name: job_retry
-- A cancelled job whose handler may still run keeps that holder's token and lease, and
-- becomes due when the holder lets go (job_release_many) or its lease runs out
-- (greatest() passes over a NULL lease): the job never runs twice at once. A job with
-- parents waits again while one of them has not finished (job_retry_status, schema.sql:
-- it locks them). Its attempts, snoozes and holds start again at 0: the deaths of
-- workers that held it ahead before (jobs.holds, job_claim_many) count no more, as its
-- spent attempts do not. The workers of its queue are woken, as job_retry_matching
-- wakes them, and the job is returned, pending or waiting.
WITH retried AS (
    UPDATE __schema__.jobs AS j
    SET (status, waiting_for) = (SELECT * FROM __schema__.job_retry_status(
                                     j.id, j.waiting_for IS NOT NULL)),
        attempts = 0, snoozes = 0, holds = 0,
        run_at = greatest(now(), lease_until),
        claim_token = CASE WHEN lease_until > now() THEN claim_token END,
        lease_until = CASE WHEN lease_until > now() THEN lease_until END,
        finished_at = NULL, worker_id = NULL
    WHERE id = %(id)s AND status IN ('failed', 'cancelled')
    RETURNING id, queue
)
SELECT retried.id, pg_notify(%(channel)s, retried.queue) FROM retried;

-- name: job_get
SELECT id, queue, task, args, status, priority, run_at, attempts, max_attempts, key,
       idempotency_key, claim_token, lease_until, worker_id, errors, result, created_at,
       started_at, finished_at, batch_id, waiting_for, meta,
       encode(unique_key, 'hex') AS unique_key, unique_states, snoozes, progress,
       progress_note, progress_at
FROM __schema__.jobs
WHERE id = %(id)s;

-- name: job_get_archived
-- A job that job_get did not find may have been moved to jobs_history (the history
-- retention mode, docs/explanation/retention.md): read after job_get, never before, so
-- a job moved between the two is found here (a move is one statement, and jobs never
-- move back).
SELECT id, queue, task, args, status, priority, run_at, attempts, max_attempts, key,
       idempotency_key, claim_token, lease_until, worker_id, errors, result, created_at,
       started_at, finished_at, batch_id, waiting_for, meta,
       encode(unique_key, 'hex') AS unique_key, unique_states, snoozes, progress,
       progress_note, progress_at
FROM __schema__.jobs_history
WHERE id = %(id)s
LIMIT 1;

-- name: job_list
-- The newest jobs of jobs and of jobs_history (done jobs moved by the history retention
-- mode) together, each read newest first by its id index. The history is read only
-- when the filter may hold done jobs (a one-time filter on the parameter), so a list of
-- failed jobs never walks it. The filter is the job_filter fragment (below), as on the
-- dashboard's list.
SELECT listed.* FROM (
    (SELECT id, queue, task, args, status, priority, run_at, attempts, max_attempts, key,
            idempotency_key, claim_token, lease_until, worker_id, errors, result,
            created_at, started_at, finished_at, batch_id, waiting_for, progress,
            progress_note, progress_at
     FROM __schema__.jobs AS j
     WHERE __job_filter__
     ORDER BY id DESC
     LIMIT %(limit)s)
    UNION ALL
    (SELECT id, queue, task, args, status, priority, run_at, attempts, max_attempts, key,
            idempotency_key, claim_token, lease_until, worker_id, errors, result,
            created_at, started_at, finished_at, batch_id, waiting_for, progress,
            progress_note, progress_at
     FROM __schema__.jobs_history AS j
     WHERE (%(status)s::text IS NULL OR %(status)s::text = 'done')
       AND __job_filter__
     ORDER BY id DESC
     LIMIT %(limit)s)
) AS listed
ORDER BY listed.id DESC
LIMIT %(limit)s;

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

-- name: jobs_vacuum_state
-- The leader's vacuum (maintenance/services.py, Vacuumer; docs/explanation/scaling.md,
-- "The claim's dead head"): the jobs table's dead and live row versions as the
-- statistics count them, the rows its planner statistics last counted (VACUUM and
-- ANALYZE set them), and whether this role may VACUUM it, as PostgreSQL decides: a
-- superuser, the table's owner or the database's (or a role with their privileges), and
-- from PostgreSQL 17 a role granted MAINTAIN on it. The CASE keeps MAINTAIN away from
-- older servers, which do not know it.
SELECT coalesce(s.n_dead_tup, 0) AS dead, coalesce(s.n_live_tup, 0) AS live,
       c.reltuples AS planned,  -- the rows the planner reckons with; -1: never counted
       current_user AS role,
       (SELECT r.rolsuper FROM pg_roles AS r WHERE r.rolname = current_user)
       OR pg_has_role(c.relowner, 'USAGE')
       OR pg_has_role((SELECT d.datdba FROM pg_database AS d
                       WHERE d.datname = current_database()), 'USAGE')
       OR CASE WHEN current_setting('server_version_num')::int >= 170000
               THEN has_table_privilege(c.oid, 'MAINTAIN') ELSE false END AS allowed
FROM pg_class AS c
LEFT JOIN pg_stat_user_tables AS s ON s.relid = c.oid
WHERE c.relname = 'jobs'
  AND c.relnamespace = (SELECT n.oid FROM pg_namespace AS n WHERE n.nspname = %(schema)s);

-- name: jobs_vacuum
-- Outside any transaction block (VACUUM refuses one). SKIP_LOCKED: when another VACUUM
-- (autovacuum's, or an operator's) or DDL holds the table, skip it with a warning
-- (SQLSTATE 55P03) instead of waiting behind it.
VACUUM (SKIP_LOCKED) __schema__.jobs;

-- name: job_delete
-- ==================================================================================
-- Operator actions: the dashboard's and the command line's (pgbaton.web), one job or
-- every job of a filter. Each guards, in SQL, the states it may leave, so a job that
-- moved on between the page and the click is left alone, and a running job keeps its
-- holder (only cancel takes a running job, keeping its token as a hold as job_cancel
-- does; delete and run-now leave a held job alone).
-- The *_matching statements take the job filter (the job_filter fragment below) and
-- `upto`, the newest id counted when the operator confirmed: jobs that arrive after
-- the count are never swept in. job_retry and job_cancel above serve one job.
-- ==================================================================================
-- Not a job whose old handler may still run (a cancelled or retried job's hold): its key
-- stays held until that handler lets go or its lease ends.
DELETE FROM __schema__.jobs
WHERE id = %(id)s AND status IN ('pending', 'done', 'failed', 'cancelled', 'waiting')
  AND (claim_token IS NULL OR lease_until <= now())
RETURNING id;

-- name: job_delete_archived
-- A done job moved to jobs_history (docs/explanation/retention.md), deleted by an
-- operator (its args may be what must go) before its partition is dropped; tried after
-- job_delete. Its log lines (job_logs) go with it.
WITH deleted AS (
    DELETE FROM __schema__.jobs_history WHERE id = %(id)s RETURNING id
),
logs AS (
    DELETE FROM __schema__.job_logs AS l USING deleted WHERE l.job_id = deleted.id
)
SELECT id FROM deleted;

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

-- fragment: job_filter
-- A pgbaton.JobFilter over the jobs aliased j, written once: the loader (_sql.py) puts
-- it in place of __job_filter__ in every statement that filters (job_list,
-- job_count_matching, the *_matching actions, dashboard_job_page), so they all mean the same jobs by the
-- same filter (tests/test_job_filter.py). A NULL parameter means "any". `since`
-- and `until` bound the time the job finished, or, for one not finished, the time it
-- was created; `text` is a case-insensitive substring of its args or its errors.
-- `ids` is a selection (the dashboard's checked rows).
-- `status` is a state as shown (models.STATES): pending means due, scheduled a pending
-- job whose run_at is still ahead; the others are the stored status.
(%(status)s::text IS NULL
 OR (j.status = %(status)s AND %(status)s::text NOT IN ('pending', 'scheduled'))
 OR (j.status = 'pending' AND %(status)s::text = 'pending' AND j.run_at <= now())
 OR (j.status = 'pending' AND %(status)s::text = 'scheduled' AND j.run_at > now()))
AND (%(queue)s::text IS NULL OR j.queue = %(queue)s)
AND (%(task)s::text IS NULL OR j.task = %(task)s)
AND (%(key)s::text IS NULL OR j.key = %(key)s)
AND (%(text)s::text IS NULL
     OR strpos(lower(j.args::text), lower(%(text)s)) > 0
     OR strpos(lower(j.errors::text), lower(%(text)s)) > 0)
AND (%(since)s::timestamptz IS NULL OR coalesce(j.finished_at, j.created_at) >= %(since)s)
AND (%(until)s::timestamptz IS NULL OR coalesce(j.finished_at, j.created_at) < %(until)s)
AND (%(ids)s::bigint[] IS NULL OR j.id = ANY(%(ids)s::bigint[]))

-- name: job_count_matching
-- What a bulk action would change: the jobs of the filter in the action's states, and
-- the newest of their ids (the action's `upto`).
SELECT count(*) AS count, max(j.id) AS upto
FROM __schema__.jobs AS j
WHERE j.status = ANY(%(statuses)s::text[])
      AND __job_filter__;

-- name: job_retry_matching
WITH retried AS (
    UPDATE __schema__.jobs AS j
    -- As job_retry: a held job stays held, and is due when its old handler lets go; a
    -- job with parents waits again while one of them has not finished; attempts,
    -- snoozes and holds start again at 0.
    SET (status, waiting_for) = (SELECT * FROM __schema__.job_retry_status(
                                     j.id, j.waiting_for IS NOT NULL)),
        attempts = 0, snoozes = 0, holds = 0,
        run_at = greatest(now(), j.lease_until),
        claim_token = CASE WHEN j.lease_until > now() THEN j.claim_token END,
        lease_until = CASE WHEN j.lease_until > now() THEN j.lease_until END,
        finished_at = NULL, worker_id = NULL
    WHERE j.id <= %(upto)s AND j.status IN ('failed', 'cancelled')
      AND __job_filter__
    RETURNING j.queue
),
woken AS (SELECT pg_notify(%(channel)s, queue) FROM (SELECT DISTINCT queue FROM retried) AS q)
SELECT (SELECT count(*) FROM retried) AS changed, (SELECT count(*) FROM woken) AS queues;

-- name: job_cancel_matching
-- As job_cancel: a running job keeps its token and lease as a hold on its key.
UPDATE __schema__.jobs AS j
SET status = 'cancelled', finished_at = now(), waiting_event = NULL
WHERE j.id <= %(upto)s AND j.status IN ('pending', 'running', 'waiting')
  AND __job_filter__
RETURNING j.id;

-- name: job_delete_matching
DELETE FROM __schema__.jobs AS j
WHERE j.id <= %(upto)s AND j.status IN ('pending', 'done', 'failed', 'cancelled', 'waiting')
  AND (j.claim_token IS NULL OR j.lease_until <= now())
  AND __job_filter__
RETURNING j.id;

-- name: job_run_now_matching
WITH moved AS (
    UPDATE __schema__.jobs AS j
    SET run_at = now()
    WHERE j.id <= %(upto)s AND j.status = 'pending' AND j.run_at > now()
      AND (j.claim_token IS NULL OR j.lease_until <= now())
      AND __job_filter__
    RETURNING j.queue
),
woken AS (SELECT pg_notify(%(channel)s, queue) FROM (SELECT DISTINCT queue FROM moved) AS q)
SELECT (SELECT count(*) FROM moved) AS changed, (SELECT count(*) FROM woken) AS queues;

-- name: job_set_priority_matching
UPDATE __schema__.jobs AS j
SET priority = %(priority)s
WHERE j.id <= %(upto)s AND j.status = 'pending'
  AND __job_filter__
RETURNING j.id;

-- name: job_await
-- A waiter's mark (App.wait): the job's end will send a NOTIFY on `<schema>_ended`
-- (the jobs_status_changed trigger). Only an unfinished job is marked; none returned:
-- the job has ended, or is not in the table (the waiter reads which). The UPDATE waits
-- for a completion that holds the row, so no end slips between the mark and the read.
UPDATE __schema__.jobs SET awaited = true
WHERE id = %(id)s AND status IN ('pending', 'running', 'waiting')
RETURNING id;

-- name: job_ended_among
-- The waiters' fallback poll: which of these jobs are no longer unfinished in jobs
-- (ended, moved to the history, or deleted), in case their NOTIFY was missed.
SELECT w.id FROM unnest(%(ids)s::bigint[]) AS w(id)
WHERE NOT EXISTS (SELECT 1 FROM __schema__.jobs AS j
                  WHERE j.id = w.id AND j.status IN ('pending', 'running', 'waiting'));
