"""claim(tasks=...): a worker claims only the tasks it knows; the others wait for a worker
that knows them, without spending attempts (docs/explanation/guarantees.md, "Unknown
tasks")."""

from __future__ import annotations

import pytest

import pgbaton
from tests.helpers import job_rows


def test_a_worker_claims_only_the_tasks_it_knows(queue, db):
    """Jobs of a task the worker does not know stay pending with no attempt spent, even
    ahead of it in the queue, while the worker claims the tasks it knows behind them."""
    unknown = queue.enqueue_many([{"task": "new_in_next_release", "priority": 5}] * 3)
    known = queue.enqueue_many([{"task": "send_email"}, {"task": "resize_image"}])
    claims = queue.claim("old-worker", limit=10, tasks=["send_email", "resize_image"])
    assert sorted(c.id for c in claims) == known
    assert queue.claim("old-worker", limit=10, tasks=["send_email", "resize_image"]) == []
    assert job_rows(db, "id", "status", "attempts")[:3] == [
        (job_id, "pending", 0) for job_id in unknown
    ]
    # The worker of the next release knows the new task and takes its jobs.
    newer = queue.claim("new-worker", limit=10, tasks=["new_in_next_release", "send_email"])
    assert sorted(c.id for c in newer) == unknown
    assert all(c.attempts == 1 for c in newer)


def test_one_task_name_alone_and_no_filter(queue):
    """tasks="send_email" means that one task; tasks=None claims every task."""
    email, other = queue.enqueue("send_email"), queue.enqueue("other")
    assert [c.id for c in queue.claim("w", limit=5, tasks="send_email")] == [email]
    assert [c.id for c in queue.claim("w", limit=5, tasks=None)] == [other]


def test_a_keyed_job_of_an_unknown_task_keeps_its_key_in_order(queue, db):
    """Per-key order holds across tasks: a worker that does not know the oldest job of a
    key does not run the key's later jobs before it."""
    first = queue.enqueue("new_in_next_release", key="customer-3")
    later = queue.enqueue("send_email", key="customer-3")
    assert queue.claim("old-worker", limit=5, tasks=["send_email"]) == []
    [claim] = queue.claim("new-worker", tasks=["new_in_next_release", "send_email"])
    assert claim.id == first
    assert queue.complete(claim) is True
    assert [c.id for c in queue.claim("old-worker", tasks=["send_email"])] == [later]


async def test_async_claim_filters_by_task(aqueue):
    """AsyncQueue.claim takes the same task filter."""
    await aqueue.enqueue("other")
    mine = await aqueue.enqueue("send_email")
    assert [c.id for c in await aqueue.claim("w", limit=5, tasks=["send_email"])] == [mine]


@pytest.mark.parametrize(
    "tasks",
    [[], [""], ["send_email", 5], 5, ["x" * 256]],
    ids=["empty-list", "empty-name", "not-a-string", "not-a-list", "too-long"],
)
def test_a_bad_task_filter_claims_nothing(queue, db, tasks):
    """A task filter that is not a non-empty list of task names raises InvalidArgument
    naming `tasks` or `task` on one line, and the pending job stays untouched."""
    queue.enqueue("send_email")
    with pytest.raises(pgbaton.InvalidArgument, match="task") as raised:
        queue.claim("w", tasks=tasks)
    assert "\n" not in str(raised.value)
    assert job_rows(db, "status", "attempts") == [("pending", 0)]
