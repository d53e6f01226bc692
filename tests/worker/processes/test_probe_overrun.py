"""Hostile probes of the hold a sync handler keeps on its key (issue 25): a sync
handler that is cancelled and runs on in its thread past its claim's lease. The
guarantee (docs/explanation/guarantees.md, "Cancel"): the next job of the key cannot
start beside a handler that is still running. Start and end rows of the effects table,
compared in SQL, say whether two handlers of one key overlapped."""

from __future__ import annotations

from tests.worker.processes.test_probe_claim_ahead import run_worker  # noqa: F401  (fixture)
from tests.worker_processes import scalar, wait_until

OVERLAPS = """
    WITH spans AS (
        SELECT e.job_id,
               min(e.at) FILTER (WHERE e.what = 'start') AS began,
               max(e.at) FILTER (WHERE e.what = 'end') AS ended
        FROM effects AS e GROUP BY e.job_id
    )
    SELECT count(*) FROM spans AS a JOIN spans AS b ON a.job_id < b.job_id
    WHERE a.began < coalesce(b.ended, 'infinity') AND b.began < coalesce(a.ended, 'infinity')
"""


def test_a_cancelled_sync_handler_running_past_its_lease_keeps_its_key(
    run_worker, db, app_schema, queue  # noqa: F811
):
    """A keyed sync handler that ignores should_stop, cancelled while it runs, runs
    on 6 s in its thread under a 1.5 s lease; the next job of its key, on a second
    worker, must not start until that thread has returned."""
    first = queue.enqueue("sync_sleeps", {"seconds": 6.0}, key="k", max_attempts=1)
    second = queue.enqueue("sync_sleeps", {"seconds": 0.0}, key="k", max_attempts=1)
    worker = run_worker("--concurrency", "1", "--lease", "1.5", "--poll-interval", "0.2")
    wait_until(lambda: scalar(db, "SELECT count(*) FROM effects WHERE job_id = %s",
                              first) == 1, what="the first handler started")
    assert queue.cancel(first) is True
    other = run_worker("--concurrency", "1", "--lease", "1.5", "--poll-interval", "0.2")
    wait_until(lambda: scalar(db, "SELECT count(*) FROM effects WHERE job_id = %s"
                              " AND what = 'end'", first) == 1, timeout=20,
               what="the first handler's thread returned")
    wait_until(lambda: scalar(db, "SELECT status FROM jobs WHERE id = %s", second)
               == "done", timeout=20, what="the second job done")
    assert worker.stop() == 0
    assert other.stop() == 0
    assert scalar(db, OVERLAPS) == 0
