-- Expand only (docs/guarantees.md, "Rolling deploys"), and no BEFORE ROW UPDATE trigger
-- on jobs. PostgreSQL locks the row for such a trigger (ExecBRUpdateTriggers,
-- GetTupleForTrigger) before it tests the trigger's WHEN or column list, so every
-- update of a job (each completion, heartbeat, start, progress write) paid a heap lock
-- and its WAL record, though the WHEN was false for nearly all of them
-- (docs/performance.md, "No BEFORE row trigger on jobs"). The two rules those triggers
-- kept are kept by the statements instead, and the first by the database too:
--
-- - waiting_event is set only while a job is pending (migration 20's trigger cleared it
--   when a job left pending): every statement that moves a job out of pending (the two
--   claims, the two cancels) sets it NULL, and a CHECK refuses any other, present or
--   future. The trigger kept the rule since migration 20, so no row breaks it.
-- - A retried job with parents waits again while one of them has not finished
--   (migration 5's jobs_wait_again): job_retry and job_retry_matching set status and
--   waiting_for from job_retry_status, which locks the parents FOR SHARE as the
--   trigger did.
--
-- No shipped release relies on either trigger: both came before the first release,
-- whose claims, cancels and retries are the ones of this migration.

DROP TRIGGER jobs_waiting_event_cleared ON __schema__.jobs;
DROP FUNCTION __schema__.jobs_waiting_event_cleared();
DROP TRIGGER jobs_wait_again ON __schema__.jobs;
DROP FUNCTION __schema__.jobs_wait_again();

-- A rule the statements keep, and the database enforces at the cost of one test per row
-- written. Adding it reads the table once under ACCESS EXCLUSIVE (the DROP TRIGGERs
-- take that lock too), as the checks of migrations 3, 5 and 12 did: the fleet's writes
-- to jobs wait for that one read.
ALTER TABLE __schema__.jobs
    ADD CONSTRAINT jobs_waiting_event_only_pending
        CHECK (waiting_event IS NULL OR status = 'pending');

-- A failed or cancelled job taken back by an operator's retry (job_retry and
-- job_retry_matching set their status and waiting_for from it) waits again while any of
-- its parents has not finished, counted under FOR SHARE locks of the parents, in id
-- order (schema.sql says more).
CREATE FUNCTION __schema__.job_retry_status(
    job_id bigint, has_parents boolean, OUT status text, OUT waiting_for integer)
LANGUAGE plpgsql AS $$
BEGIN
    status := 'pending';
    IF NOT has_parents THEN
        RETURN;
    END IF;
    SELECT count(*) INTO waiting_for
    FROM (
        SELECT p.status AS parent_status, d.run_after_failure
        FROM __schema__.job_dependencies AS d
        JOIN __schema__.jobs AS p ON p.id = d.parent_id
        WHERE d.child_id = job_id
        ORDER BY p.id
        FOR SHARE OF p
    ) AS parent
    WHERE parent.parent_status <> 'done'
      AND NOT (parent.run_after_failure AND parent.parent_status IN ('failed', 'cancelled'));
    IF waiting_for > 0 THEN
        status := 'waiting';
    END IF;
END;
$$;
