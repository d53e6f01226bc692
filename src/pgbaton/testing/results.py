"""JobResult: what happened to one job in a test, as drain() and inline mode report it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..models import Job


@dataclass(frozen=True)
class JobResult:
    """One job after a test ran it.

    `status` is the job's status afterwards: `done`, `failed` (no attempt left), or
    `pending` (an attempt failed and a later one is scheduled); `error` is the last
    attempt's error as `Type: message`, None when it succeeded.
    """

    id: int
    task: str
    args: dict[str, Any]
    queue: str
    status: str
    attempts: int
    result: Any = None
    error: str | None = None
    errors: list[dict[str, Any]] = field(default_factory=list, repr=False)

    @property
    def ok(self) -> bool:
        return self.status == "done"

    @classmethod
    def from_job(cls, job: Job) -> JobResult:
        last = job.errors[-1] if job.errors else None
        return cls(
            id=job.id, task=job.task, args=job.args, queue=job.queue, status=job.status,
            attempts=job.attempts, result=job.result,
            error=None if last is None or job.status == "done" else describe_error(last),
            errors=list(job.errors),
        )


def describe_error(entry: dict[str, Any]) -> str:
    """An attempt's stored error as one line: `ValueError: card declined`."""
    return f"{entry.get('type', 'Error')}: {entry.get('message', '')}"
