"""JobResult: what happened to one job in a test, as drain() and inline mode report it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..models import Job, JobLog


@dataclass(frozen=True)
class JobResult:
    """One job after a test ran it.

    `status` is the job's status afterwards: `done`, `failed` (no attempt left, or
    ended at once: pgbaton.Discard, an error its task does not retry), `cancelled`
    (pgbaton.Cancel), or `pending` (an attempt failed and a later one is scheduled, or
    it snoozed: `snoozes` counts those); `error` is the last attempt's error as
    `Type: message`, None when it succeeded.
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
    snoozes: int = 0
    # The progress its handler last reported and what it logged, run by run (docs/
    # howto/progress-and-logs.md), as the real worker keeps them.
    progress: float | None = None
    progress_note: str | None = None
    logs: list[JobLog] = field(default_factory=list, repr=False)

    @property
    def ok(self) -> bool:
        return self.status == "done"

    @classmethod
    def from_job(cls, job: Job, logs: list[JobLog] | None = None) -> JobResult:
        last = job.errors[-1] if job.errors else None
        return cls(
            id=job.id, task=job.task, args=job.args, queue=job.queue, status=job.status,
            attempts=job.attempts, result=job.result,
            error=None if last is None or job.status == "done" else describe_error(last),
            errors=list(job.errors), snoozes=job.snoozes, progress=job.progress,
            progress_note=job.progress_note, logs=list(logs or []),
        )

    @property
    def log_messages(self) -> list[str]:
        """Every kept line's message, run after run: what a test asserts."""
        return [str(entry.get("message")) for attempt in self.logs for entry in attempt.lines]


def describe_error(entry: dict[str, Any]) -> str:
    """An attempt's stored error as one line: `ValueError: card declined`."""
    return f"{entry.get('type', 'Error')}: {entry.get('message', '')}"
