"""WorkerConfig: how a worker runs, checked when it is made."""

from __future__ import annotations

import dataclasses
import logging
import math
import os
import socket
import uuid
from dataclasses import dataclass
from typing import Any

from .._checks import check_int4, check_lease, check_partition_width
from ..errors import InvalidArgument
from ..limits import INT4_MAX
from ..maintenance.services import DEFAULT_RETENTION_MODE, RETENTION_MODES
from .ahead import most_ahead
from .loop import loop_factory


def default_worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


@dataclass
class WorkerConfig:
    """How a worker runs. Every field has a default fit for production."""

    queues: list[str] | None = None
    concurrency: int = 10
    # Jobs claimed beyond the free slots, to wait in the worker for one: larger claims
    # and no slot idle while a claim is in flight, at the price of jobs held before
    # they start, which other workers cannot take (docs/explanation/architecture.md,
    # "Claiming ahead"). "auto" (the default): while a backlog waits, about what this
    # worker runs in TARGET_WAIT_SECONDS (worker/ahead.py), none otherwise and none for
    # limited or rate-limited queues, and a job held past HOLD_LIMIT_SECONDS is handed
    # back ("Claiming ahead sized by the worker"). A number: always that many. 0: claim
    # only for free slots.
    claim_ahead: int | str = "auto"
    processes: int = 1
    # The event loop each worker process runs on (worker/loop.py): "auto" is uvloop where
    # it is installed (a dependency on Linux and macOS), else asyncio's own; "uvloop"
    # insists on it; "asyncio" never uses it. Only run_worker (`pgbaton worker`) picks a
    # loop: Worker.run() runs on whatever loop awaits it.
    event_loop: str = "auto"
    lease: float = 30.0
    poll_interval: float = 2.0
    shutdown_grace: float = 30.0
    maintenance: bool = True
    reap_interval: float = 1.0
    prune_interval: float = 60.0
    retention: float = 7 * 24 * 3600.0
    # How finished jobs leave the jobs table (docs/explanation/retention.md): "delete"
    # deletes them after `retention`; "history" moves done jobs without an explicit
    # idempotency key to the partitioned jobs_history once they finished history_after
    # seconds ago, in partitions history_partition seconds wide (whole minutes), and
    # drops each partition whole once its range is past `retention`. The rest (failed,
    # cancelled, and done jobs with an idempotency key) is deleted after `retention` in
    # both modes.
    retention_mode: str = DEFAULT_RETENTION_MODE
    history_after: float = 3600.0
    history_partition: float = 86400.0
    # The leader looks every vacuum_interval seconds and VACUUMs the jobs table (at most
    # every other look) once the statistics count vacuum_dead_tuples dead row versions
    # in it and 5% of the live ones: a busy queue's claims then stop reading over the
    # dead entries that gather at the head of the claim's index between autovacuum's
    # visits (docs/explanation/scaling.md, "The claim's dead head"); and once it holds
    # ten times the rows its planner statistics last counted (maintenance/services.py,
    # Vacuumer.GROWN). None: leave the table to autovacuum alone.
    vacuum_interval: float = 10.0
    vacuum_dead_tuples: int | None = 50_000
    periodic_interval: float = 0.2
    elect_interval: float = 2.0
    # A part (producer, heartbeat, ...) that raises this many times within
    # part_failure_window seconds makes the worker release its jobs and exit non-zero.
    part_failure_limit: int = 5
    part_failure_window: float = 60.0
    # The event loop blocked for longer than this share of the shortest held lease is
    # logged with the handler that blocked it.
    loop_block_fraction: float = 0.25
    # A worker claims only the jobs of tasks its App registers: in a rolling deploy the
    # jobs of a task only the new release knows wait, attempts untouched, for a worker
    # that knows it. True claims every task, and fails unknown ones with UnknownTask.
    claim_unknown_tasks: bool = False
    # Serve this worker's Prometheus metrics on 127.0.0.1:metrics_port (pgbaton[web]);
    # with several processes, process N serves metrics_port + N.
    metrics_port: int | None = None
    worker_id: str | None = None
    dsn: str | None = None
    # A direct connection to PostgreSQL for LISTEN and the maintenance leader's advisory
    # lock, when `dsn` goes through a transaction pool (PgBouncer): both need a server
    # session of their own (worker/sessions.py, docs/howto/pgbouncer.md).
    listen_dsn: str | None = None
    # When set, the worker writes its final statistics there as JSON as it stops (the
    # same counters as Worker.stats), for whoever started it as a process.
    stats_path: str | None = None
    # Seconds to keep retrying, with backoff, while the database cannot be reached as the
    # worker starts: a worker process restarted while PostgreSQL restarts or fails over
    # waits for it instead of dying (and its supervisor giving up on it).
    connect_timeout: float = 60.0
    # Keep what each handler logs (any logger, at job_log_level or above) with its
    # job's attempt (docs/howto/progress-and-logs.md); a task may turn it off with
    # @app.task(job_logs=False). A level name or number; the worker's own log stream is
    # unchanged either way.
    job_logs: bool = True
    job_log_level: int | str = "INFO"

    def __post_init__(self) -> None:
        if not isinstance(self.job_logs, bool):
            raise InvalidArgument(f"job_logs must be True or False, got {self.job_logs!r}")
        self.job_log_level = _log_level(self.job_log_level)
        for name in (
            "lease", "poll_interval", "reap_interval", "prune_interval", "retention",
            "periodic_interval", "elect_interval", "part_failure_window", "vacuum_interval",
        ):
            _check_positive(name, getattr(self, name))
        check_lease(self.lease)  # every claim and heartbeat checks it: here, not at the first
        _check_positive("shutdown_grace", self.shutdown_grace, zero_ok=True)
        if self.retention_mode not in RETENTION_MODES:
            raise InvalidArgument(
                f"retention_mode must be one of {', '.join(map(repr, RETENTION_MODES))}, "
                f"got {self.retention_mode!r}"
            )
        _check_positive("history_after", self.history_after, zero_ok=True)
        check_partition_width("history_partition", self.history_partition)
        _check_positive("connect_timeout", self.connect_timeout, zero_ok=True)
        loop_factory(self.event_loop)  # an unknown name, or uvloop missing: refused here
        if not 0 < self.loop_block_fraction < 1:
            raise InvalidArgument(
                f"loop_block_fraction must be between 0 and 1, got {self.loop_block_fraction!r}"
            )
        for name in ("concurrency", "processes", "part_failure_limit"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InvalidArgument(f"{name} must be a whole number >= 1, got {value!r}")
        if self.vacuum_dead_tuples is not None:  # None: no vacuum by the leader
            check_int4("vacuum_dead_tuples", self.vacuum_dead_tuples, minimum=0)
        if self.claim_ahead != "auto" and (
                isinstance(self.claim_ahead, bool) or not isinstance(self.claim_ahead, int)
                or self.claim_ahead < 0):
            raise InvalidArgument(
                f"claim_ahead must be 'auto' or a whole number >= 0, got "
                f"{self.claim_ahead!r}"
            )
        # What one claim may ask for; "auto" asks for at most most_ahead() beyond.
        ahead = (self.claim_ahead if isinstance(self.claim_ahead, int)
                 else most_ahead(self.concurrency))
        if self.concurrency + ahead > INT4_MAX:
            raise InvalidArgument(
                f"concurrency + claim_ahead must be at most {INT4_MAX:,}, got "
                f"{self.concurrency:,} + {ahead:,}"
                + (" (the most claim_ahead 'auto' takes)" if ahead != self.claim_ahead
                   else "")
            )
        if self.listen_dsn is not None and (
            not isinstance(self.listen_dsn, str) or not self.listen_dsn.strip()
        ):
            raise InvalidArgument(
                f"listen_dsn must be a non-empty DSN or None, got {self.listen_dsn!r}"
            )
        if self.queues is not None and (
            isinstance(self.queues, str)
            or not self.queues
            or not all(isinstance(q, str) and q for q in self.queues)
        ):
            raise InvalidArgument(
                f"queues must be a non-empty list of queue names, got {self.queues!r}"
            )

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _log_level(value: object) -> int:
    if isinstance(value, str) and isinstance(
        level := logging.getLevelNamesMapping().get(value.strip().upper()), int
    ):
        return level
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= 100:
        return value
    raise InvalidArgument(
        f"job_log_level must be a level name (DEBUG, INFO, WARNING, ERROR, CRITICAL) or a "
        f"number from 0 to 100, got {value!r}"
    )


def _check_positive(name: str, value: object, zero_ok: bool = False) -> None:
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value < 0
        or (value == 0 and not zero_ok)
    ):
        bound = ">= 0" if zero_ok else "positive"
        raise InvalidArgument(f"{name} must be a finite {bound} number of seconds, "
                              f"got {value!r}")
