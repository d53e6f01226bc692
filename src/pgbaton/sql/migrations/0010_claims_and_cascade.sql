-- Expand only (docs/guarantees.md, "Rolling deploys"): functions replaced in place,
-- with the arguments and results the previous release calls them with.
--
-- The release cascade walks from what it has found, by index, whatever the plan
-- (docs/dependencies.md): cancelling a parent with 50,000 waiting children took
-- minutes when its recursive step was planned as a join of every waiting job.

CREATE OR REPLACE FUNCTION __schema__.jobs_release_children(
    ended_id bigint, ended_task text, outcome text, only_children bigint[], channel text
) RETURNS void
LANGUAGE plpgsql
-- No JIT: the walk's estimates grow with the statistics of a big graph and pass
-- jit_above_cost, and compiling costs each ended job of a cascade a third of a second
-- to read a handful of rows. A SET clause, not set_config: the trigger runs inside
-- the caller's transaction, whose settings are not this function's to change.
SET jit = off
AS $$
DECLARE
    woken text[];
    queue_name text;
    doomed_ids bigint[];
    doomed_errors jsonb;
BEGIN
    IF outcome <> 'done' THEN
        WITH RECURSIVE doomed (id, task, parent_id, parent_task, parent_outcome) AS (
            SELECT c.id, c.task, ended_id, ended_task, outcome
            FROM (SELECT d.child_id FROM __schema__.job_dependencies AS d
                  WHERE d.parent_id = ended_id AND NOT d.run_after_failure
                  OFFSET 0) AS d
            CROSS JOIN LATERAL (
                SELECT c.id, c.task FROM __schema__.jobs AS c
                WHERE c.id = d.child_id AND c.status = 'waiting'
                  AND (only_children IS NULL OR c.id = ANY(only_children))
                OFFSET 0) AS c
            UNION
            SELECT c.id, c.task, doomed.id, doomed.task, 'cancelled'
            FROM doomed
            CROSS JOIN LATERAL (
                SELECT d.child_id FROM __schema__.job_dependencies AS d
                WHERE d.parent_id = doomed.id AND NOT d.run_after_failure
                OFFSET 0) AS d
            CROSS JOIN LATERAL (
                SELECT c.id, c.task FROM __schema__.jobs AS c
                WHERE c.id = d.child_id AND c.status = 'waiting'
                OFFSET 0) AS c
        )
        -- Each doomed job once, with the first (lowest) of its doomed parents, as one
        -- array and one object of the errors by id: the UPDATE then finds the jobs by
        -- id and their errors by key, with no join for the planner to get wrong.
        SELECT array_agg(first.id),
               jsonb_object_agg(first.id::text, jsonb_build_object(
                   'type', 'DependencyFailed',
                   'message', format('job %s (task %s) that this job waits for %s',
                                     first.parent_id, first.parent_task,
                                     CASE first.parent_outcome WHEN 'deleted' THEN 'was deleted'
                                          ELSE 'ended ' || first.parent_outcome END),
                   'parent_id', first.parent_id, 'at', now()))
        INTO doomed_ids, doomed_errors
        FROM (SELECT DISTINCT ON (id) * FROM doomed ORDER BY id, parent_id) AS first;
        IF doomed_ids IS NOT NULL THEN
            UPDATE __schema__.jobs AS c
            SET status = 'cancelled',
                finished_at = now(),
                errors = c.errors || jsonb_build_array(doomed_errors -> c.id::text)
            WHERE c.id = ANY(doomed_ids) AND c.status = 'waiting';
        END IF;
    END IF;
    WITH released AS (
        UPDATE __schema__.jobs AS c
        SET waiting_for = c.waiting_for - 1,
            status = CASE WHEN c.waiting_for = 1 THEN 'pending' ELSE 'waiting' END
        WHERE c.id = ANY(ARRAY(
                SELECT d.child_id FROM __schema__.job_dependencies AS d
                WHERE d.parent_id = ended_id AND (outcome = 'done' OR d.run_after_failure)))
          AND c.status = 'waiting'
          AND (only_children IS NULL OR c.id = ANY(only_children))
        RETURNING c.queue, c.status, c.run_at
    )
    SELECT array_agg(DISTINCT queue) FILTER (WHERE status = 'pending' AND run_at <= now())
    INTO woken FROM released;
    -- The insert trigger wakes workers for new jobs only: a released one needs its own.
    FOREACH queue_name IN ARRAY coalesce(woken, '{}') LOOP
        PERFORM pg_notify(channel, queue_name);
    END LOOP;
END;
$$;
