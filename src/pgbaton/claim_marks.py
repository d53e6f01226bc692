"""Where a queue's next plain claim starts reading the claim index (no I/O).

Claimed jobs leave dead entries at the head of jobs_claimable (and of each queue's range
in jobs_queue_claimable) until a VACUUM removes them; while a session holds an old
snapshot none can, and every claim that starts at the head reads all of them. A claim
reads from the head as it always has, unless SLOW_HEAD_READS from the head in a row took
SLOW_HEAD_SECONDS or more (and four times this queue's quickest claim; the statement
alone, not the wait for a connection): then each starts past the last
job this queue object claimed from the same head (its mark: priority, run_at, id; per
queue when the claim names queues), and a claim from the head comes every
CLAIM_HEAD_SECONDS, or HEAD_COST_SHARE of the time if that is longer: a claim from a head
that takes 0.5 s comes every 5 s, so the dead head never takes more than a tenth of the
claims' time, however long it grows (but never more than MAX_HEAD_INTERVAL_SECONDS
apart). Those claims take what became pending behind a mark: a job whose lease was
reaped, a dependency's child, the next job of a key that was busy; and they find out
whether the head is still slow (docs/explanation/scaling.md, "A held xmin"). The flow
claim (job_claim_flow, migration 24) has marks of its own, one per queue always
(`by_queue`): it reads each queue's range of jobs_queue_claimable."""

from __future__ import annotations

import datetime as dt
import json
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from .models import Claim

# A claim from the head this slow (the statement), and four times the quickest claim
# this queue object has made (a distant server's round trip is not a dead head), means
# a dead head long enough for the claim from a mark to pay: 10 ms is ten to thirty times
# a claim of a healthy table here. At 50 ms, issue 27's cell (make bench, held_xmin:
# 2,000 jobs/s, an idle holder for 90 s) never reached it, yet its claims averaged
# 7.5 ms (at most 34) and completions fell to 70% of the offered rate in the hold's last
# windows; at 10 ms they stayed at 99% or more, claim wait p99 under 35 ms.
SLOW_HEAD_SECONDS = 0.01
# How many claims from the head in a row must be that slow: a stall of the worker's loop
# or a busy machine makes one or two slow, a dead head every one.
SLOW_HEAD_READS = 3
SLOW_HEAD_TIMES_QUICKEST = 4.0
# How long a job that became pending behind a mark (an enqueue that committed late, a
# row another claim locked and let go, a keyed job whose key was busy) may wait at most
# for a claim that reads the index from its head, whose cost is every dead entry there.
CLAIM_HEAD_SECONDS = 1.0
# The share of a queue's time that its claims from a slow head may take: the next one
# from the head waits the last one's duration divided by this. At 2,000 jobs/s offered,
# a minute into a held xmin, the claim from the head took most of a second; a claim from
# the head every second then halved the completions (issue 27's cell in make bench).
HEAD_COST_SHARE = 0.1
# But a job behind a mark waits no longer than this for a claim from the head, however
# slow it is: a claim from the head that takes seconds means a collapse to read, not a
# cost to spread.
MAX_HEAD_INTERVAL_SECONDS = 30.0
# Distinct (queues, tasks) pairs whose marks a queue object keeps; past it, all go.
MAX_MARKED_CLAIMS = 64
# Queues whose marks one kind of claim keeps, those it claimed from last. The flow
# claim serves every queue it has a mark of at every claim: with a queue per tenant,
# thousands of marks made each claim past them slower than the head they avoid (547 ms
# against 7 ms at 3,000 queues). A queue past this many is read from its head.
MAX_QUEUE_MARKS = 32

Mark = tuple[int, dt.datetime, int]
ClaimKind = tuple[tuple[str, ...] | None, tuple[str, ...] | None]


@dataclass
class _Marks:
    head_at: float  # when this kind of claim last read from the head
    slow_reads: int = 0  # the reads of the head in a row, up to the last, that were slow
    head_seconds: float = 0.0  # how long that read took
    # The claims past the marks in a row, up to the last, slower than that read.
    slow_marks: int = 0
    every: Mark | None = None
    queues: dict[str, Mark] = field(default_factory=dict)


