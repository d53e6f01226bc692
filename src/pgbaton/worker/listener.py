"""LISTEN for new jobs and wake the worker, reconnecting whenever the connection drops.

The LISTEN needs a server session of its own: `connect` gives one (the listen DSN when
the worker's own goes through PgBouncer, worker/sessions.py)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from ..pooling import SessionConnect
from ..queue_async import AsyncQueue
from .supervisor import is_transient

logger = logging.getLogger("pgbaton.worker")


async def listen(
    queue: AsyncQueue,
    queues: list[str] | None,
    wake: Callable[[str], None],
    retry_seconds: float = 1.0,
    connect: SessionConnect | None = None,
) -> None:
    """Call wake(reason) on every notification for our queues. Runs until cancelled."""
    while True:
        try:
            conn = await (connect() if connect else queue.connect(autocommit=True))
            async with conn:
                await queue.engine.listen(conn)
                # Jobs committed while we were not listening sent their NOTIFY to nobody.
                wake("listen")
                async for notification in conn.notifies():
                    if queues is None or notification.payload in queues:
                        wake("notify")
        except Exception as error:
            if not is_transient(error):
                raise
            logger.warning("LISTEN connection lost (%s); reconnecting", error)
        await asyncio.sleep(retry_seconds)
