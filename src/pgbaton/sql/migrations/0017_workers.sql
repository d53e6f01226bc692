-- Expand only (docs/guarantees.md, "Rolling deploys"): the workers table (issue 32), so
-- that the dashboard's /workers page lists every live worker, idle ones too. A new
-- table; nothing the previous release uses changes. The previous release's workers do
-- not write it, so they do not show there (they still show as holders of jobs).

-- One row per worker process, written by its presence beat (worker/presence.py) every
-- few seconds and deleted when it stops. A row whose seen_at is old is a worker that
-- died without saying so; each beat deletes the rows older than a day.
CREATE TABLE __schema__.workers (
    worker_id   text        PRIMARY KEY,
    host        text        NOT NULL,
    pid         integer     NOT NULL,
    version     text        NOT NULL,
    -- The queues it claims from; NULL: every queue.
    queues      text[],
    concurrency integer     NOT NULL,
    -- Jobs it holds now (claimed and not yet written back).
    held        integer     NOT NULL DEFAULT 0,
    started_at  timestamptz NOT NULL DEFAULT now(),
    seen_at     timestamptz NOT NULL DEFAULT now()
);
