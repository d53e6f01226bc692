-- Expand only (docs/explanation/guarantees.md, "Rolling deploys"): a job's args are
-- checked once, when the job is written, not at every new version of its row. The
-- table's CHECK (jsonb_typeof(args) = 'object') ran at every update of a job, a claim,
-- a heartbeat, a completion, and read the whole value back from its TOAST table: some
-- 85 microseconds a row version for 96 kB of args. The insert trigger that wakes the
-- workers already reads the statement's new jobs (its transition table): it checks
-- their args too, and raises what the CHECK raised (check_violation,
-- jobs_args_is_object).
-- Nothing about a row or a result changes shape, so a previous release's prepared
-- statements run on as they were (a change of the column's type would not let them:
-- "cached plan must not change result type"). The drop takes jobs' ACCESS EXCLUSIVE
-- lock for a moment, and reads no row.

ALTER TABLE __schema__.jobs DROP CONSTRAINT jobs_args_is_object;

CREATE OR REPLACE FUNCTION __schema__.jobs_notify_inserted() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    queue_name text;
BEGIN
    -- A job's args are a JSON object (the handler's keyword arguments), checked here
    -- once for each new job of the statement (migration 26), where a CHECK of the table
    -- ran at every new version of a row (a claim, a heartbeat, a completion) and read
    -- large args back from their TOAST table each time. The same error as that CHECK's.
    IF EXISTS (SELECT 1 FROM inserted_jobs WHERE jsonb_typeof(args) <> 'object') THEN
        RAISE EXCEPTION 'new row for relation "%" violates check constraint '
            '"jobs_args_is_object"', TG_TABLE_NAME
            USING ERRCODE = 'check_violation', CONSTRAINT = 'jobs_args_is_object',
                  SCHEMA = TG_TABLE_SCHEMA, TABLE = TG_TABLE_NAME,
                  DETAIL = 'A job''s args must be a JSON object: its task''s keyword '
                           'arguments.';
    END IF;
    FOR queue_name IN
        SELECT DISTINCT queue FROM inserted_jobs WHERE run_at <= now()
    LOOP
        PERFORM pg_notify(TG_TABLE_SCHEMA || '_jobs', queue_name);
    END LOOP;
    RETURN NULL;
END;
$$;
