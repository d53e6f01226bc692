-- Expand only (docs/explanation/guarantees.md, "Rolling deploys"): a running job that
-- is cancelled tells the workers at once, on `<schema>_cancelled`, its id the payload.
-- The worker that holds it checks its claim with its fenced heartbeat and stops the
-- handler now (a job claimed ahead: before it starts) instead of at its next heartbeat.
-- A handler's own Cancel (job_end_many, which clears the token) sends nothing.
-- A previous release's workers do not listen and learn at their next heartbeat, as
-- before; no statement of theirs changes. Creating the trigger takes jobs' SHARE ROW
-- EXCLUSIVE lock for a moment and reads no row.

CREATE FUNCTION __schema__.jobs_notify_cancelled() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify(TG_TABLE_SCHEMA || '_cancelled', NEW.id::text);
    RETURN NULL;
END;
$$;

CREATE TRIGGER jobs_notify_cancelled
    AFTER UPDATE OF status ON __schema__.jobs
    FOR EACH ROW
    WHEN (OLD.status = 'running' AND NEW.status = 'cancelled'
          AND NEW.claim_token IS NOT NULL)
    EXECUTE FUNCTION __schema__.jobs_notify_cancelled();
