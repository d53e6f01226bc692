-- The schedules table (docs/explanation/schedules.md): periodic jobs defined in code or
-- at run time. __schema__ is replaced by the quoted schema name; %(name)s are bound
-- parameters. Fire times are computed by the client (pgbaton.cron) and passed in: cron
-- and time zones are Python's business, the table records the result. Every change of a
-- definition or of the pause raises `revision`, which fences the leader's progress.

-- name: schedule_insert
-- A run-time schedule; no row back when the name is taken.
INSERT INTO __schema__.schedules
    (name, cron, timezone, task, args, queue, priority, max_attempts, paused, catch_up,
     catch_up_limit, origin, last_tick, next_tick, updated_by)
VALUES (%(name)s, %(cron)s, %(timezone)s, %(task)s, %(args)s::jsonb, %(queue)s,
        %(priority)s, %(max_attempts)s, %(paused)s, %(catch_up)s, %(catch_up_limit)s,
        'database', %(now)s, %(next_tick)s, %(by)s)
ON CONFLICT (name) DO NOTHING
RETURNING *;

-- name: schedule_get
SELECT * FROM __schema__.schedules WHERE name = %(name)s;

-- name: schedule_list
-- Every schedule, with the status of its last job (NULL once that job is pruned).
SELECT s.*, j.status AS last_job_status
FROM __schema__.schedules AS s
LEFT JOIN __schema__.jobs AS j ON j.id = s.last_job_id
ORDER BY s.name;

-- name: schedule_task_named
-- Whether a schedule already names the task: without an App, the evidence that a task
-- name is not misspelt. (Not the jobs table: no index serves a task alone there.)
SELECT EXISTS (SELECT 1 FROM __schema__.schedules WHERE task = %(task)s) AS named;

-- name: schedule_update
-- An operator's change of a run-time schedule's definition, for the revision read:
-- no row back when another change came first, or the schedule is defined in code.
-- last_tick and next_tick come from the caller (moved to the change's time when the
-- cron or the zone changed, so the new expression's past ticks are not caught up).
UPDATE __schema__.schedules
SET cron = %(cron)s, timezone = %(timezone)s, task = %(task)s, args = %(args)s::jsonb,
    queue = %(queue)s, priority = %(priority)s, max_attempts = %(max_attempts)s,
    catch_up = %(catch_up)s, catch_up_limit = %(catch_up_limit)s,
    last_tick = %(last_tick)s, next_tick = %(next_tick)s,
    revision = revision + 1, updated_at = now(), updated_by = %(by)s
WHERE name = %(name)s AND revision = %(revision)s AND origin = 'database'
RETURNING *;

-- name: schedule_set_paused
-- Pause or resume, for the revision read. Resuming moves last_tick to now (given): a
-- pause does not end in a burst of the ticks it held back. The worker's sync of code
-- schedules leaves `paused` alone, so a pause survives restarts and deploys.
UPDATE __schema__.schedules
SET paused = %(paused)s,
    last_tick = CASE WHEN %(paused)s THEN last_tick ELSE %(now)s::timestamptz END,
    next_tick = CASE WHEN %(paused)s THEN next_tick ELSE %(next_tick)s::timestamptz END,
    revision = revision + 1, updated_at = now(), updated_by = %(by)s
WHERE name = %(name)s AND revision = %(revision)s
RETURNING *;

-- name: schedule_delete
-- A run-time schedule, or a code schedule its code no longer has; not one still in
-- the code (the next worker to start would write it back).
DELETE FROM __schema__.schedules
WHERE name = %(name)s AND (origin = 'database' OR missing_since IS NOT NULL)
RETURNING name, task, queue;

-- name: schedule_note_job
-- The job of a run_now, or of the newest tick enqueued.
UPDATE __schema__.schedules SET last_job_id = %(job_id)s
WHERE name = %(name)s
RETURNING name;

-- name: schedule_list_due
-- The leader's read at each run (schedules_due): the active schedules whose next tick
-- has passed, soonest first, but for those named in `passed` (rows this leader cannot
-- plan, a time zone its host does not know: left out so that they never fill the
-- limit and hold back the others).
SELECT * FROM __schema__.schedules
WHERE NOT paused AND missing_since IS NULL AND next_tick <= %(now)s
  AND NOT (name = ANY (%(passed)s::text[]))
ORDER BY next_tick
LIMIT %(limit)s;

-- name: schedule_revision_many
-- The leader's check of the rows it left out (schedule_list_due's `passed`): whether an
-- operator has changed them since.
SELECT name, revision FROM __schema__.schedules WHERE name = ANY (%(names)s::text[]);

-- name: schedule_lock_due_many
-- In the transaction that enqueues the ticks of a run's due schedules: the rows as the
-- leader read them, locked in name order (as schedule_sync_code writes them, so the
-- two never deadlock), leaving out each one an operator changed since (revision),
-- another leader advanced (last_tick), or that was paused, removed or found missing
-- from code. Returns the positions of those locked.
SELECT input.position
FROM unnest(%(names)s::text[], %(revisions)s::bigint[], %(last_ticks)s::timestamptz[])
     WITH ORDINALITY AS input(name, revision, last_tick, position)
