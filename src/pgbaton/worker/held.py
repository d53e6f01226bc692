"""The claims a worker holds: the one collaborator its parts share.

The producer adds a claim, the executor runs it and records its outcome, the heartbeat
extends and fences what is held, the completer takes outcomes and forgets each claim
once its outcome is written. None of these parts knows the others; they meet here.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import math
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..context import JobContext
from ..job_logs import AttemptLog
from ..models import Claim

if TYPE_CHECKING:
    from ..app import Task
    from ..outcomes import Snooze


@dataclass
class Outcome:
    """How one attempt ended, waiting to be written."""

    claim: Claim
    ok: bool
    result: Any = None
    error: BaseException | str | None = None
    retry_in: float | None = None
    run_time: float | None = None
    timed_out: bool = False
    # The handler chose how its job goes on (pgbaton.outcomes): it ends at once as
    # `failed` or `cancelled` (Discard, Cancel, an error its task does not retry), or it
    # snoozes. Written by job_end_many and job_release_many; `written` is the status the
    # write left (a snooze past max_snoozes: failed).
    end: str | None = None
    snooze: Snooze | None = None
    max_snoozes: int | None = None
    written: str | None = None
    # What the attempt logged (lines, dropped) and the progress its handler reported
    # that the progress flush has not written: the completer writes both just before
    # the outcome (docs/howto/progress-and-logs.md). None: nothing.
    logs: tuple[list[dict[str, Any]], int] | None = None
    progress: tuple[float | None, str | None] | None = None


@dataclass(eq=False)
class Running:
    """A claim held from the claim until its outcome is written (or it is given up)."""

    claim: Claim
    context: JobContext
    task: Task | None
    lease: float
    # When the lease surely ends by this worker's monotonic clock: the time the claim or
    # last heartbeat was *sent*, plus the lease. The server started its lease later.
    deadline: float
    needs_extend: bool = False  # its task's lease differs from the one it was claimed with
    handler: asyncio.Task[None] | None = None
    thread: concurrent.futures.Future[Any] | None = None
    started: float | None = None  # monotonic, when the handler started (None: waiting)
    # Monotonic, when the claim came back: a job claimed ahead waits from then.
    held_since: float = 0.0
    # It holds one of the executor's slots (it may be starting); before, it waits.
    has_slot: bool = False
    # Its sync handler's thread outlived the claim (lost, released): it keeps a slot.
    strayed: bool = False
    lost: bool = False
    released: bool = False
    finished: bool = False
    awaiting_write: bool = False
    stop_reason: str | None = None
    lost_detail: str | None = None  # why the claim was lost, as the heartbeat read it
    # What its handler logs at log_level or above (job_logs.py); None: nothing (yet).
    log: AttemptLog | None = None
    log_level: int = 0
    # A job not started that a cancel may have reached unheard (a notification of its
    # id, a LISTEN session new since its claim): it starts only once a beat sent after
    # `doubted_at` finds it still held (HeldJobs.doubt; a beat that finds it gone stops
    # it instead). None: no doubt.
    doubt: asyncio.Future[None] | None = None
    doubted_at: float = 0.0
    # When a notification last named it, and when the beat that cleared its last doubt
    # was sent: named after that beat, its start is written first (worker/starter.py).
    named_at: float = -math.inf
    cleared_at: float = -math.inf

    @property
    def stopped(self) -> bool:
        return self.lost or self.released


# Cancels count as heard while an echo sent this recently has come back (worker/echo.py).
ECHO_STALE_SECONDS = 1.5

UNANSWERED = "unanswered"  # the status of a lost job when the database could not be asked


def loss_of(status: str | None, holder: str | None) -> tuple[str, str]:
    """A lost claim's stop reason for its handler ('cancelled' or 'lost') and what the
    worker's log says of it, from the job's status now (None: no such job) and the
    worker holding it now, if another one does."""
    if status == "cancelled":
        return "cancelled", "it was cancelled"
    if status is None:
        return "lost", "the job was deleted"
    if status == UNANSWERED:
        return "lost", "lease expired and re-claimed, or cancelled: the database could "\
                       "not be asked which"
    if holder is not None:
        return "lost", f"its lease ran out and worker {holder} took it"
    if status in ("done", "failed"):
        return "lost", f"its lease ran out and another worker ended it as {status}"
    return "lost", f"its lease ran out and it is {status} again"


@dataclass(eq=False)
class HeldJobs:
    concurrency: int
    # Claims taken beyond the free slots, waiting in this worker for one (claim_ahead in
    # WorkerConfig, docs/explanation/architecture.md "Claiming ahead"): fixed, or set by the
    # producer before each claim when it sizes them itself (worker/ahead.py).
    claim_ahead: int = 0
    # Handlers that have ended so far, a running total (the default claim-ahead's rate).
    handlers_ended: int = 0
    # Keyed by the token's int: a UUID hashes in Python, an int in C (five look-ups a job).
    by_token: dict[int, Running] = field(default_factory=dict)
    waiting: int = 0  # claimed, handler not started yet
    # Handlers started, until their outcome is recorded; a sync handler past its
    # timeout counts here until its thread returns (its job stays held meanwhile).
    executing: int = 0
    # Sync handlers whose claim is gone (lost, released) but whose thread still runs:
    # each keeps a slot, so no job is claimed that has no thread to run on.
    stray_threads: int = 0
    outcomes: list[Outcome] = field(default_factory=list)
    unwritten: int = 0  # outcomes recorded and not yet written (queued or in flight)
    # Finished jobs whose room a claim of this worker has taken already (room_taken_by).
    room_taken: set[int] = field(default_factory=set)  # tokens' ints, as by_token
    # Set while the heartbeat reaches the database; the producer claims only then.
    heartbeat_ok: asyncio.Event = field(default_factory=asyncio.Event)
    # While this worker's LISTEN session listens on `<schema>_cancelled`, and when it
    # last heard back an echo of this worker's, by its send time (worker/echo.py).
    listening: bool = False
    echo_heard: float = -math.inf
    slot_free: asyncio.Event = field(default_factory=asyncio.Event)
    outcome_ready: asyncio.Event = field(default_factory=asyncio.Event)
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    all_written: asyncio.Event = field(default_factory=asyncio.Event)

    def __post_init__(self) -> None:
        self.heartbeat_ok.set()
        self.all_written.set()

    def __len__(self) -> int:
        return len(self.by_token)

    @property
    def hearing_cancels(self) -> bool:
        """Whether cancels reach this worker now: its LISTEN session listens and has
        heard back an echo sent less than ECHO_STALE_SECONDS ago. Only then does a job
        claimed ahead start with no statement of its own (the cancel of a job that
        waits reaches it by notification); else its start is written first
        (worker/starter.py)."""
        return self.listening and self.now() - self.echo_heard < ECHO_STALE_SECONDS

    def __iter__(self) -> Iterator[Running]:
        return iter(list(self.by_token.values()))

    def get(self, token: uuid.UUID) -> Running | None:
        return self.by_token.get(token.int)

    def free_slots(self) -> int:
        """Jobs the producer may claim now: the free slots plus room to claim ahead.
        Finished jobs whose outcome waits to be written hold their claim; up to
        `concurrency` of them may wait, past that claiming more would only grow a backlog
        of running rows."""
        return min(
            self.concurrency + self.claim_ahead
            - self.executing - self.waiting - self.stray_threads,
            2 * self.concurrency + self.claim_ahead - len(self.by_token),
        )

    def starting_now(self) -> int:
        """How many jobs of a claim sent now start at once: the slots free beyond the
        jobs already waiting for one (they take them first). The claim records the start
        of these; the rest it takes ahead, to be started by the Starter."""
        return max(0, self.concurrency - self.executing - self.waiting - self.stray_threads)

    def awaiting_write(self) -> list[uuid.UUID]:
        """The claim tokens of jobs whose handlers ended and whose outcomes wait to be
        written (queued or in flight). A claim may pass one again after it took its
        room: the job that took it is counted in its own right."""
        return [running.claim.token for running in self.by_token.values()
                if running.awaiting_write]

    def room_taken_by(self, claims: list[Claim], finished: list[uuid.UUID]) -> int:
        """A claim passed these finished jobs and took these claims: the room of as many
        finished jobs of each claim's queue is this worker's again, so their writes need
        not wake the fleet for it (Completer)."""
        taken = Counter(claim.queue for claim in claims)
        count = 0
        for token in finished:
            running = self.by_token.get(token.int)
            if (running is not None and token.int not in self.room_taken
                    and taken[running.claim.queue] > 0):
                taken[running.claim.queue] -= 1
                self.room_taken.add(token.int)
                count += 1
        return count

    def add(self, running: Running) -> None:
        self.by_token[running.claim.token.int] = running
        self.waiting += 1
        if running.needs_extend:
            self.changed.set()

    def began(self, running: Running) -> None:
        """A claimed job's handler takes a slot and starts."""
        self.waiting -= 1
        self.executing += 1
        running.started = running.claim.began = self.now()

    def doubt(self, running: Running, *, renew: bool = False) -> None:
        """A cancel may have reached this job: if it has not started, it waits for a
        beat sent from now (the heartbeat's fence) before it may start. A notification
        naming the job doubts it once: a claim is cancelled once, so later ones are
        forged, and moving the doubt on for each would let a flood of them keep the job
        from ever starting; one heard after the beat that cleared the doubt was sent
        has its start written first instead (named_at, worker/starter.py). `renew`:
        cancels may have gone unheard until now (a LISTEN session new since, a lease
        that may have run out), so only a beat sent from now clears the doubt."""
        if running.started is not None or running.finished or running.lost:
            return
        if not renew:
            running.named_at = self.now()
        if running.doubt is None:
            running.doubt = asyncio.get_running_loop().create_future()
            running.doubted_at = self.now()
        elif renew:
            running.doubted_at = self.now()

    def confirmed(self, running: Running, sent: float) -> None:
        """A beat sent at `sent` found this claim still held: a doubt raised before
        then is cleared, and its job may start."""
        doubt = running.doubt
        if doubt is not None and sent >= running.doubted_at:
            running.doubt = None
            running.cleared_at = sent
            if not doubt.done():
                doubt.set_result(None)

    def handler_ended(self, running: Running, outcome: Outcome | None) -> None:
        """The executor is done with a claim: its outcome is to be written, or (lost,
        released, cancelled) the claim is dropped with nothing to write."""
        running.finished = True
        running.needs_extend = False  # nothing to extend for a job that runs no more
        if running.started is None:
            self.waiting -= 1  # stopped before a slot came free
        else:
            self.executing -= 1
            self.handlers_ended += 1
        self.slot_free.set()
        if outcome is None:
            self.forget(running)
            return
        running.awaiting_write = True
        self.unwritten += 1
        self.outcomes.append(outcome)
        self.all_written.clear()
        self.outcome_ready.set()

    def take_outcomes(self, limit: int) -> list[Outcome]:
        batch, self.outcomes = self.outcomes[:limit], self.outcomes[limit:]
        return batch

    def put_back(self, outcomes: list[Outcome]) -> None:
        """A write that raised: its outcomes go first in line again."""
        self.outcomes[:0] = outcomes

    def forget(self, running: Running) -> None:
        key = running.claim.token.int
        self.by_token.pop(key, None)
        self.room_taken.discard(key)
        self.slot_free.set()
        if running.awaiting_write:
            running.awaiting_write = False
            self.unwritten -= 1
            if not self.unwritten:
                self.all_written.set()

    def thread_strayed(self) -> None:
        self.stray_threads += 1

    def thread_returned(self) -> None:
        self.stray_threads -= 1
        self.slot_free.set()

    def lose(self, running: Running, reason: str) -> bool:
        """Tell a handler its claim is gone ('lost', 'fenced', 'cancelled'). True if it
        was still running and is now told to stop."""
        if running.lost or running.finished:
            return False
        running.lost = True
        running.stop_reason = reason
        running.context._signal_stop(reason)
        if running.handler is not None and not running.handler.done():
            running.handler.cancel()
        return True

    def shortest_lease(self, default: float) -> float:
        # The loop watchdog's thread asks too, while the loop changes by_token: list()
        # copies the values in one step under the GIL, where iterating the view would
        # raise "dictionary changed size during iteration".
        return min((r.lease for r in list(self.by_token.values())), default=default)

    @staticmethod
    def now() -> float:
        return time.monotonic()
