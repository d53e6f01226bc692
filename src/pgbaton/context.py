"""JobContext: what a running handler may know about its job and do about its claim."""

from __future__ import annotations

import asyncio
import datetime as dt
import threading
import uuid
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

from .models import Claim

_EVENT_LOCK = threading.Lock()


@dataclass(eq=False)
class JobContext:
    """Handed to a handler that asks for it with `@app.task(pass_context=True)`.

    `idempotency_key` is the same on every attempt of the job: pass it to the systems
    the handler calls (a payment provider, a mail service), so that a repeat after a
    crash is recognised there. Delivery is at least once; this is how effects are not.
    """

    claim: Claim
    worker_id: str
    _extend: Callable[[JobContext], Coroutine[Any, Any, bool]] = field(repr=False)
    _loop: asyncio.AbstractEventLoop = field(repr=False)
    # Why should_stop became true: 'cancelled' (an operator cancelled the job), 'lost'
    # (its lease ran out and it was taken, deleted or requeued), 'fenced' (the
    # heartbeat cannot reach the database), 'timeout' or 'shutdown'.
    stop_reason: str | None = None
    _stopped: bool = field(default=False, repr=False)
    # Made only when a sync handler waits on it: most jobs never need one.
    _stop_event: threading.Event | None = field(default=None, repr=False)

    @property
    def job_id(self) -> int:
        return self.claim.id

    @property
    def attempt(self) -> int:
        return self.claim.attempts

    @property
    def token(self) -> uuid.UUID:
        return self.claim.token

    @property
    def lease_until(self) -> dt.datetime:
        return self.claim.lease_until

    @property
    def idempotency_key(self) -> str:
        return self.claim.idempotency_key

    @property
    def should_stop(self) -> bool:
        """True once the claim was lost or cancelled, or the job timed out: a sync
        handler should check it between steps and return; its result is not written."""
        return self._stopped

    def wait_for_stop(self, timeout: float | None = None) -> bool:
        """Block (in a sync handler's thread) until told to stop, or until timeout."""
        with _EVENT_LOCK:
            if self._stop_event is None:
                self._stop_event = threading.Event()
                if self._stopped:
                    self._stop_event.set()
        return self._stop_event.wait(timeout)

    def _signal_stop(self, reason: str) -> None:
        if self._stopped:
            return
        self.stop_reason = reason
        self._stopped = True
        with _EVENT_LOCK:
            if self._stop_event is not None:
                self._stop_event.set()

    async def heartbeat(self) -> bool:
        """Extend this job's lease now (the worker also does it on its own schedule).
        False: the claim is lost, stop working on the job."""
        return await self._extend(self)

    def heartbeat_sync(self) -> bool:
        """heartbeat() for a sync handler running in the worker's thread pool."""
        return asyncio.run_coroutine_threadsafe(self._extend(self), self._loop).result()
