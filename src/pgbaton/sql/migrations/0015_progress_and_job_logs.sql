-- Progress and each job's own log lines (docs/howto/progress-and-logs.md).
-- Expand only: the previous release never reads or writes the new columns or table,
-- and its deletes of jobs take the logs with them through the trigger below.

-- How far a running job is, as its handler last said (ctx.progress), written by the
-- worker's progress flush fenced by the claim token; kept when the job ends.
ALTER TABLE __schema__.jobs
    ADD COLUMN progress      real,
    ADD COLUMN progress_note text,
    ADD COLUMN progress_at   timestamptz;

-- jobs_history was made LIKE jobs; the mover copies rows with SELECT *.
ALTER TABLE __schema__.jobs_history
    ADD COLUMN progress      real,
    ADD COLUMN progress_note text,
    ADD COLUMN progress_at   timestamptz;

-- What a handler logged during one attempt: one row per attempt, its lines a jsonb
-- array of {"at", "level", "logger", "message"}, at most MAX_JOB_LOG_LINES lines and
-- MAX_JOB_LOG_BYTES of text (limits.py); `dropped` counts the lines that did not fit.
-- The completer writes a batch's rows in one statement (job_logs_insert_many). No
-- foreign key: its check would lock each job's row for every insert; the trigger below
-- and the history drop (history.sql) delete the logs with their job instead.
CREATE TABLE __schema__.job_logs (
    job_id     bigint      NOT NULL,
    attempt    integer     NOT NULL,
    lines      jsonb       NOT NULL,
    dropped    integer     NOT NULL DEFAULT 0,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (job_id, attempt)
);

-- Logs leave with their job, whichever statement deleted it (the pruner, an operator,
-- a queue's delete), except a job the history mode moved to jobs_history in the same
-- statement (job_archive): its logs stay until its partition is dropped. One run per
-- deleting statement; the join reads job_logs by its primary key, and jobs_history only
-- for a deleted job that had logs.
CREATE FUNCTION __schema__.job_logs_follow_delete() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM __schema__.job_logs AS l
    USING deleted_jobs AS d
    WHERE l.job_id = d.id
      AND NOT EXISTS (SELECT 1 FROM __schema__.jobs_history AS h WHERE h.id = d.id);
    RETURN NULL;
END;
$$;

CREATE TRIGGER job_logs_follow_delete
    AFTER DELETE ON __schema__.jobs
    REFERENCING OLD TABLE AS deleted_jobs
    FOR EACH STATEMENT EXECUTE FUNCTION __schema__.job_logs_follow_delete();
