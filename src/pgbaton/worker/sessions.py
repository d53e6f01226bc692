"""How a worker gets its connections as it starts: waiting for a database that cannot be
reached yet, and which connection each part uses when its DSN may go through PgBouncer.

Claims, heartbeats and completions are one statement each and run anywhere, a
transaction pool included (without server-side prepared statements there). LISTEN and
the leader's advisory lock need a server session of their own (pooling.py says why):
they use `listen_dsn` when given, which must then reach PostgreSQL directly. Without
it, a pooled worker polls, and refuses to campaign for leadership rather than hold
the lock on a connection others share.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

from .. import _database_async as database
from .._transient import when_reachable
from ..dsn import normalize_dsn, redact_dsn, with_application_name
from ..errors import ConfigurationError, ConnectionFailed
from ..pooling import SessionConnect, transaction_pool_evidence
from ..queue_async import AsyncQueue
from .config import WorkerConfig

logger = logging.getLogger("pgbaton.worker")

@dataclass(frozen=True)
class Sessions:
    """What the worker's probe found, and where its session-bound parts connect."""

    # Why `dsn` is a transaction pool, or None when it gives sessions of their own.
    pooled: str | None
    # Where LISTEN and the leader connect; None: nowhere (the worker polls, no leader).
    session_dsn: str | None

    def connector(self, queue: AsyncQueue, application_name: str) -> SessionConnect | None:
        """How LISTEN and the leader open a session of their own; None when they cannot."""
        if self.session_dsn is None:
            return None
        if self.session_dsn == queue.dsn:
            return lambda: queue.connect(autocommit=True)
        dsn = with_application_name(self.session_dsn, application_name)
        return lambda: database.connect(dsn, autocommit=True)


def plan_sessions(config: WorkerConfig, dsn: str) -> Sessions:
    """Probe `dsn` (and `config.listen_dsn`); ConfigurationError, in one line, when the
    worker cannot run safely as configured."""
    pooled = transaction_pool_evidence(dsn)
    if config.listen_dsn is not None:
        listen_dsn = normalize_dsn(config.listen_dsn, "the listen DSN")
        try:
            listen_pooled = transaction_pool_evidence(listen_dsn)
        except ConnectionFailed as error:
            raise ConnectionFailed(f"the listen DSN: {error}") from error
        if listen_pooled is not None:
            raise ConfigurationError(
                f"the listen DSN ({redact_dsn(listen_dsn)}) must reach PostgreSQL directly, "
                f"but it goes through a transaction pool: {listen_pooled}"
            )
        return Sessions(pooled, listen_dsn)
    if pooled is None:
        return Sessions(None, dsn)
    if config.maintenance:
        raise ConfigurationError(
            f"{redact_dsn(dsn)} goes through a transaction pool ({pooled}), where the "
            "maintenance leader's advisory lock would be shared by every client: give "
            "the worker a direct connection to PostgreSQL with --listen-dsn "
            "(WorkerConfig.listen_dsn), or run it with --no-maintenance"
        )
    logger.warning(
        "%s goes through a transaction pool (%s) and no listen DSN was given: no LISTEN; "
        "new jobs are found by polling every %g s", redact_dsn(dsn), pooled,
        config.poll_interval,
    )
    return Sessions(pooled, None)


async def open_when_reachable(config: WorkerConfig, queue: AsyncQueue) -> Sessions:
    """Probe the DSNs and open the queue's pool; while the server cannot be reached (or
    goes away during these first statements), retry with jittered backoff for up to
    `config.connect_timeout` seconds. Other errors (a schema out of date, a refused
    configuration) are not retried."""
    async def attempt() -> Sessions:
        sessions = await asyncio.to_thread(plan_sessions, config, queue.dsn)
        if sessions.pooled is not None or config.listen_dsn is not None:
            # A listen DSN says the DSN is pooled even where the probe saw no proof.
            queue.prepare = False
        await queue.open()
        return sessions

    return await when_reachable(attempt, config.connect_timeout, logger)
