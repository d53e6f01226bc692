-- Expand only (docs/explanation/guarantees.md, "Rolling deploys"): a job's args are
-- checked where they are written, not at every new version of the row. The table's
-- CHECK (jsonb_typeof(args) = 'object') ran at every update of a job, a claim, a
-- heartbeat, a completion, and read the whole value back from its TOAST table: some
-- 85 µs a row version for 96 kB of args. The domain job_args holds the same check
-- under the same name, and a domain's check runs where a value is written (an insert,
-- a COPY, an update of args) and nowhere else.
--
-- Neither jobs nor jobs_history is rewritten or read: the domain gets its column
-- while it has no check (a type binary-equal to jsonb), and its check is added NOT
-- VALID, the rows in place having passed the table's CHECK that this drops. ALTER
-- TABLE takes jobs' ACCESS EXCLUSIVE lock for the change of type, a moment's work.
-- The flow claim's RETURN QUERY wants its declared jsonb, not the domain: its body
-- casts args (the previous release's seven-argument call is this body's too).

CREATE DOMAIN __schema__.job_args AS jsonb;

ALTER TABLE __schema__.jobs ALTER COLUMN args TYPE __schema__.job_args;
ALTER TABLE __schema__.jobs_history ALTER COLUMN args TYPE __schema__.job_args;
ALTER TABLE __schema__.jobs DROP CONSTRAINT jobs_args_is_object;
ALTER DOMAIN __schema__.job_args
    ADD CONSTRAINT jobs_args_is_object CHECK (jsonb_typeof(VALUE) = 'object') NOT VALID;

CREATE OR REPLACE FUNCTION __schema__.job_claim_flow(
    worker text, wanted integer, lease float8, only_queues text[], only_tasks text[],
    finished uuid[], starting integer, after jsonb)
RETURNS TABLE (id bigint, claim_token uuid, attempts integer, max_attempts integer,
               task text, args jsonb, key text, queue text, priority integer,
               run_at timestamptz, lease_until timestamptz, idempotency_key text,
               created_at timestamptz, next_slot_at timestamptz, meta jsonb,
               started boolean)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    clock timestamptz;
    serving text[];
    rated integer;
    marked text[];
