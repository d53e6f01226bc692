"""Watches the event loop from a thread: a handler that blocks it (time.sleep in an
async def, a CPU-bound loop) stops every heartbeat, so its lease and its neighbours'
may run out. The watchdog names the handler and how long it blocked the loop."""

from __future__ import annotations

import asyncio
import logging
import sys
import threading
import time
import types
from collections.abc import Callable

logger = logging.getLogger("pgbaton.worker")


class LoopWatchdog:
    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        threshold: Callable[[], float],
        name_blocker: Callable[[types.FrameType | None], tuple[str, int | None] | None],
        on_blocked: Callable[[float, str | None, int | None], object],
    ) -> None:
        self._loop = loop
        self._threshold = threshold  # seconds, read each round: it follows the leases held
        self._name_blocker = name_blocker
        self._on_blocked = on_blocked
        self._seen = time.monotonic()
        self._stop = threading.Event()
        self._loop_thread = threading.get_ident()
        self._thread = threading.Thread(target=self._watch, name="pgbaton-watchdog",
                                        daemon=True)

    def start(self) -> None:
        self._loop.call_soon(self._tick)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _tick(self) -> None:
        self._seen = time.monotonic()
        if not self._stop.is_set():
            self._loop.call_later(min(0.05, self._threshold() / 4), self._tick)

    def _watch(self) -> None:
        blocker: tuple[str, int | None] | None = None
        blocked_since: float | None = None
        while not self._stop.wait(min(0.05, self._threshold() / 4)):
            late = time.monotonic() - self._seen
            if late > self._threshold():
                if blocked_since is None:
                    blocked_since = self._seen
                    frame = sys._current_frames().get(self._loop_thread)
                    blocker = self._name_blocker(frame)
                    logger.warning(
                        "the event loop has been blocked for %.2f s%s: heartbeats cannot "
                        "run; blocking calls belong in a plain def handler (run in a "
                        "thread) or in asyncio.to_thread()", late,
                        f" by task {blocker[0]!r} (job {blocker[1]})" if blocker else "",
                    )
            elif blocked_since is not None:
                duration = self._seen - blocked_since
                task, job_id = blocker if blocker else (None, None)
                logger.warning(
                    "the event loop was blocked for %.2f s%s", duration,
                    f" by task {task!r} (job {job_id})" if task else "",
                )
                self._on_blocked(duration, task, job_id)
                blocked_since, blocker = None, None
