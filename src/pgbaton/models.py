"""The public data pgbaton hands out: claims, jobs, queue statistics, what an enqueue did,
and the default retry policy. Plain data, no I/O."""

from __future__ import annotations

import datetime as dt
import random
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .limits import MAX_JOB_LOG_BYTES, MAX_JOB_LOG_LINES

# The stored status column. waiting: for the jobs it depends on
# (docs/explanation/dependencies.md); never claimed.
STATUSES = ("pending", "running", "done", "failed", "cancelled", "waiting")
# The states pgbaton shows and filters by, the same in the API (Job.state, JobFilter,
# Queue.jobs, QueueStats), the command line, /metrics and the dashboard: the stored
# statuses, with a pending job whose run_at is still ahead called scheduled, and
# pending meaning due (docs/explanation/state_machine.md, "The states as shown").
STATES = ("pending", "scheduled", "running", "waiting", "done", "failed", "cancelled")

RETRY_BASE_SECONDS = 1.0
RETRY_CAP_SECONDS = 3600.0


@dataclass(frozen=True)
class Backoff:
    """Capped exponential backoff: base * 2**(attempt-1) seconds, at most cap. With
    jitter the delay is drawn from the upper half, so a burst of failures spreads out."""

    base: float = RETRY_BASE_SECONDS
    cap: float = RETRY_CAP_SECONDS
    jitter: bool = True

    def __call__(self, attempt: int) -> float:
        ceiling = min(self.cap, self.base * 2.0 ** max(attempt - 1, 0))
        return ceiling / 2 + random.uniform(0, ceiling / 2) if self.jitter else ceiling


DEFAULT_BACKOFF = Backoff()


@dataclass(frozen=True, slots=True)
class Enqueued:
    """What enqueue_once() did: the job's id, and whether this call created the job
    (False: a job of the same task already had the idempotency key, or a job of the
    unique key blocked it). outcome: "created", "kept" (nothing was written),
    "replaced" or "debounced" (docs/howto/unique.md); status: the job's status as the
    call found or left it, when known."""

    id: int
    created: bool
    outcome: str = ""
    status: str | None = None

    def __post_init__(self) -> None:
        if not self.outcome:
            object.__setattr__(self, "outcome", "created" if self.created else "kept")


@dataclass(slots=True)
class Claim:
    """A job this worker holds: proof of ownership for complete, fail and heartbeat."""

    id: int
    token: uuid.UUID
    attempts: int
    max_attempts: int
    task: str
    args: dict[str, Any]
    key: str | None
    queue: str
    priority: int
    lease_until: dt.datetime
    created_at: dt.datetime
    job_idempotency_key: str | None = field(default=None, repr=False)
    run_at: dt.datetime | None = field(default=None, repr=False)  # when it became due
    # The job's headers (the enqueuing span's trace context), None when it has none.
    meta: dict[str, Any] | None = field(default=None, repr=False)
    # False for a job claimed ahead (claim_batch's `starting`) until a write records its
    # start: its outcome or a heartbeat (from `began`), or start_many().
    started: bool = field(default=True, repr=False)
    # When its handler began, by time.monotonic() (set by the worker; None: not yet). An
    # outcome or heartbeat of a claim not `started` records the start from it: the
    # handler has run this long when the write is sent.
    began: float | None = field(default=None, repr=False)

    @property
    def idempotency_key(self) -> str:
        """The same on every attempt of this job: hand it to the systems the job calls."""
        return self.job_idempotency_key or f"pgbaton-job-{self.id}"

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> Claim:
        return cls(
            id=row["id"],
            token=row["claim_token"],
            attempts=row["attempts"],
            max_attempts=row["max_attempts"],
            task=row["task"],
            args=row["args"],
            key=row["key"],
            queue=row["queue"],
            priority=row["priority"],
            lease_until=row["lease_until"],
            created_at=row["created_at"],
            job_idempotency_key=row["idempotency_key"],
            run_at=row.get("run_at"),
            meta=row.get("meta"),
            started=row.get("started", True),
        )


