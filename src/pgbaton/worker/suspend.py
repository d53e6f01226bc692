"""Writes a handler's durable sleep or wait (ctx.sleep, ctx.wait_for): the job goes back
to pending until its wake time, its attempt given back, its claim released
(docs/howto/durable-steps.md). The run ends with nothing else to write.

A suspension refused by its fence (the job was cancelled while its handler ran, or its
lease ran out and another worker took it) is a lost claim like any other: counted,
said in one line, and let go of (executor.py), with nothing more written for it.

A write that fails for a passing reason is retried, as the completer retries outcomes,
until the claim's lease has run out; after that the reaper hands the job back (its
attempt counted) and its next run replays the steps stored so far.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
from collections.abc import Callable
from typing import Any

from ..steps import Suspend
from .held import UNANSWERED, Running, loss_of
from .supervisor import is_transient

logger = logging.getLogger("pgbaton.worker")

RETRY_START_SECONDS = 0.05
RETRY_MAX_SECONDS = 2.0


async def write_suspension(
    running: Running, suspend: Suspend, notify: Callable[..., None],
    wake_in: Callable[[float], None] | None = None,
) -> None:
    """Suspend the job as the handler asked; nothing is written for a lost claim.
    `wake_in`: told how many seconds from now the job is due again (a job that becomes
    due sends no NOTIFY), when its wake time is a deadline."""
    queue, claim = running.context._queue, running.claim
    if running.stopped or queue is None:
        return
    delay = RETRY_START_SECONDS
    while True:
        try:
            wake = await queue.engine.step_suspend(
                claim, suspend.seq, suspend.name, suspend.kind, until=suspend.until,
                seconds=suspend.seconds, deadline=suspend.deadline, event=suspend.event,
            )
            break
        except Exception as error:
            if not is_transient(error) or claim.lease_until <= dt.datetime.now(dt.UTC):
                logger.warning(
                    "job %s: could not suspend it at %s %r (%s); its lease runs out and "
                    "its next run replays its steps", claim.id, suspend.kind, suspend.name,
                    error,
                )
                return
            await asyncio.sleep(delay)
            delay = min(delay * 2, RETRY_MAX_SECONDS)
    if wake is None:
        await _refused(running, suspend, notify)
        return
    if wake_in is not None and suspend.deadline:
        wake_in((wake - dt.datetime.now(dt.UTC)).total_seconds())
    detail: dict[str, Any] = {"kind": suspend.kind, "name": suspend.name,
                              "until": wake.isoformat(), "event": suspend.event}
    notify("job.sleeping", running, detail=detail)


async def _refused(running: Running, suspend: Suspend, notify: Callable[..., None]) -> None:
    """The fence refused the suspension: the claim is lost. Marked so, the executor lets
    go of it (a cancelled job's key is free now, not at the lease's end) and writes
    nothing more; one read says why, for the log line and the handler's stop reason."""
    queue, claim = running.context._queue, running.claim
    assert queue is not None
    try:
        [(status, holder)] = await asyncio.wait_for(
            queue.engine.claims_lost([claim]), timeout=running.lease)
    except Exception:  # the claim is lost all the same; only the reason is unknown
        status, holder = UNANSWERED, None
    reason, why = loss_of(status, holder)
    running.lost, running.stop_reason, running.lost_detail = True, reason, why
    what = "sleep" if suspend.kind == "sleep" else f"wait for event {suspend.name!r}"
    logger.warning("job %s: could not %s: this worker lost the claim (%s); nothing is "
                   "written for the run, and the claim is let go", claim.id, what, why)
    notify("job.lost", running)
