-- Dependencies and batches (docs/explanation/dependencies.md): the enqueue of jobs that
-- wait for other jobs or form a batch, and the look-ups. The releasing and counting
-- happen in the jobs_status_changed trigger (schema.sql), whatever statement ends a job.

-- name: job_parents_lock
-- The first step of an enqueue with parents: lock them in id order (two enqueues never
-- deadlock), mark them as having dependents, and read how they stand. A parent's end in
-- flight is waited for and read as ended; a later end waits for this transaction and
-- then fires jobs_status_changed, which finds the committed child. Ids not returned do
-- not exist.
UPDATE __schema__.jobs AS j
SET has_dependents = true
WHERE j.id IN (
    SELECT id FROM __schema__.jobs
    WHERE id = ANY(%(ids)s::bigint[])
    ORDER BY id
    FOR NO KEY UPDATE
)
RETURNING j.id, j.task, j.status;

-- name: job_parents_archived
-- Parents job_parents_lock did not find that were moved to jobs_history (the history
-- retention mode, docs/explanation/retention.md): done for good (a moved job is never
-- retried or changed), so they need no lock and count as finished. Read in a statement
-- after the lock, so a parent moved while the lock waited for it is found here.
SELECT id, task, status FROM __schema__.jobs_history WHERE id = ANY(%(ids)s::bigint[]);

-- name: batch_insert
INSERT INTO __schema__.batches (jobs, jobs_left, on_finish, on_success)
VALUES (%(jobs)s, %(jobs)s, %(on_finish)s::jsonb, %(on_success)s::jsonb)
RETURNING id;

-- name: job_insert_graph
-- As job_insert_many, for jobs that wait for others or form a batch: each job's
-- waiting_for (NULL: no parents) and has_dependents come as arrays in input order, the
-- edges as (child position, parent position or existing parent id); meta as in
-- job_insert_many. Idempotency keys are refused before this statement: every job here
-- is new. The ids are drawn in `order` (the positions with every job after its
-- parents of the call), so every job's id is above its parents': the claim's per-key
-- order counts an older waiting job, which must never be a job's own descendant
-- (docs/explanation/guarantees.md, "Per-key order"). The ids still come back in input
-- order.
WITH input AS (
    SELECT nextval('__schema__.jobs_id_seq') AS id, t.*
    FROM (
        SELECT t.*
        FROM ROWS FROM (jsonb_to_recordset(%(jobs)s::jsonb) AS (
                queue text, task text, args jsonb, priority int, run_at timestamptz,
                delay float8, key text, max_attempts int, limit_key text))
             WITH ORDINALITY AS t(queue, task, args, priority, run_at, delay, key,
                                  max_attempts, limit_key, position)
        JOIN unnest(%(order)s::bigint[]) WITH ORDINALITY AS o(position, rank)
          ON o.position = t.position
        ORDER BY o.rank
    ) AS t
),
graph AS (
    SELECT *
    FROM unnest(%(waiting_for)s::int[], %(has_dependents)s::boolean[])
         WITH ORDINALITY AS g(waiting_for, has_dependents, position)
),
inserted AS (
    INSERT INTO __schema__.jobs
        (id, queue, task, args, priority, run_at, key, max_attempts, status,
         waiting_for, has_dependents, batch_id, meta, limit_key)
    SELECT input.id, coalesce(queue, 'default'), task, coalesce(args, '{}'),
           coalesce(priority, 0),
           coalesce(run_at, now() + make_interval(secs => coalesce(delay, 0))),
           key, coalesce(max_attempts, 5),
           CASE WHEN graph.waiting_for > 0 THEN 'waiting' ELSE 'pending' END,
           graph.waiting_for, graph.has_dependents, %(batch_id)s::bigint, %(meta)s::jsonb,
           limit_key
    FROM input JOIN graph USING (position)
    ORDER BY position
),
edges AS (
    INSERT INTO __schema__.job_dependencies (parent_id, child_id, run_after_failure)
    SELECT coalesce(parent.id, e.parent_id), child.id, e.run_after_failure
    FROM jsonb_to_recordset(%(edges)s::jsonb)
             AS e(child int, parent int, parent_id bigint, run_after_failure boolean)
    JOIN input AS child ON child.position = e.child
    LEFT JOIN input AS parent ON parent.position = e.parent
)
SELECT array_agg(id ORDER BY position) AS ids FROM input;

-- name: job_parents_replay
-- Parents that had ended failed or cancelled before the enqueue: their end is applied
-- to the new children now, by the same function as a later end (cancel, or count it
-- for a child that may run after a failure).
SELECT __schema__.jobs_release_children(p.id, p.task, p.status, %(children)s::bigint[],
                                        %(channel)s)
FROM unnest(%(parents)s::bigint[]) AS ended(id)
JOIN __schema__.jobs AS p ON p.id = ended.id;

-- name: job_dependencies_get
-- A job's parents and children, each with its status (a parent pruned since is left out).
SELECT 'parent' AS relation, p.id, p.task, p.status, d.run_after_failure
FROM __schema__.job_dependencies AS d
JOIN __schema__.jobs AS p ON p.id = d.parent_id
WHERE d.child_id = %(id)s
UNION ALL
SELECT 'child' AS relation, c.id, c.task, c.status, d.run_after_failure
FROM __schema__.job_dependencies AS d
JOIN __schema__.jobs AS c ON c.id = d.child_id
WHERE d.parent_id = %(id)s
ORDER BY relation DESC, id;

-- name: batch_get
SELECT id, jobs, jobs_left, done, failed, cancelled, on_finish, on_success, created_at,
       finished_at
FROM __schema__.batches
WHERE id = %(id)s;

-- name: job_batch_id
SELECT batch_id FROM __schema__.jobs WHERE id = %(id)s;
