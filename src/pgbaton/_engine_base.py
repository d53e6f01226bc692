"""What the engine's twins share, without I/O: the parameters of the worker's and the
leader's statements, and the reading of their rows. engine_async.py and its generated
twin engine.py only run them, so nothing here is written twice.

Each *_params function takes what a *_many call of the engine was given, as a list,
checks it, and returns the statement's parameters; each row reader takes the rows the
statement returned and says, for each input position, what became of it.
"""

from __future__ import annotations

import datetime as dt
import math
import time
import uuid
from collections.abc import Iterable, Sequence
from typing import Any

from . import job_logs
from ._checks import (
    check_int4,
    check_lease,
    check_limit,
    check_name,
    check_progress,
    check_queues,
    check_tasks,
    check_tokens,
    held_params,
    retry_delay,
)
from ._decoding import claim_reader
from ._encoding import error_json, to_json
from .errors import ArgsRejected, InvalidArgument
from .flow import ClaimBatch
from .models import Claim
from .outcomes import Snooze, SnoozeLimit

Row = dict[str, Any]


# -- reading rows ------------------------------------------------------------------------


def accepted(rows: list[tuple[Any, ...]], count: int) -> list[bool]:
    """For each input position of a *_many statement read as tuples (the position
    first), whether its row was changed."""
    positions = {row[0] for row in rows}
    return [position in positions for position in range(1, count + 1)]


def changed(rows: list[Row], count: int) -> list[bool]:
    """For each input position of a *_many statement, whether its row was changed."""
    positions = {row["position"] for row in rows}
    return [position in positions for position in range(1, count + 1)]


def statuses(rows: list[tuple[Any, ...]], count: int) -> list[str | None]:
    """For each input position of a *_many statement returning (position, status), the
    status it wrote; None where its row was not changed (the claim was lost)."""
    written = {row[0]: row[1] for row in rows}
    return [written.get(position) for position in range(1, count + 1)]


def read_claim_batch(columns: list[str], rows: list[tuple[Any, ...]]) -> ClaimBatch:
    """A claim's rows: the claimed jobs, and (flow claims) a row with no job that says
    when a full rate-limited queue's next start is due."""
    if not rows:
        return ClaimBatch([])
    read_claim = claim_reader(columns)
    id_at = columns.index("id")
    claims = [read_claim(row) for row in rows if row[id_at] is not None]
    slots = [row[columns.index("next_slot_at")] for row in rows if row[id_at] is None]
    if not slots:
        return ClaimBatch(claims)
    due = (slots[0] - dt.datetime.now(dt.UTC)).total_seconds()
    return ClaimBatch(claims, max(due, 0.0))


def renew_leases(
    claims: Sequence[Claim], rows: list[Row], *, started: bool = False,
    ran: Sequence[float] | None = None,
) -> None:
    """Give each claim still held (a row of its position) its new lease_until, and mark
    it started: all with `started` (start_many), else those whose start this statement
    recorded (a heartbeat's `ran` of 0 or more: read from what was sent, not from the
    claim now, whose handler may have begun while the beat was on its way)."""
    leases = {row["position"]: row["lease_until"] for row in rows}
    for position, claim in enumerate(claims, start=1):
        if position in leases:
            claim.lease_until = leases[position]
            if started or (ran is not None and ran[position - 1] >= 0):
                claim.started = True


# A heartbeat's `ran` for a claim whose start it does not record.
NOT_RECORDED = -1.0


def run_times(claims: Sequence[Claim], *, ended: bool) -> list[float]:
    """How long each claim's handler has run as the write's parameters are made, for
    the writes that record the start of a job claimed ahead (job_complete_many,
    job_heartbeat_many). Where the start is recorded already: 0 for an outcome (its
    statement keeps the recorded one), NOT_RECORDED for a heartbeat, as for a handler
    not begun. An outcome of a claim whose handler's start no one measured (a caller
    of claim_batch's own) records its start as now. Always floats, never None: a list
    of Nones would be sent in text, and each statement then prepared twice."""
    now = time.monotonic()
    unset = 0.0 if ended else NOT_RECORDED
    return [unset if claim.started or claim.began is None else now - claim.began
            for claim in claims]


# -- the worker's statements ---------------------------------------------------------------


def claim_params(
    worker_id: str, limit: int, lease: float, queues: Iterable[str] | None,
    tasks: Iterable[str] | None, *, finished: Iterable[uuid.UUID] | None = None,
    starting: int | None = None, after: str | None = None,
) -> dict[str, Any]:
    limit = check_limit(limit)
    return {
        "worker_id": check_name("worker_id", worker_id),
        "limit": limit,
        "lease": check_lease(lease),
        "queues": check_queues(queues),
        "tasks": check_tasks(tasks),
        "finished": check_tokens("finished", finished),
        "starting": limit if starting is None else min(
            check_int4("starting", starting, minimum=0), limit),
        "after": after,  # job_claim_many's marks (claim_marks.py)
    }


def lease_params(claims: Sequence[Claim], lease: float) -> dict[str, Any]:
    """heartbeat's: the claims, the lease they get from now, and the starts to record."""
    return {**held_params(claims), "lease": check_lease(lease),
            "ran": run_times(claims, ended=False)}


