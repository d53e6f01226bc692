-- Schedules stored in the database (docs/schedules.md): each row a cron expression in
-- a time zone and the job it enqueues at each tick, written by workers from
-- @app.periodic (origin 'code') or at run time (origin 'database').
-- Expand only: the previous release never reads or writes this table.

CREATE TABLE __schema__.schedules (
    name           text        PRIMARY KEY,
    cron           text        NOT NULL,
    timezone       text        NOT NULL DEFAULT 'UTC',
    task           text        NOT NULL,
    args           jsonb       NOT NULL DEFAULT '{}',
    -- NULL: the task's own (its @app.task queue and max_attempts, priority 0).
    queue          text,
    priority       integer,
    max_attempts   integer,
    paused         boolean     NOT NULL DEFAULT false,
    catch_up       text        NOT NULL DEFAULT 'skip',
    catch_up_limit integer     NOT NULL DEFAULT 100,
    origin         text        NOT NULL DEFAULT 'database',
    -- The newest tick the leader dealt with (enqueued or skipped); NULL: none yet.
    last_tick      timestamptz,
    last_job_id    bigint,
    -- The next fire time: the leader reads the rows whose next_tick has passed.
    next_tick      timestamptz NOT NULL,
    -- A code schedule that the code of a starting worker no longer has.
    missing_since  timestamptz,
    created_at     timestamptz NOT NULL DEFAULT now(),
    updated_at     timestamptz NOT NULL DEFAULT now(),
    updated_by     text,
    -- Grows with each change of the definition or the pause: fences the leader's
    -- progress, which it writes only for the revision it read.
    revision       bigint      NOT NULL DEFAULT 1,
    CONSTRAINT schedules_catch_up_known CHECK (catch_up IN ('skip', 'latest', 'all')),
    CONSTRAINT schedules_catch_up_limit_positive CHECK (catch_up_limit >= 1),
    CONSTRAINT schedules_origin_known CHECK (origin IN ('code', 'database')),
    CONSTRAINT schedules_args_object CHECK (jsonb_typeof(args) = 'object')
);

-- The leader's read at each run: the active schedules due now, soonest first.
CREATE INDEX schedules_due ON __schema__.schedules (next_tick)
    WHERE NOT paused AND missing_since IS NULL;
