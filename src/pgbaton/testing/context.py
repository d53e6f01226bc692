"""job_context(): a JobContext for calling a handler that takes one, directly in a test."""

from __future__ import annotations

import asyncio
import datetime as dt
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, cast

from ..app import Task
from ..context import JobContext
from ..models import Claim


async def _never_called(_: JobContext) -> bool:
    raise AssertionError("TestJobContext answers heartbeats itself")


@dataclass(eq=False)
class TestJobContext(JobContext):
    """A JobContext whose claim holds until stop() is called: heartbeat() and
    heartbeat_sync() return True until then, and count in `heartbeats`."""

    __test__ = False  # not a test class, whatever pytest thinks of its name

    heartbeats: int = 0

    def stop(self, reason: str = "lost") -> None:
        """Behave as if the claim were lost ('lost', 'cancelled', 'timeout'): should_stop
        turns true, wait_for_stop() returns, and heartbeats return False."""
        self._signal_stop(reason)

    async def heartbeat(self) -> bool:
        return self.heartbeat_sync()

    def heartbeat_sync(self) -> bool:
        self.heartbeats += 1
        return not self.should_stop


def job_context(
    task: Task | str = "task",
    args: Mapping[str, Any] | None = None,
    *,
    job_id: int = 1,
    attempt: int = 1,
    max_attempts: int = 5,
    queue: str | None = None,
    key: str | None = None,
    idempotency_key: str | None = None,
    worker_id: str = "pgbaton-test",
    lease: float = 30.0,
) -> TestJobContext:
    """A context as a worker would hand the handler of job `job_id` at `attempt`:

        ctx = job_context(send_receipt, attempt=2)
        send_receipt(ctx, order_id=7)

    Its idempotency_key is the given one, else `pgbaton-job-<job_id>` as on a worker.
    """
    name = task.name if isinstance(task, Task) else task
    now = dt.datetime.now(dt.UTC)
    claim = Claim(
        id=job_id, token=uuid.uuid4(), attempts=attempt, max_attempts=max_attempts,
        task=name, args=dict(args or {}), key=key,
        queue=queue or (task.queue if isinstance(task, Task) else "default"), priority=0,
        lease_until=now + dt.timedelta(seconds=lease), created_at=now,
        job_idempotency_key=idempotency_key, run_at=now,
    )
    # The loop is only used by JobContext.heartbeat_sync, which TestJobContext replaces.
    return TestJobContext(claim, worker_id, _never_called,
                          cast(asyncio.AbstractEventLoop, None))