def progress_params(reports: Sequence[tuple[Claim, float | None, str | None]]) -> dict[str, Any]:
    checked = [check_progress(fraction, note) for _, fraction, note in reports]
    return {
        **held_params([claim for claim, _, _ in reports]),
        "fractions": [fraction for fraction, _ in checked],
        "notes": [note for _, note in checked],
    }


def logs_params(
    runs: Sequence[tuple[Claim, list[dict[str, Any]], int]],
    ended: Sequence[str | None] | None,
) -> dict[str, Any]:
    claims = [claim for claim, _, _ in runs]
    endings = [None] * len(runs) if ended is None else list(ended)
    if len(endings) != len(runs):
        raise InvalidArgument(
            f"write_logs got {len(runs)} runs and {len(endings)} endings: pass one "
            "ending (or None) for each run"
        )
    for ending in endings:
        if ending is not None and ending not in job_logs.ENDINGS:
            raise InvalidArgument(
                f"a run's ending must be one of {', '.join(sorted(job_logs.ENDINGS))} "
                f"or None, got {ending!r}"
            )
    return {
        **held_params(claims),
        "attempts": [claim.attempts for claim in claims],
        "lines": [to_json(lines, f"log lines of job {claim.id}")
                  for claim, (_, lines, _) in zip(claims, runs, strict=True)],
        "dropped": [dropped for _, _, dropped in runs],
        "ended": endings,
    }


def complete_params(outcomes: Sequence[tuple[Claim, Any]]) -> dict[str, Any]:
    claims = [claim for claim, _ in outcomes]
    return {
        **held_params(claims),
        "ran": run_times(claims, ended=True),
        "results": [
            None if result is None else to_json(result, f"result of job {claim.id}")
            for claim, result in outcomes
        ],
    }


def fail_params(
    failures: Sequence[tuple[Claim, BaseException | str, float | None]],
) -> dict[str, Any]:
    claims = [claim for claim, _, _ in failures]
    return {
        **held_params(claims),
        "ran": run_times(claims, ended=True),
        "errors": [error_json(error) for _, error, _ in failures],
        # None: no more tries, whatever attempts are left (args its task rejects).
        "retry_in": [None if isinstance(error, ArgsRejected)
                     else retry_delay(c.attempts, retry_in)
                     for c, error, retry_in in failures],
    }


def release_params(claims: Sequence[Claim]) -> dict[str, Any]:
    """job_release_many's, for plain releases: no delay, no snooze counted."""
    nothing: list[Any] = [None] * len(claims)
    return {**held_params(claims), "delays": nothing, "untils": nothing,
            "snoozes": [False] * len(claims), "max_snoozes": nothing, "errors": nothing,
            "ran": [NOT_RECORDED] * len(claims)}


def snooze_params(snoozes: Sequence[tuple[Claim, Snooze, int | None]]) -> dict[str, Any]:
    """job_release_many's, for snoozes: each one's time, counted against its limit."""
    for _, snooze, max_snoozes in snoozes:
        if not isinstance(snooze, Snooze):
            raise InvalidArgument(f"expected a pgbaton.Snooze, got {snooze!r:.80}")
        if max_snoozes is not None:
            check_int4("max_snoozes", max_snoozes, minimum=0)
    return {
        **held_params([claim for claim, _, _ in snoozes]),
        "delays": [s.seconds for _, s, _ in snoozes],
        "untils": [s.until for _, s, _ in snoozes],
        "snoozes": [True] * len(snoozes),
        "max_snoozes": [limit for _, _, limit in snoozes],
        "errors": [None if limit is None else error_json(SnoozeLimit(
            f"the job snoozed {limit:,} times, its task's max_snoozes, and snoozed "
            f"again: it ends here" + (f" (last note: {s.note})" if s.note else "")))
            for _, s, limit in snoozes],
        # A snooze past its limit ends the job: its start is recorded, as an outcome's.
        "ran": run_times([claim for claim, _, _ in snoozes], ended=True),
    }


def end_params(ends: Sequence[tuple[Claim, str, BaseException | str]]) -> dict[str, Any]:
    for _, status, _ in ends:
        if status not in ("failed", "cancelled"):
            raise InvalidArgument(
                f"a job ends as 'failed' or 'cancelled', got {status!r:.80}")
    claims = [claim for claim, _, _ in ends]
    return {
        **held_params(claims),
        "ran": run_times(claims, ended=True),
        "statuses": [status for _, status, _ in ends],
        "errors": [error_json(error) for _, _, error in ends],
    }


# -- the leader's statements ---------------------------------------------------------------


def check_dead_share(min_dead_share: float) -> float:
    """vacuum's min_dead_share: a finite number >= 0."""
    if (isinstance(min_dead_share, bool) or not isinstance(min_dead_share, int | float)
            or not 0 <= min_dead_share < math.inf):
        raise InvalidArgument(
            f"min_dead_share must be a finite number >= 0, got {min_dead_share!r}"
        )
    return min_dead_share