class ClaimMarks:
    """The marks of one queue object's claims, by the queues and tasks they name.
    `slow_head`: SLOW_HEAD_SECONDS, or another threshold (0: every claim from the head
    counts as slow). `clock`: monotonic seconds (tests move it). `by_queue`: marks per
    queue even for a claim that names none (the flow claim's: it reads queue by queue)."""

    def __init__(
        self, slow_head: float = SLOW_HEAD_SECONDS, clock: Callable[[], float] = time.monotonic,
        *, by_queue: bool = False,
    ) -> None:
        self.slow_head = slow_head
        self._clock = clock
        self._by_queue = by_queue
        self._quickest = math.inf  # the quickest claim's round trip so far
        self._marks: dict[ClaimKind, _Marks] = {}

    def after(self, queues: Sequence[str] | None, tasks: Sequence[str] | None) -> str | None:
        """The claim's `after` parameter, or None to read from the head."""
        kind = _kind(queues, tasks)
        now = self._clock()
        marks = self._marks.get(kind)
        if marks is None:
            if len(self._marks) >= MAX_MARKED_CLAIMS:
                self._marks.clear()
            self._marks[kind] = _Marks(head_at=now)
            return None
        head_due = marks.head_at + min(MAX_HEAD_INTERVAL_SECONDS, max(
            CLAIM_HEAD_SECONDS, marks.head_seconds / HEAD_COST_SHARE))
        slow = marks.slow_reads >= (SLOW_HEAD_READS if self.slow_head else 1)
        if not slow or now >= head_due or (marks.every is None and not marks.queues):
            marks.head_at = now
            return None
        return json.dumps({
            "every": None if marks.every is None else _encode(marks.every),
            "queues": {name: _encode(mark) for name, mark in marks.queues.items()},
        })

    def claimed(
        self, queues: Sequence[str] | None, tasks: Sequence[str] | None, *, after: str | None,
        claims: Sequence[Claim], seconds: float,
    ) -> None:
        """Move the marks to the last of these claims (in claim order), per queue when
        the claim named queues. `after`: the claim's parameter; `seconds`: how long it
        took."""
        self._quickest = min(self._quickest, seconds)
        marks = self._marks.get(_kind(queues, tasks))
        if marks is None:
            return
        if after is None:
            # SLOW_HEAD_READS slow reads of the head in a row: one or two alone may be
            # a stall of the worker's loop or the server, not a dead head.
            slow = not self.slow_head or seconds >= max(
                self.slow_head, SLOW_HEAD_TIMES_QUICKEST * self._quickest)
            marks.slow_reads = marks.slow_reads + 1 if slow else 0
            marks.head_seconds = seconds
            marks.slow_marks = 0
        else:
            # Marks pay only while claims past them are quicker than the head: as many
            # slower in a row as it takes to leave the head send the claims back to it.
            marks.slow_marks = marks.slow_marks + 1 if seconds > marks.head_seconds else 0
            if marks.slow_marks >= SLOW_HEAD_READS:
                marks.slow_reads = marks.slow_marks = 0
        for claim in claims:
            if claim.run_at is None:
                continue
            mark = (claim.priority, claim.run_at, claim.id)
            if queues is None and not self._by_queue:
                marks.every = mark
                continue
            marks.queues.pop(claim.queue, None)  # the latest claimed from goes last
            marks.queues[claim.queue] = mark
            if len(marks.queues) > MAX_QUEUE_MARKS:
                del marks.queues[next(iter(marks.queues))]


def _kind(queues: Sequence[str] | None, tasks: Sequence[str] | None) -> ClaimKind:
    return (None if queues is None else tuple(queues),
            None if tasks is None else tuple(tasks))


def _encode(mark: Mark) -> list[object]:
    priority, run_at, job_id = mark
    return [priority, run_at.isoformat(), job_id]
