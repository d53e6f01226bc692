"""drain() with dependencies and a batch: the real worker runs each job after its
parents, the trigger releases them between claims, and the batch's callback runs last."""

from __future__ import annotations

from typing import Any

import pgbaton
from pgbaton.testing import drain


def test_drain_runs_children_after_parents_and_the_batch_callback(
    queue: pgbaton.Queue, dsn: str, schema: str
) -> None:
    app = pgbaton.App(dsn, schema=schema)
    ran: list[str] = []

    @app.task
    def step(name: str, fail: bool = False) -> None:
        ran.append(name)
        if fail:
            raise RuntimeError(name)

    @app.task
    def summary(batch: dict[str, Any]) -> dict[str, Any]:
        ran.append("summary")
        return batch

    app.queue.enqueue_many(
        [{"task": "step", "args": {"name": "load"}, "after": ["extract"]},
         {"task": "step", "args": {"name": "extract"}, "label": "extract"},
         {"task": "step", "args": {"name": "bad", "fail": True}, "label": "bad",
          "max_attempts": 1},
         {"task": "step", "args": {"name": "never"}, "after": ["bad"]}],
        batch=pgbaton.Batch(on_finish=pgbaton.Callback("summary")),
    )
    results = drain(app)
    assert ran.index("load") > ran.index("extract")
    assert "never" not in ran and ran[-1] == "summary"
    [last] = [r for r in results if r.task == "summary"]
    assert last.result["jobs"] == 4 and last.result["done"] == 2
    assert (last.result["failed"], last.result["cancelled"]) == (1, 1)
    app.queue.close()
