"""Writes outcomes in batches: one statement for many jobs, each row fenced by its token.

Outcomes queue up while a write is in flight, so under load each statement carries
many rows and when idle a single outcome is written at once (no tick to wait for).
A write that fails because the server went away is retried with backoff until the
claim's lease has run out; after that the job belongs to someone else.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .._base import Claim
from ..errors import ConnectionFailed
from ..queue_async import AsyncQueue

logger = logging.getLogger("pgbaton.worker")

MAX_BATCH = 500
RETRY_START_SECONDS = 0.05
RETRY_MAX_SECONDS = 2.0


@dataclass
class Outcome:
    claim: Claim
    ok: bool
    result: Any = None
    error: BaseException | str | None = None
    retry_in: float | None = None


class Completer:
    def __init__(
        self,
        queue: AsyncQueue,
        on_written: Callable[[Outcome, bool], None],
    ) -> None:
        self._queue = queue
        self._on_written = on_written
        self._pending: list[Outcome] = []
        self._wakeup = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()

    def add(self, outcome: Outcome) -> None:
        self._pending.append(outcome)
        self._idle.clear()
        self._wakeup.set()

    async def drained(self) -> None:
        """Return once every outcome added so far has been written or given up."""
        await self._idle.wait()

    async def run(self) -> None:
        while True:
            await self._wakeup.wait()
            self._wakeup.clear()
            while self._pending:
                batch, self._pending = self._pending[:MAX_BATCH], self._pending[MAX_BATCH:]
                await self._write(batch)
            self._idle.set()

    async def _write(self, batch: list[Outcome]) -> None:
        delay = RETRY_START_SECONDS
        while batch:
            try:
                completes = [o for o in batch if o.ok]
                fails = [o for o in batch if not o.ok]
                accepted = await self._queue.complete_many(
                    [(o.claim, o.result) for o in completes]
                )
                accepted += await self._queue.fail_many(
                    [(o.claim, o.error or "unknown error", o.retry_in) for o in fails]
                )
            except ConnectionFailed as error:
                now = dt.datetime.now(dt.UTC)
                expired = [o for o in batch if o.claim.lease_until <= now]
                for outcome in expired:
                    logger.warning(
                        "gave up writing job %s: lease ran out while the database was away",
                        outcome.claim.id,
                    )
                    self._on_written(outcome, False)
                batch = [o for o in batch if o.claim.lease_until > now]
                logger.warning("writing %d outcomes failed (%s); retrying", len(batch), error)
                await asyncio.sleep(delay)
                delay = min(delay * 2, RETRY_MAX_SECONDS)
                continue
            for outcome, ok in zip(completes + fails, accepted, strict=True):
                self._on_written(outcome, ok)
            return
