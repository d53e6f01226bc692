"""Inline mode with after= and batches: jobs run in dependency order, a failed parent
cancels its children, and a batch's callbacks run with the counts the database gives."""

from __future__ import annotations

from typing import Any

import pytest

import pgbaton
from pgbaton.testing import inline

app = pgbaton.App("postgresql://nobody@127.0.0.1:1/none")  # inline needs no database


@app.task
def step(n: int, fail: bool = False) -> int:
    if fail:
        raise RuntimeError(f"step {n} failed")
    return n


@app.task
def finished(batch: dict[str, Any], note: str = "") -> dict[str, Any]:
    return batch


def test_after_runs_in_order_and_a_failed_parent_cancels() -> None:
    with inline(app, raise_errors=False) as jobs:
        first = step.enqueue({"n": 1, "fail": True})
        child = step.enqueue({"n": 2}, after=[first])
        hardy = step.using(after=[first], after_failure="run").defer(n=3)
        with pytest.raises(pgbaton.InvalidArgument, match="no job 99 ran in this inline"):
            step.enqueue({"n": 4}, after=[99])
        with pytest.raises(pgbaton.InvalidArgument, match="after must hold job ids"):
            step.enqueue({"n": 4}, after=["x"])
    assert [(r.id, r.status) for r in jobs] == [
        (first, "failed"), (child, "cancelled"), (hardy, "done"),
    ]
    assert jobs.results[1].error == (
        f"DependencyFailed: job {first} (task step) that this job waits for ended failed"
    )


async def test_labels_run_parents_first_and_a_batch_calls_back() -> None:
    batch = pgbaton.Batch(
        on_finish=pgbaton.Callback("finished", {"note": "all"}),
        on_success=pgbaton.Callback("finished", {"note": "ok"}),
    )
    with inline(app) as jobs:
        ids = await app.async_queue.enqueue_many(
            [{"task": "step", "args": {"n": 2}, "after": ["one"]},
             {"task": "step", "args": {"n": 1}, "label": "one"}],
            batch=batch,
        )
        with pytest.raises(pgbaton.InvalidArgument, match="cycle"):
            app.queue.enqueue_many([{"task": "step", "args": {"n": 1}, "label": "a",
                                     "after": ["a"]}])
    assert [r.args["n"] for r in jobs.of("step")] == [1, 2]
    assert [r.id for r in jobs.of("step")] == [ids[1], ids[0]]
    counts = {"id": 1, "jobs": 2, "done": 2, "failed": 0, "cancelled": 0}
    assert [r.result for r in jobs.of("finished")] == [counts, counts]
