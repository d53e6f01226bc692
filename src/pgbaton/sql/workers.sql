-- The workers table (docs/howto/dashboard-metrics-traces.md, "Workers"): each worker
-- process's row, written by its presence beat (worker/presence.py), read by the
-- dashboard's /workers page. __schema__ is the quoted schema.

-- name: worker_beat
-- A worker says it is alive: its row inserted or refreshed, and the rows of workers not
-- seen for a day (died without a word) deleted on the way, so the table never grows
-- past the fleet of the last day.
WITH stale AS (
    DELETE FROM __schema__.workers
    WHERE seen_at < now() - interval '1 day' AND worker_id <> %(worker_id)s
)
INSERT INTO __schema__.workers AS w
    (worker_id, host, pid, version, queues, concurrency, held, started_at, seen_at)
VALUES (%(worker_id)s, %(host)s, %(pid)s, %(version)s, %(queues)s::text[],
        %(concurrency)s, %(held)s, now(), now())
ON CONFLICT (worker_id) DO UPDATE
SET host = excluded.host, pid = excluded.pid, version = excluded.version,
    queues = excluded.queues, concurrency = excluded.concurrency, held = excluded.held,
    -- Another process under the same worker id (a restart): its own start.
    started_at = CASE WHEN w.pid = excluded.pid AND w.host = excluded.host
                      THEN w.started_at ELSE now() END,
    seen_at = now();

-- name: worker_leave
-- A worker that stops deletes its own row (only its own: the same id restarted on
-- another host keeps its row).
DELETE FROM __schema__.workers
WHERE worker_id = %(worker_id)s AND host = %(host)s AND pid = %(pid)s;

-- name: worker_list
-- The /workers page: every worker seen in the last day, newest beat first, with the
-- jobs the jobs table says it holds now (the row's `held` is what it last said) and
-- how long ago it was last seen. A worker unseen for `stale_after` seconds is shown as
-- not seen, not as live.
SELECT w.worker_id, w.host, w.pid, w.version, w.queues, w.concurrency, w.held,
       w.started_at, w.seen_at,
       extract(epoch FROM now() - w.seen_at)::float8 AS seen_seconds_ago,
       now() - w.seen_at <= make_interval(secs => %(stale_after)s) AS live,
       coalesce(j.running, 0) AS running
FROM __schema__.workers AS w
LEFT JOIN (
    SELECT worker_id, count(*) AS running
    FROM __schema__.jobs
    WHERE lease_until IS NOT NULL AND worker_id IS NOT NULL
    GROUP BY worker_id
) AS j ON j.worker_id = w.worker_id
ORDER BY live DESC, w.seen_at DESC, w.worker_id;
