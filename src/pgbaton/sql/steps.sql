-- Durable steps, durable sleep and events (docs/howto/durable-steps.md; the tables are
-- job_steps and job_events, migration 18). Every write of a running job's handler is
-- fenced by its claim token and status, as the worker's other writes are: the `held`
-- step of each statement is the fence. What adds a job's first rows (its first step,
-- its first suspension, an event sent to it) marks it as one with steps (its delete
-- then removes them).

-- name: job_steps_get
-- A job's steps in the order its handler reached them: read once per run, at the
-- handler's first step, sleep or wait (a job without steps never reads it), and by the
-- job page and `pgbaton show`.
SELECT seq, name, kind, result, until, started_at, finished_at, size
FROM __schema__.job_steps
WHERE job_id = %(id)s
ORDER BY seq;

-- name: job_step_store
-- A step's function returned: its result is stored, alone in its transaction. Nothing
-- is written when the claim is lost (no row returned). The job's row is locked FOR
-- SHARE, which a reap or a cancel waits for (and then finds it changed), and written
-- only at the job's first step: a step adds no row version to jobs.
WITH held AS (
    SELECT j.id, j.has_steps FROM __schema__.jobs AS j
    WHERE j.id = %(id)s AND j.claim_token = %(token)s AND j.status = 'running'
    FOR SHARE
),
marked AS (
    UPDATE __schema__.jobs AS j SET has_steps = true
    FROM held
    WHERE j.id = held.id AND NOT held.has_steps
)
INSERT INTO __schema__.job_steps
    (job_id, seq, name, kind, result, started_at, finished_at, size)
SELECT held.id, %(seq)s, %(name)s, 'step', %(result)s::jsonb,
       now() - make_interval(secs => %(seconds)s::float8), now(), %(size)s
FROM held
RETURNING seq;

-- name: job_step_suspend
-- The handler sleeps or waits: the job goes back to pending, due at the wake time, its
-- attempt given back (the claim counted it; a suspension is not a failure) and its
-- claim released; the slot, the connection and the lease are free until then. The
-- sleep's or wait's row is written on the first suspension; a later one (a job woken
-- early) keeps its wake time. `until` is the wake time (NULL: `seconds` from now; for
-- a wait without timeout, 'infinity' is not used: the job is due in year 9999).
-- Runs in one transaction with job_event_wake.
WITH suspended AS (
    UPDATE __schema__.jobs AS j
    SET status        = 'pending',
        claim_token   = NULL,
        lease_until   = NULL,
        attempts      = j.attempts - 1,
        worker_id     = NULL,
        started_at    = NULL,
        -- A job started from the jobs ahead and suspended before its start was recorded
        -- gives back its claim's hold, as a release does (job_release_many).
        holds         = CASE WHEN j.started_at IS NULL THEN greatest(j.holds - 1, 0)
                             ELSE j.holds END,
        has_steps     = true,
        waiting_event = %(event)s,
        run_at        = coalesce(%(until)s::timestamptz,
                                 now() + make_interval(secs => %(seconds)s::float8))
    WHERE j.id = %(id)s AND j.claim_token = %(token)s AND j.status = 'running'
    RETURNING j.id, j.run_at
),
step AS (
    INSERT INTO __schema__.job_steps (job_id, seq, name, kind, until)
    SELECT suspended.id, %(seq)s, %(name)s, %(kind)s,
           CASE WHEN %(deadline)s THEN suspended.run_at END
    FROM suspended
    ON CONFLICT (job_id, seq) DO NOTHING
)
SELECT run_at FROM suspended;

-- name: job_event_wake
-- After job_step_suspend, in its transaction: the event it waits for was sent before
-- (or while) it suspended, so it is due now. A new statement, so it sees an event whose
-- sender held the job's row until its commit (send_event locks it first).
WITH woken AS (
    UPDATE __schema__.jobs AS j
    SET run_at = now()
    WHERE j.id = %(id)s AND j.status = 'pending' AND j.claim_token IS NULL
      AND j.waiting_event = %(event)s
      AND EXISTS (SELECT 1 FROM __schema__.job_events AS e
                  WHERE e.job_id = j.id AND e.name = %(event)s)
    RETURNING j.id, j.queue
)
SELECT woken.id, pg_notify(%(channel)s, woken.queue) FROM woken;

-- name: job_event_take
-- The handler waits for an event: the oldest of its name sent to the job is taken (and
-- deleted) and stored as the wait's result, in one statement. No row: none was sent.
-- The job's row is only locked, as job_step_store locks it: send_event marked it as one
-- with steps already, and its claim cleared waiting_event (migration 22).
WITH held AS (
    SELECT j.id FROM __schema__.jobs AS j
    WHERE j.id = %(id)s AND j.claim_token = %(token)s AND j.status = 'running'
    FOR SHARE
),
taken AS (
    DELETE FROM __schema__.job_events AS e
    WHERE e.id = (SELECT first.id FROM __schema__.job_events AS first
                  JOIN held ON first.job_id = held.id
                  WHERE first.name = %(event)s
                  ORDER BY first.id LIMIT 1)
    RETURNING e.job_id, jsonb_build_object('payload', e.payload) AS result
),
stored AS (
    INSERT INTO __schema__.job_steps
        (job_id, seq, name, kind, result, finished_at, size)
    SELECT taken.job_id, %(seq)s, %(name)s, 'event', taken.result, now(),
           octet_length(taken.result::text)
    FROM taken
    ON CONFLICT (job_id, seq) DO UPDATE
        SET result = excluded.result, finished_at = excluded.finished_at,
            size = excluded.size
    RETURNING job_steps.result
)
SELECT result FROM stored;

-- name: job_step_pass
-- A later run reaches a sleep whose wake time has come, or a wait whose deadline has
-- passed with no event: the row is finished (a wait's with {"timed_out": true}). No
-- row: the time has not come (the job was woken early), and it suspends again. The
-- job's row is only locked: its claim cleared waiting_event (migration 22).
WITH held AS (
    SELECT j.id FROM __schema__.jobs AS j
    WHERE j.id = %(id)s AND j.claim_token = %(token)s AND j.status = 'running'
    FOR SHARE
)
UPDATE __schema__.job_steps AS s
SET finished_at = now(), result = %(result)s::jsonb,
    size = octet_length(%(result)s::jsonb::text)
FROM held
WHERE s.job_id = held.id AND s.seq = %(seq)s AND s.finished_at IS NULL
  AND s.until <= now()
RETURNING s.seq;

-- name: job_event_send
SELECT __schema__.send_event(%(id)s, %(event)s, %(payload)s::jsonb) AS woken;

-- name: job_event_send_by_key
SELECT __schema__.send_event_by_key(%(key)s, %(event)s, %(payload)s::jsonb) AS ids;
