"""LISTEN for new jobs and wake the worker, and for running jobs cancelled and tell it,
reconnecting whenever the connection drops.

The LISTEN needs a server session of its own: `connect` gives one (the listen DSN when
the worker's own goes through PgBouncer, worker/sessions.py)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

import psycopg

from .._cut_off import shut_down
from .._sql import cancelled_channel
from ..pooling import SessionConnect
from ..queue_async import AsyncQueue
from .supervisor import is_transient

logger = logging.getLogger("pgbaton.worker")


class ListenSession:
    """The LISTEN session of the moment, which the worker's echo cuts off when it has
    gone silent without an error (worker/echo.py): listen() then opens a new one."""

    def __init__(self) -> None:
        self.conn: psycopg.AsyncConnection[Any] | None = None

    def cut_off(self) -> bool:
        """Make the session's wait end as a lost connection; False if there is none."""
        return self.conn is not None and shut_down(self.conn)


async def listen(
    queue: AsyncQueue,
    queues: list[str] | None,
    wake: Callable[[str], None],
    *,
    retry_seconds: float = 1.0,
    connect: SessionConnect | None = None,
    cancelled: Callable[[str | None], None] | None = None,
    deaf: Callable[[], None] | None = None,
    echo_channel: str | None = None,
    session: ListenSession | None = None,
) -> None:
    """Call wake(reason) on every notification for our queues, and cancelled(payload) on
    every running job's cancel (its id, as sent: anyone may NOTIFY, so the worker checks
    its claims; None once the session listens, after a (re)connect, when cancels may
    have gone to nobody) and on every echo of the worker's own channel (worker/echo.py),
    and deaf() when the session is lost. `session` holds the connection of the moment.
    Runs until cancelled."""
    cancel_channels = {cancelled_channel(queue.schema), echo_channel}
    while True:
        try:
            conn = await (connect() if connect else queue.connect(autocommit=True))
            if session is not None:
                session.conn = conn
            async with conn:
                await queue.engine.listen(conn)
                if cancelled is not None:
                    await queue.engine.listen_cancelled(conn)
                    if echo_channel is not None:
                        await queue.engine.listen_echo(conn, echo_channel)
                    cancelled(None)
                # Jobs committed while we were not listening sent their NOTIFY to nobody.
                wake("listen")
                async for notification in conn.notifies():
                    if notification.channel in cancel_channels:
                        if cancelled is not None:
                            cancelled(notification.payload)
                    elif queues is None or notification.payload in queues:
                        wake("notify")
        except Exception as error:
            if not is_transient(error):
                raise
            logger.warning("LISTEN connection lost (%s); reconnecting", error)
        finally:
            if session is not None:
                session.conn = None
            if deaf is not None:
                deaf()
        await asyncio.sleep(retry_seconds)
