"""What docs/explanation/scaling.md says about a busy queue, proven on a real server."""

from __future__ import annotations

from typing import Any

import pgbaton
from pgbaton.maintenance import Pruner

BACKLOG = 25_000  # two and a half of the pruner's batches


async def test_the_pruner_keeps_up_with_more_than_a_batch_per_interval(
    aqueue: pgbaton.AsyncQueue, db: Any,
) -> None:
    """A backlog of finished jobs past retention larger than one batch is gone within one
    prune interval: the leader's pruner runs again soon while it is behind, instead of
    deleting one batch a minute (167 jobs/s, less than one busy worker finishes)."""
    await aqueue.enqueue_many([{"task": "t", "args": {}} for _ in range(BACKLOG)])
    db.execute("UPDATE jobs SET status = 'done', attempts = 1,"
               " created_at = now() - interval '3 days', finished_at = now() - interval '2 days'")
    pruner = Pruner(aqueue, interval=60.0, retention=24 * 3600)
    waited = 0.0  # as the leader would wait between runs, summed without sleeping
    runs = 0
    while True:
        await pruner.run_once()
        runs += 1
        left = db.execute("SELECT count(*) AS n FROM jobs").fetchone()["n"]
        if left == 0:
            break
        waited += pruner.interval
        assert runs < 50, f"{left} jobs left after {runs} runs"
    assert waited < 60.0, f"the backlog took {runs} runs and {waited:g} s of waiting"
