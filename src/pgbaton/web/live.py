"""The live overview: one LISTEN connection per dashboard process, fanned out to every
open page as server-sent events.

The hub runs only while a page is open: the first subscriber starts it, the last one
to leave stops it, so a dashboard nobody looks at holds no connection and runs no
query. A NOTIFY (a job enqueued) or, failing that, the poll interval makes it render
the overview again, once for all open pages. NOTIFY is sent on enqueue only, so the
poll is what shows completions. A render that takes long (a huge, busy table) spaces
the next ones out, so the live view never keeps a backend busy.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable

import psycopg

from ..dsn import CLIENT_ENCODING

logger = logging.getLogger("pgbaton.web")
POLL_SECONDS = 2.0
RETRY_SECONDS = 2.0


class LiveHub:
    def __init__(
        self,
        dsn: str,
        channel: str,
        render: Callable[[], Awaitable[str]],
        poll_seconds: float = POLL_SECONDS,
    ) -> None:
        self._dsn = dsn
        self._channel = channel
        self._render = render
        self._poll = poll_seconds
        self._subscribers: set[asyncio.Queue[str]] = set()
        self._new: set[asyncio.Queue[str]] = set()  # subscribed since the last render
        self._task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        self._last = ""

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    def subscribe(self) -> asyncio.Queue[str]:
        inbox: asyncio.Queue[str] = asyncio.Queue(maxsize=2)
        self._subscribers.add(inbox)
        # Not the last panel rendered: the page that subscribes was rendered since, and
        # may show other counts. The next render goes to it whatever it holds.
        self._new.add(inbox)
        self._wake.set()
        if not self.running:
            self._task = asyncio.create_task(self._run(), name="pgbaton-dashboard-live")
        return inbox

    async def unsubscribe(self, inbox: asyncio.Queue[str]) -> None:
        self._subscribers.discard(inbox)
        self._new.discard(inbox)
        if not self._subscribers:
            await self.stop()

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._last = ""
        self._new.clear()

    async def _run(self) -> None:
        listener = asyncio.create_task(self._listen())
        try:
            while True:
                self._wake.clear()  # a NOTIFY from here on means another render
                # The pages subscribed before this render began: a later one may have
                # been rendered after it, and waits for the next.
                new, self._new = self._new, set()
                began = time.monotonic()
                try:
                    html = await self._render()
                except Exception as error:
                    logger.warning("live overview: could not read the queue: %s", error)
                    self._new |= new  # still owed a first render
                else:
                    changed = html != self._last
                    self._last = html
                    recipients = self._subscribers if changed else new & self._subscribers
                    for inbox in list(recipients):
                        if inbox.full():  # a slow page only ever needs the newest
                            inbox.get_nowait()
                        inbox.put_nowait(html)
                # On a table so busy that the overview takes long to read, read it
                # less often: the live view never keeps a backend busy more than a
                # fifth of the time. A burst of NOTIFYs is one render, not one each.
                spent = time.monotonic() - began
                await asyncio.sleep(max(0.2, 4 * spent))
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), max(self._poll, 4 * spent))
        finally:
            listener.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await listener

    async def _listen(self) -> None:
        while True:
            try:
                conn = await psycopg.AsyncConnection.connect(
                    self._dsn, autocommit=True, application_name="pgbaton dashboard live",
                    client_encoding=CLIENT_ENCODING,
                )
                async with conn:
                    await conn.execute(f'LISTEN "{self._channel}"')
                    async for _ in conn.notifies():
                        self._wake.set()
            except psycopg.Error as error:
                logger.warning("live overview: LISTEN failed (%s); polling meanwhile", error)
            await asyncio.sleep(RETRY_SECONDS)


def sse(event: str, data: str) -> str:
    """One server-sent event; every line of data gets its own `data:` field."""
    lines = "".join(f"data: {line}\n" for line in data.splitlines() or [""])
    return f"event: {event}\n{lines}\n"
