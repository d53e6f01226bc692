"""Shows that the worker's LISTEN session still hears cancels: every ECHO_SECONDS, while
jobs wait ahead in the worker, it NOTIFYs a channel of its own, on which that session
listens beside the cancels' (_sql.echo_channel), with an echo (`echo:<worker id>:<n>`),
and the session hears it back.

A job claimed ahead starts with no statement of its own only while the worker hears
cancels (worker/starter.py), and a session can stop hearing without an error: a route
dropped, a peer gone without closing the socket, and nothing is raised until TCP gives
up, hours later. So hearing counts only while the latest echo heard back was sent less
than ECHO_STALE_SECONDS ago (HeldJobs.hearing_cancels); past that, starts are written
first again, until an echo comes back. A cancel sent in those seconds reaches its job
late: at the job's next beat (an early one a second into its run) or its outcome, which
its handler's cancel or a refused write then stops. A session that has heard none for
ECHO_SILENT_SECONDS more is cut off (ListenSession.cut_off), and listen() opens a new
one, rather than waiting for TCP.

The notification queue is one for every channel, in commit order, and a session reads
it in that order for every channel it listens on, so an echo heard says that every
cancel committed before it was heard too. An echo's commit does not wait for the disk
(the statement sets synchronous_commit off for itself): it holds the server's notify
lock only as long as a commit's own work. The channel is the worker's own so that no
other worker hears it: on the cancels' channel, each of W workers heard every other's
echoes, W² deliveries twice a second while jobs waited ahead. Echoes of an older
release's workers still come on the cancels' channel, and are ignored there.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import secrets
from collections import Counter
from collections.abc import Callable

from .._sql import ECHO_TOKEN_LENGTH, echo_channel
from ..queue_async import AsyncQueue
from .held import ECHO_STALE_SECONDS, HeldJobs

logger = logging.getLogger("pgbaton.worker")

ECHO_SECONDS = 0.5
ECHO_MIN_GAP_SECONDS = 0.1
ECHO_PREFIX = "echo:"
# No echo of its own heard this long while sending them: warned (at most once a minute).
ECHO_SILENT_SECONDS = 10.0
WARN_EVERY_SECONDS = 60.0


class Echo:
    def __init__(
        self, queue: AsyncQueue, held: HeldJobs, worker_id: str, *,
        cut_session: Callable[[], bool] | None = None, stats: Counter[str] | None = None,
    ) -> None:
        self._queue = queue
        self._held = held
        # ListenSession.cut_off: ends a silent LISTEN session, which listen() then opens
        # anew (listen_sessions_cut in the worker's statistics).
        self._cut_session = cut_session
        self._stats: Counter[str] = stats if stats is not None else Counter()
        # This worker's own channel: drawn, not derived from the worker id, which may
        # be long or shared by mistake (a clash only means ignoring the other's echoes).
        self.channel = echo_channel(queue.schema, secrets.token_hex(ECHO_TOKEN_LENGTH // 2))
        self._prefix = f"{ECHO_PREFIX}{worker_id}:"
        self._sent: dict[int, float] = {}  # echo number -> when it was sent
        self._number = 0
        self._warned_at = -math.inf  # when an echo's failure or silence was last logged
        self._wanted = asyncio.Event()  # a start was written first for want of an echo

    async def run(self) -> None:
        """Send an echo every ECHO_SECONDS while jobs wait ahead in this worker and its
        session listens: only then does hearing matter, and an idle fleet sends none.
        Never raises: an echo that fails is an echo unheard (starts are written first
        meanwhile), logged at most once a minute."""
        unheard_since: float | None = None
        last_sent = -math.inf
        while True:
            now = self._held.now()
            self._wanted.clear()
            if self._held.listening and self._held.waiting:
                last_sent = now
                self._number += 1
                self._sent[self._number] = now
                if len(self._sent) > 2 * ECHO_STALE_SECONDS / ECHO_SECONDS + 2:
                    del self._sent[min(self._sent)]
                try:
                    await asyncio.wait_for(
                        self._queue.engine.echo(self.channel, f"{self._prefix}{self._number}"),
                        timeout=ECHO_STALE_SECONDS)
                except Exception as error:
                    self._warn("could not send its echo (%s: %s); jobs claimed ahead have "
                               "their start written first meanwhile",
                               type(error).__name__, error)
                if self._held.echo_heard >= now - ECHO_SILENT_SECONDS:
                    unheard_since = None
                elif unheard_since is None:
                    unheard_since = now
                elif now - unheard_since > ECHO_SILENT_SECONDS:
                    # A session that went silent says nothing until TCP gives up, hours
                    # later: cut it off, and listen() opens a new one.
                    cut = self._cut_session is not None and self._cut_session()
                    if cut:
                        self._stats["listen_sessions_cut"] += 1
                    self._warn("its LISTEN session has heard none of its echoes for %.0f s: "
                               "it may reach another database than its pool (listen_dsn), "
                               "or a connection that went silent%s; jobs claimed ahead have "
                               "their start written first meanwhile", now - unheard_since,
                               " (cut off: a new one is opened)" if cut else "")
                    unheard_since = None
            # The next echo is due in ECHO_SECONDS, or sooner when a start had to be
            # written for want of a fresh one (a backlog that begins after an idle
            # spell): at once, but never closer than ECHO_MIN_GAP_SECONDS to the last.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wanted.wait(), ECHO_SECONDS)
            await asyncio.sleep(max(0.0, last_sent + ECHO_MIN_GAP_SECONDS - self._held.now()))

    def want(self) -> None:
        """A job claimed ahead is about to have its start written because no echo was
        heard lately (worker/starter.py): send the next one now."""
        self._wanted.set()

    def _warn(self, message: str, *args: object) -> None:
        if self._held.now() - self._warned_at >= WARN_EVERY_SECONDS:
            self._warned_at = self._held.now()
            logger.warning("worker echo: " + message, *args)

    def heard(self, payload: str) -> bool:
        """Whether a payload heard is an echo: this worker's own (the session hears; its
        send time is kept) or another worker's (an older release's, on the cancels'
        channel, or one that drew the same channel: nothing to do)."""
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