JOIN __schema__.schedules AS s ON s.name = input.name
WHERE s.revision = input.revision
  AND s.last_tick IS NOT DISTINCT FROM input.last_tick
  AND NOT s.paused AND s.missing_since IS NULL
ORDER BY s.name
FOR UPDATE OF s;

-- name: schedule_advance_many
-- The leader's progress, in the transaction of the jobs it enqueued, under the locks of
-- schedule_lock_due_many.
UPDATE __schema__.schedules AS s
SET last_tick = input.last_tick, next_tick = input.next_tick,
    last_job_id = coalesce(input.last_job_id, s.last_job_id)
FROM unnest(%(names)s::text[], %(last_ticks)s::timestamptz[], %(next_ticks)s::timestamptz[],
            %(last_job_ids)s::bigint[]) AS input(name, last_tick, next_tick, last_job_id)
WHERE s.name = input.name
RETURNING s.name;

-- name: schedule_sync_code
-- A starting worker's @app.periodic schedules: inserted if new, their definition
-- replaced where the code changed it (revision raised only then), missing_since
-- cleared. `paused` is left alone. A run-time schedule of the same name is not touched
-- and its name comes back with taken = true. A new row starts from first_tick (ticks
-- of the handover window are enqueued, as a new leader does); a changed cron or zone
-- moves last_tick to now and next_tick to next_tick.
WITH input AS (
    SELECT *
    FROM unnest(%(names)s::text[], %(crons)s::text[], %(timezones)s::text[],
                %(tasks)s::text[], %(args)s::jsonb[], %(queues)s::text[],
                %(priorities)s::integer[], %(max_attempts)s::integer[],
                %(catch_ups)s::text[], %(catch_up_limits)s::integer[],
                %(first_ticks)s::timestamptz[], %(next_ticks)s::timestamptz[])
         WITH ORDINALITY AS i(name, cron, timezone, task, args, queue, priority,
                              max_attempts, catch_up, catch_up_limit, first_tick,
                              next_tick, position)
),
written AS (
    INSERT INTO __schema__.schedules AS s
        (name, cron, timezone, task, args, queue, priority, max_attempts, catch_up,
         catch_up_limit, origin, next_tick, updated_by)
    SELECT name, cron, timezone, task, args, queue, priority, max_attempts, catch_up,
           catch_up_limit, 'code', first_tick, %(by)s
    FROM input ORDER BY name  -- the leader's lock order (schedule_lock_due_many)
    ON CONFLICT (name) DO UPDATE SET
        cron = EXCLUDED.cron, timezone = EXCLUDED.timezone, task = EXCLUDED.task,
        args = EXCLUDED.args, queue = EXCLUDED.queue, priority = EXCLUDED.priority,
        max_attempts = EXCLUDED.max_attempts, catch_up = EXCLUDED.catch_up,
        catch_up_limit = EXCLUDED.catch_up_limit, missing_since = NULL,
        last_tick = CASE WHEN (s.cron, s.timezone)
                              IS DISTINCT FROM (EXCLUDED.cron, EXCLUDED.timezone)
                         THEN %(now)s::timestamptz ELSE s.last_tick END,
        next_tick = CASE WHEN (s.cron, s.timezone)
                              IS DISTINCT FROM (EXCLUDED.cron, EXCLUDED.timezone)
                         THEN (SELECT next_tick FROM input WHERE input.name = s.name)
                         ELSE s.next_tick END,
        revision = s.revision + CASE WHEN
            (s.cron, s.timezone, s.task, s.args, s.queue, s.priority, s.max_attempts,
             s.catch_up, s.catch_up_limit)
            IS DISTINCT FROM
            (EXCLUDED.cron, EXCLUDED.timezone, EXCLUDED.task, EXCLUDED.args,
             EXCLUDED.queue, EXCLUDED.priority, EXCLUDED.max_attempts,
             EXCLUDED.catch_up, EXCLUDED.catch_up_limit) THEN 1 ELSE 0 END,
        updated_at = now(), updated_by = EXCLUDED.updated_by
    WHERE s.origin = 'code'
    RETURNING s.name, s.revision
)
SELECT input.name, written.name IS NULL AS taken
FROM input LEFT JOIN written ON written.name = input.name
ORDER BY input.position;

-- name: schedule_mark_missing
-- The code schedules the starting worker's code lacks: missing from now, unless they
-- were already (their grace counts from the first worker that found them gone).
UPDATE __schema__.schedules
SET missing_since = %(now)s
WHERE origin = 'code' AND missing_since IS NULL AND NOT (name = ANY (%(names)s::text[]))
RETURNING name, task, queue;

-- name: schedule_delete_missing
-- The leader's clean-up: code schedules missing from code for longer than the grace.
DELETE FROM __schema__.schedules
WHERE origin = 'code' AND missing_since < %(before)s
RETURNING name, task, queue;