BEGIN
    -- As job_claim_many, the commit need not wait for the disk: a claim lost in a crash
    -- is what an expired lease is anyway. The flow lock, shared with every other claim;
    -- a change of settings (queue_set_paused, queue_set_limits) takes it alone, so it
    -- commits only once the claims that began before it have, and the claims after it
    -- see it. Its own statement: the next one's snapshot must come after it.
    -- And no JIT for this transaction: a claim reads a handful of rows, and compiling
    -- its plans (when a generic plan's estimate passes jit_above_cost, as behind
    -- 100,000 blocked jobs) costs tens of milliseconds. Set here, before the statements
    -- below are first planned, rather than as the function's SET clause, which costs a
    -- quarter of a millisecond per call.
    PERFORM set_config('synchronous_commit', 'off', true), set_config('jit', 'off', true),
            pg_advisory_xact_lock_shared(hashtext('pgbaton.flow'),
                ('__schema__.queues'::regclass::oid::bigint - 2147483648)::integer);
    -- Name order, so two claims never wait for each other in a circle.
    SELECT count(*) FILTER (WHERE locked.rated), clock_timestamp()
    INTO rated, clock
    FROM (SELECT q.rate_limit IS NOT NULL OR q.key_rate_limit IS NOT NULL AS rated
          FROM __schema__.queues AS q
          WHERE NOT q.paused
            AND (q.concurrency IS NOT NULL OR q.rate_limit IS NOT NULL
                 OR q.key_concurrency IS NOT NULL OR q.key_rate_limit IS NOT NULL)
            AND (only_queues IS NULL OR q.name = ANY(only_queues))
          ORDER BY q.name
          FOR NO KEY UPDATE) AS locked;

    IF only_queues IS NULL THEN
        -- The queues that have pending jobs: one index descent per queue. A queue with
        -- a mark (`after`, below) is served without one: the descent to its first
        -- pending job would read its dead head, the walk its mark is there to spare.
        -- So each descent stops short of the next marked queue, which comes next if
        -- nothing pending lies between (migration 24).
        marked := ARRAY(SELECT m.name FROM jsonb_object_keys(after -> 'queues') AS m(name)
                        ORDER BY m.name);
        serving := ARRAY(
            WITH RECURSIVE pending_queue(name) AS (
                SELECT CASE WHEN marked[1] IS NULL THEN
                    (SELECT j.queue FROM __schema__.jobs AS j
                     WHERE j.status = 'pending' AND j.queue <> '' ORDER BY j.queue LIMIT 1)
                ELSE coalesce(
                    (SELECT j.queue FROM __schema__.jobs AS j
                     WHERE j.status = 'pending' AND j.queue <> '' AND j.queue < marked[1]
                     ORDER BY j.queue LIMIT 1), marked[1]) END
                UNION ALL
                SELECT CASE WHEN n.mark IS NULL THEN
                    (SELECT j.queue FROM __schema__.jobs AS j
                     WHERE j.status = 'pending' AND j.queue <> ''
                       AND j.queue > p.name
                     ORDER BY j.queue LIMIT 1)
                ELSE coalesce(
                    (SELECT j.queue FROM __schema__.jobs AS j
                     WHERE j.status = 'pending' AND j.queue <> ''
                       AND j.queue > p.name AND j.queue < n.mark
                     ORDER BY j.queue LIMIT 1), n.mark) END
                FROM pending_queue AS p
                CROSS JOIN LATERAL (SELECT min(m.name) AS mark FROM unnest(marked) AS m(name)
                                    WHERE m.name > p.name) AS n
                WHERE p.name IS NOT NULL
            )
            SELECT p.name FROM pending_queue AS p WHERE p.name IS NOT NULL);
    ELSE
        serving := only_queues;
    END IF;

    -- The starts log keeps each rate-limited queue's last rate_limit starts, however
    -- old, besides every start inside the windows (migration 10): a window of R per P
    -- holds at most the last R starts, so a window widened later still counts the
    -- starts made before it was widened, and the limit is never passed
    -- (docs/flow_control.md, "Changing a rate"). Pruned by age alone, a queue at 10/1s
    -- set to 10/20s started 24 jobs in one 20 s window. kept_from: the queue's R-th
    -- latest start, read once per queue from queue_starts_window (NULL while it has
    -- fewer, which keeps them all). A key rate's starts are pruned by its own window's
    -- age: keeping the last R of every key that ever started would grow with the keys.
    IF rated > 0 THEN
        DELETE FROM __schema__.queue_starts AS s
        USING __schema__.queues AS q
        CROSS JOIN LATERAL (
            SELECT (SELECT st.started_at FROM __schema__.queue_starts AS st
                    WHERE st.queue = q.name
                    ORDER BY st.started_at DESC
                    OFFSET greatest(q.rate_limit - 1, 0) LIMIT 1) AS kept_from
        ) AS cut
        WHERE s.queue = q.name AND q.name = ANY(serving) AND NOT q.paused
          AND (q.rate_limit IS NOT NULL OR q.key_rate_limit IS NOT NULL)
          AND s.started_at <= clock - coalesce(q.key_rate_period, interval '0')
          AND (q.rate_limit IS NULL
               OR (s.started_at <= clock - q.rate_period AND s.started_at < cut.kept_from));
    END IF;

    RETURN QUERY
    WITH allowance AS (
        SELECT s.name,
               -- A queue with no concurrency limit counts nothing (migration 24): the
               -- count with no LIMIT read every held job of the queue, and under a held
               -- xmin every dead entry of jobs_held that its claimed jobs left behind.
               least(wanted,
                     CASE WHEN q.concurrency IS NOT NULL THEN q.concurrency - (
                         SELECT count(*) FROM (
                             SELECT 1 FROM __schema__.jobs AS h
                             WHERE h.queue = s.name AND h.queue <> ''
                               AND h.lease_until IS NOT NULL
                               AND (finished IS NULL OR h.claim_token <> ALL(finished))
                             LIMIT q.concurrency) AS held) END,
                     q.rate_limit - (
                         SELECT count(*) FROM __schema__.queue_starts AS st
                         WHERE st.queue = s.name
                           AND st.started_at > clock - q.rate_period)) AS room,
               q.key_concurrency, q.key_rate_limit, q.key_rate_period
        FROM (SELECT DISTINCT u.name FROM unnest(serving) AS u(name)) AS s
        LEFT JOIN __schema__.queues AS q ON q.name = s.name
        WHERE NOT coalesce(q.paused, false)
    ),
    candidate AS (
        SELECT c.id, c.priority, c.run_at,
               -- Per-key limits: at most one job of a limit key per claim, so that the
               -- counts below (taken under the queue's lock) stay exact.
               row_number() OVER (
                   PARTITION BY a.name, CASE WHEN a.key_concurrency IS NOT NULL
                                               OR a.key_rate_limit IS NOT NULL
                                             THEN c.limit_key END,
                                CASE WHEN c.limit_key IS NULL
                                       OR (a.key_concurrency IS NULL
                                           AND a.key_rate_limit IS NULL)
                                     THEN c.id END
                   ORDER BY c.priority DESC, c.run_at, c.id) AS of_key
        FROM allowance AS a
        -- Past the queue's mark (`after`: {"queues": {name: [priority, run_at, id]}},
        -- the last job this worker's flow claim took from the queue, migration 24), as
        -- job_claim_many's named arm: the higher priorities from their head, the mark's
        -- priority after the mark, then the lower ones, each read only as far as the
        -- room needs, so no row is locked that the room could not take. No mark: the
        -- queue's whole range, from its head.
        CROSS JOIN LATERAL (
            SELECT c.id, c.priority, c.run_at, c.limit_key
            FROM (SELECT after -> 'queues' -> a.name AS m) AS mark
            CROSS JOIN LATERAL (VALUES
                ((mark.m ->> 0)::bigint + 1, 2147483647::bigint, '-infinity'::timestamptz,
                 0::bigint),
                ((mark.m ->> 0)::bigint, (mark.m ->> 0)::bigint, (mark.m ->> 1)::timestamptz,
                 (mark.m ->> 2)::bigint),
                (-2147483648::bigint, coalesce((mark.m ->> 0)::bigint - 1, 2147483647),
                 '-infinity'::timestamptz, 0::bigint)
            ) AS part(low, high, after_run_at, after_id)
            CROSS JOIN LATERAL (
                SELECT c.id, c.priority, c.run_at, c.limit_key
                FROM __schema__.jobs AS c
                WHERE c.queue = a.name AND c.queue <> ''
                  AND c.status = 'pending'
                  AND c.run_at <= clock
                  AND c.priority >= part.low AND c.priority <= part.high
                  AND (c.run_at, c.id) > (part.after_run_at, part.after_id)
                  AND (only_tasks IS NULL OR c.task = ANY(only_tasks))
                  -- The four per-key probes of job_claim_many.
                  AND (c.key IS NULL OR (
                        NOT EXISTS (
                            SELECT 1 FROM __schema__.jobs AS running
                            WHERE running.key = c.key AND running.status = 'running'
                              AND running.key IS NOT NULL)
                        AND NOT EXISTS (
                            SELECT 1 FROM __schema__.jobs AS held
                            WHERE held.key = c.key AND held.lease_until > clock
                              AND held.key IS NOT NULL AND held.claim_token IS NOT NULL
                              AND held.status IN ('cancelled', 'pending'))
                        AND NOT EXISTS (
                            SELECT 1 FROM __schema__.jobs AS older
                            WHERE older.key = c.key AND older.status = 'pending'
                              AND older.id < c.id)
                        AND NOT EXISTS (
                            SELECT 1 FROM __schema__.jobs AS parked
                            WHERE parked.key = c.key AND parked.status = 'waiting'
                              AND parked.key IS NOT NULL
                              AND parked.id < c.id)))
                  -- A job of a limit key whose own limits are reached waits (and is read
                  -- past: per-key limits do not have the queue limits' index shortcut).
                  AND (c.limit_key IS NULL OR a.key_concurrency IS NULL OR (
                        SELECT count(*) FROM (
                            SELECT 1 FROM __schema__.jobs AS k
                            WHERE k.queue = c.queue AND k.limit_key = c.limit_key
                              AND k.lease_until IS NOT NULL AND k.limit_key IS NOT NULL
                              AND k.queue <> ''
                              AND (finished IS NULL OR k.claim_token <> ALL(finished))
                            LIMIT a.key_concurrency) AS held_of_key) < a.key_concurrency)
                  AND (c.limit_key IS NULL OR a.key_rate_limit IS NULL OR (
                        SELECT count(*) FROM __schema__.queue_starts AS ks
                        WHERE ks.queue = c.queue AND ks.limit_key = c.limit_key
                          AND ks.limit_key IS NOT NULL
                          AND ks.started_at > clock - a.key_rate_period) < a.key_rate_limit)
                ORDER BY c.priority DESC, c.run_at, c.id
                LIMIT greatest(a.room, 0)
                FOR UPDATE SKIP LOCKED
            ) AS c
            WHERE part.low IS NOT NULL
            LIMIT greatest(a.room, 0)
        ) AS c
        WHERE a.room > 0
    ),
    picked AS (
        SELECT candidate.id,
               row_number() OVER (ORDER BY candidate.priority DESC, candidate.run_at,
                                           candidate.id) AS place
        FROM candidate
        WHERE candidate.of_key = 1
        ORDER BY candidate.priority DESC, candidate.run_at, candidate.id
        LIMIT wanted
    ),
    claimed AS (
        UPDATE __schema__.jobs AS j
        -- The start is dated after this statement's snapshot, so a job that finished
        -- before it (and made the room) never seems to overlap it.
        SET status      = 'running',
            claim_token = gen_random_uuid(),
            lease_until = clock_timestamp() + make_interval(secs => lease),
            attempts    = j.attempts + 1,
            worker_id   = worker,
            waiting_event = NULL,  -- woken: no longer waiting (migration 22)
            -- A job held ahead 3 times by workers that died holding it starts at its
            -- claim (migration 21): its next death spends an attempt.
            started_at  = CASE WHEN picked.place <= starting OR j.holds >= 3
                               THEN clock_timestamp() END,
            holds       = j.holds + CASE WHEN picked.place <= starting OR j.holds >= 3
                                         THEN 0 ELSE 1 END
        FROM picked
        WHERE j.id = picked.id
        RETURNING j.id, j.claim_token, j.attempts, j.max_attempts, j.task, j.args, j.key,
                  j.queue, j.priority, j.run_at, j.lease_until, j.idempotency_key,
                  j.created_at, j.started_at, j.limit_key,
                  -- Migration 6's column: this release applies 4 to 6 together.
                  j.meta
    ),
    -- Each start is logged at its own time, later than the clock the window was counted
    -- at: no claim of the queue can come between (this one holds its lock), so every
    -- window ending at this start holds only what was counted, and this. A job claimed
    -- ahead counts as started at its claim.
    logged AS (
        INSERT INTO __schema__.queue_starts (queue, started_at, limit_key)
        SELECT c.queue, coalesce(c.started_at, clock_timestamp()), c.limit_key
        FROM claimed AS c JOIN __schema__.queues AS q ON q.name = c.queue
        WHERE q.rate_limit IS NOT NULL OR q.key_rate_limit IS NOT NULL
    )
    -- args::jsonb: RETURN QUERY wants the declared type itself, not its domain.
    SELECT c.id, c.claim_token, c.attempts, c.max_attempts, c.task, c.args::jsonb, c.key,
           c.queue, c.priority, c.run_at, c.lease_until, c.idempotency_key, c.created_at,
           NULL::timestamptz, c.meta, c.started_at IS NOT NULL
    FROM claimed AS c
    ORDER BY c.priority DESC, c.run_at, c.id;

    IF rated = 0 THEN
        RETURN;
    END IF;
    -- One more row, with no job, when a rate-limited queue is full: when its oldest
    -- start leaves the window, so the worker sleeps until then instead of polling.
    RETURN QUERY
    SELECT NULL::bigint, NULL::uuid, NULL::integer, NULL::integer, NULL::text,
           NULL::jsonb, NULL::text, NULL::text, NULL::integer, NULL::timestamptz,
           NULL::timestamptz, NULL::text, NULL::timestamptz,
           min(w.oldest + q.rate_period), NULL::jsonb, NULL::boolean
    FROM __schema__.queues AS q
    CROSS JOIN LATERAL (
        SELECT min(st.started_at) AS oldest, count(*) AS starts
        FROM __schema__.queue_starts AS st
        WHERE st.queue = q.name AND st.started_at > clock - q.rate_period) AS w
    WHERE q.name = ANY(serving) AND NOT q.paused AND q.rate_limit IS NOT NULL
      AND w.starts >= q.rate_limit
    HAVING min(w.oldest + q.rate_period) IS NOT NULL;
END;
$$;