@dataclass(frozen=True, slots=True)
class Job:
    """A job row as stored, for inspection."""

    id: int
    queue: str
    task: str
    args: dict[str, Any]
    status: str
    priority: int
    run_at: dt.datetime
    attempts: int
    max_attempts: int
    key: str | None
    idempotency_key: str | None
    claim_token: uuid.UUID | None
    lease_until: dt.datetime | None
    worker_id: str | None
    errors: list[dict[str, Any]]
    result: Any
    created_at: dt.datetime
    started_at: dt.datetime | None
    finished_at: dt.datetime | None
    batch_id: int | None = None  # the batch it belongs to (docs/explanation/dependencies.md)
    waiting_for: int | None = None  # how many parents have not finished; None: no parents
    meta: dict[str, Any] | None = None  # headers: the enqueuing span's trace context
    # A unique job's key (its SHA-256, in hex; docs/howto/unique.md) and the states in
    # which it blocks another job of that key; None for a job enqueued without unique=.
    unique_key: str | None = None
    unique_states: list[str] | None = None
    # How many times its handler snoozed (pgbaton.Snooze), none of them an attempt.
    snoozes: int = 0
    # How far it is, as its handler last said (ctx.progress; docs/howto/progress-and-
    # logs.md): a fraction in 0..1 or None, a note, and when the worker wrote them. Kept
    # when the job ends; see progress_stale for a retried job.
    progress: float | None = None
    progress_note: str | None = None
    progress_at: dt.datetime | None = None

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> Job:
        return cls(**row)

    @property
    def progress_stale(self) -> bool:
        """True when the progress on the row was reported by an earlier attempt than
        the latest one (the claim of a retry leaves it in place until the new attempt
        reports its own)."""
        return (self.progress_at is not None and self.started_at is not None
                and self.progress_at < self.started_at)

    @property
    def state(self) -> str:
        """The state shown (STATES): `scheduled` for a pending job not yet due, as of
        this machine's clock when asked; otherwise the stored status."""
        if self.status == "pending" and self.run_at > dt.datetime.now(dt.UTC):
            return "scheduled"
        return self.status


@dataclass(frozen=True, slots=True)
class JobLog:
    """What a job's handler logged during one run (docs/howto/progress-and-logs.md): its
    lines, each {"at", "level", "logger", "message"}, and how many more lines did not fit
    the run's bounds (limits.MAX_JOB_LOG_LINES, MAX_JOB_LOG_BYTES). A snooze, a durable
    sleep or a release gives an attempt back, so one attempt may have several runs:
    `run` numbers the job's runs that kept lines, in the order they ran, and `ended`
    says how that run ended (job_logs.ENDINGS; None: not said, as on lines kept before
    schema version 19)."""

    attempt: int
    lines: list[dict[str, Any]]
    dropped: int
    created_at: dt.datetime
    run: int = 1
    ended: str | None = None

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> JobLog:
        return cls(**row)

    @property
    def label(self) -> str:
        """"attempt 2, run 3 (snoozed)": what every reader heads the run's lines with."""
        return f"attempt {self.attempt}, run {self.run}" + (
            f" ({self.ended})" if self.ended else "")

    def marker(self) -> str | None:
        """The line every reader shows after the kept ones when some were dropped."""
        if not self.dropped:
            return None
        return (f"... {self.dropped} more line{'s' if self.dropped != 1 else ''} not kept "
                f"(at most {MAX_JOB_LOG_LINES} lines and {MAX_JOB_LOG_BYTES} bytes a "
                "run)")


@dataclass(frozen=True, slots=True)
class Step:
    """One durable step, sleep or wait of a job (docs/howto/durable-steps.md), in the
    order its handler reached them (seq from 0)."""

    seq: int
    name: str
    kind: str  # "step", "sleep" or "event" (a wait_for)
    result: Any  # a step's return value; a wait's {"payload": ...} or {"timed_out": true}
    until: dt.datetime | None  # a sleep's wake time, a wait's deadline
    started_at: dt.datetime
    finished_at: dt.datetime | None  # None while the job sleeps or waits on it
    size: int | None  # the stored result's bytes as JSON

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> Step:
        return cls(**row)

    @property
    def state(self) -> str:
        """done; sleeping or waiting (for an event) while the job is suspended on it."""
        if self.finished_at is not None:
            return "done"
        return "sleeping" if self.kind == "sleep" else "waiting"

    @property
    def duration(self) -> float | None:
        """Seconds from its start to its end; None while unfinished."""
        if self.finished_at is None:
            return None
        return (self.finished_at - self.started_at).total_seconds()


@dataclass(frozen=True, slots=True)
class HistoryPartition:
    """One partition of jobs_history (the history retention mode,
    docs/explanation/retention.md): the done jobs that finished in [from_at, to_at),
    dropped whole after the retention."""

    name: str
    from_at: dt.datetime
    to_at: dt.datetime
    bytes: int


@dataclass(frozen=True, slots=True)
class QueueStats:
    """Counts of one queue's jobs by state (STATES), and whether it is paused."""

    queue: str
    pending: int  # due: run_at has come (STATES)
    running: int
    done: int
    failed: int
    cancelled: int
    expired_leases: int
    oldest_pending_seconds: float | None
    waiting: int = 0  # for the jobs they depend on (docs/explanation/dependencies.md)
    scheduled: int = 0  # pending, but run_at is still ahead
    paused: bool = False  # the queue is paused: none of its jobs is claimed

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> QueueStats:
        return cls(**row)
