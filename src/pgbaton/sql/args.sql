-- Statements on jobs' args themselves: `pgbaton rotate-keys` (docs/howto/encryption.md).

-- name: job_sealed_page
-- The next page (by id, after %(after)s) of jobs still to run whose args are sealed
-- with another key than %(kid)s. No index serves it: an operator's command that walks
-- the jobs table once, a page at a time, by its primary key.
SELECT j.id, j.task, j.args
FROM __schema__.jobs AS j
WHERE j.id > %(after)s
  AND j.status IN ('pending', 'waiting')
  AND jsonb_typeof(j.args -> '$encrypted') = 'object'
  AND (j.args -> '$encrypted' ->> 'kid') IS DISTINCT FROM %(kid)s
ORDER BY j.id
LIMIT %(limit)s;

-- name: job_args_reseal_many
-- Each job's args, sealed again, where they are still those read (compare and set: a
-- job claimed, replaced or resealed meanwhile is left alone) and it has still to run.
UPDATE __schema__.jobs AS j
SET args = sealed.args
FROM unnest(%(ids)b::bigint[], %(old)b::jsonb[], %(new)b::jsonb[])
     WITH ORDINALITY AS sealed(id, old_args, args, position)
WHERE j.id = sealed.id AND j.args = sealed.old_args
  AND j.status IN ('pending', 'waiting')
RETURNING sealed.position;
