"""Shows that the worker's LISTEN session still hears cancels: every ECHO_SECONDS the
worker NOTIFYs the cancels' channel with an echo of its own (`echo:<worker id>:<n>`),
and the session hears it back.

A job claimed ahead starts with no statement of its own only while the worker hears
cancels (worker/starter.py), and a session can stop hearing without an error: a route
dropped, a peer gone without closing the socket, and nothing is raised until TCP gives
up, hours later. So hearing counts only while the latest echo heard back was sent less
than ECHO_STALE_SECONDS ago (HeldJobs.hears_cancels); past that, starts are written
first again, until an echo comes back. A cancel sent in those seconds reaches its job
late: at the job's next beat (an early one a second into its run) or its outcome, which
its handler's cancel or a refused write then stops.
"""

from __future__ import annotations

import asyncio
import logging

from .._sql import cancelled_channel
from ..queue_async import AsyncQueue
from .held import ECHO_STALE_SECONDS, HeldJobs
from .supervisor import is_transient

logger = logging.getLogger("pgbaton.worker")

ECHO_SECONDS = 1.0
ECHO_PREFIX = "echo:"


class Echo:
    def __init__(self, queue: AsyncQueue, held: HeldJobs, worker_id: str) -> None:
        self._queue = queue
        self._held = held
        self._channel = cancelled_channel(queue.schema)
        self._prefix = f"{ECHO_PREFIX}{worker_id}:"
        self._sent: dict[int, float] = {}  # echo number -> when it was sent
        self._number = 0

    async def run(self) -> None:
        """Send an echo every ECHO_SECONDS while the session listens; raises what is not
        a passing error (the supervisor logs it and starts this again)."""
        while True:
            if self._held.listening:
                self._number += 1
                self._sent[self._number] = self._held.now()
                if len(self._sent) > 2 * ECHO_STALE_SECONDS / ECHO_SECONDS + 2:
                    del self._sent[min(self._sent)]
                try:
                    await asyncio.wait_for(
                        self._queue.engine.echo(self._channel, f"{self._prefix}{self._number}"),
                        timeout=ECHO_STALE_SECONDS)
                except Exception as error:
                    if not is_transient(error):
                        raise
                    # Unheard, it goes stale like a lost one: the heartbeat says why.
            await asyncio.sleep(ECHO_SECONDS)

    def heard(self, payload: str) -> bool:
        """Whether a payload on the cancels' channel is an echo: this worker's own (the
        session hears; its send time is kept) or another worker's (nothing to do)."""
        if not payload.startswith(ECHO_PREFIX):
            return False
        if not payload.startswith(self._prefix):
            return True
        number = payload[len(self._prefix):]
        if number.isascii() and number.isdigit():
            sent = self._sent.pop(int(number), None)
            if sent is not None and sent > self._held.echo_heard:
                self._held.echo_heard = sent
        return True
