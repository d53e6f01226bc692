-- Expand only (docs/guarantees.md, "Rolling deploys"): jobs.waiting_event (migration
-- 18) names the event a suspended job waits for, and only while it waits. A job that
-- leaves pending leaves it: claimed (woken by its event, its timeout or an operator's
-- run-now), cancelled, or ended by any other path, present or future. One rule in one
-- place, kept by the database, instead of a clause in every statement that moves a job.
-- The trigger fires only on an UPDATE that sets status, and its WHEN keeps the function
-- off every job that waits for no event: an ordinary job pays a test of a NULL.
CREATE FUNCTION __schema__.jobs_waiting_event_cleared() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    NEW.waiting_event := NULL;
    RETURN NEW;
END;
$$;

CREATE TRIGGER jobs_waiting_event_cleared
    BEFORE UPDATE OF status ON __schema__.jobs
    FOR EACH ROW
    WHEN (NEW.waiting_event IS NOT NULL AND NEW.status <> 'pending')
    EXECUTE FUNCTION __schema__.jobs_waiting_event_cleared();

-- Rows a job left with it before: at most the jobs that ever waited for an event.
UPDATE __schema__.jobs SET waiting_event = NULL
WHERE waiting_event IS NOT NULL AND status <> 'pending';
