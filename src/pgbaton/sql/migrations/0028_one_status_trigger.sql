-- Expand only (docs/explanation/guarantees.md, "Rolling deploys"): one row trigger hears
-- a job's change of status where three did (jobs_ended's update, jobs_notify_cancelled,
-- jobs_notify_ended), each with a WHEN of its own that PostgreSQL parsed again at every
-- statement and tested on every row, so every claim and completion paid for all three
-- (docs/explanation/performance.md, "The claim's work a job, counted"). Its WHEN reads
-- only the new row, its cheapest columns first; the function does what the three did,
-- in their order (jobs_ended, then the cancel, then the end), for the few jobs it lets
-- through (an awaited job, or one with dependents or a batch, calls it at each change of
-- status, a claim too, for nothing but at its end). No statement of the previous release
-- changes. Replacing the triggers reads no row, but DROP TRIGGER takes jobs' ACCESS
-- EXCLUSIVE lock for a moment: it waits for every open transaction that used jobs.

CREATE FUNCTION __schema__.jobs_status_changed() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    ended_before constant boolean := OLD.status IN ('done', 'failed', 'cancelled');
    ended_now constant boolean := NEW.status IN ('done', 'failed', 'cancelled');
BEGIN
    -- A job with dependents or a batch crossed between unfinished and finished: release
    -- its children and count it in its batch, or take back its count (a retry).
    IF (NEW.has_dependents OR NEW.batch_id IS NOT NULL) AND ended_before <> ended_now THEN
        IF ended_now THEN
            IF NEW.has_dependents THEN
                PERFORM __schema__.jobs_release_children(NEW.id, NEW.task, NEW.status, NULL,
                                                         TG_TABLE_SCHEMA || '_jobs');
            END IF;
            IF NEW.batch_id IS NOT NULL THEN
                PERFORM __schema__.batches_count(NEW.batch_id, NEW.status, true);
            END IF;
        ELSIF NEW.batch_id IS NOT NULL THEN
            -- A retry of an ended member: its end no longer counts (unless the batch
            -- finished).
            PERFORM __schema__.batches_count(NEW.batch_id, OLD.status, false);
        END IF;
    END IF;
    -- A running job cancelled (by anything but its handler's own Cancel, which clears
    -- the token): its worker hears it at once, on `<schema>_cancelled`.
    IF OLD.status = 'running' AND NEW.status = 'cancelled' AND NEW.claim_token IS NOT NULL THEN
        PERFORM pg_notify(TG_TABLE_SCHEMA || '_cancelled', NEW.id::text);
    END IF;
    -- An awaited job ended: its waiters hear it, on `<schema>_ended`.
    IF NEW.awaited AND ended_now AND NOT ended_before THEN
        PERFORM pg_notify(TG_TABLE_SCHEMA || '_ended', NEW.id::text);
    END IF;
    RETURN NULL;
END;
$$;

DROP TRIGGER jobs_ended ON __schema__.jobs;
DROP TRIGGER jobs_notify_cancelled ON __schema__.jobs;
DROP TRIGGER jobs_notify_ended ON __schema__.jobs;
DROP FUNCTION __schema__.jobs_notify_cancelled();

CREATE TRIGGER jobs_status_changed
    AFTER UPDATE OF status ON __schema__.jobs
    FOR EACH ROW
    WHEN (NEW.has_dependents OR NEW.awaited OR NEW.batch_id IS NOT NULL
          OR (NEW.status = 'cancelled' AND NEW.claim_token IS NOT NULL))
    EXECUTE FUNCTION __schema__.jobs_status_changed();

-- jobs_ended keeps only the delete's part (jobs_ended_by_delete).
CREATE OR REPLACE FUNCTION __schema__.jobs_ended() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF OLD.status NOT IN ('done', 'failed', 'cancelled') THEN
        IF OLD.has_dependents THEN
            PERFORM __schema__.jobs_release_children(OLD.id, OLD.task, 'deleted', NULL,
                                                     TG_TABLE_SCHEMA || '_jobs');
        END IF;
        IF OLD.batch_id IS NOT NULL THEN
            PERFORM __schema__.batches_count(OLD.batch_id, 'deleted', true);
        END IF;
    END IF;
    IF OLD.has_dependents THEN
        DELETE FROM __schema__.job_dependencies WHERE parent_id = OLD.id;
    END IF;
    RETURN NULL;
END;
$$;

-- jobs_notify_ended serves only jobs_notify_ended_by_delete now: the deleted row's id.
CREATE OR REPLACE FUNCTION __schema__.jobs_notify_ended() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify(TG_TABLE_SCHEMA || '_ended', OLD.id::text);
    RETURN NULL;
END;
$$;
