"""Which errors are worth retrying as they are: the worker's parts and the maintenance
leader retry these with backoff and raise the rest; when_reachable is the one loop
that waits for a database that cannot be reached yet."""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable
from typing import TypeVar

import psycopg

from .errors import ConnectionFailed

# SQLSTATE classes of errors that say the database could not do it *now*: connection
# trouble, a cancelled statement (statement_timeout, pg_cancel_backend), a lock not
# available or a deadlock, too few resources, an operator's intervention.
TRANSIENT_SQLSTATE_CLASSES = ("08", "40", "53", "55", "57", "58")


def is_transient(error: BaseException) -> bool:
    """True for a database error worth retrying as it is, after a pause."""
    if isinstance(error, ConnectionFailed | TimeoutError):
        return True
    if isinstance(error, psycopg.OperationalError) and error.sqlstate is None:
        return True  # the connection broke before the server could say why
    sqlstate = getattr(error, "sqlstate", None) if isinstance(error, psycopg.Error) else None
    if sqlstate is None or _refused_in_session(error, sqlstate):
        return False
    return bool(sqlstate.startswith(TRANSIENT_SQLSTATE_CLASSES))


def _refused_in_session(error: BaseException, sqlstate: str) -> bool:
    """A class 08 error the server raised at level ERROR: it refused one message and the
    session lives on. 08P01 (protocol violation) comes so when a statement is bound to a
    prepared statement of another shape, as through a transaction pool that hands a
    client another client's server connection (docs/howto/pgbouncer.md). Retrying does not
    mend that, and the connection was not lost: a session the server ends says FATAL,
    one that breaks says nothing at all (no SQLSTATE)."""
    if not sqlstate.startswith("08") or not isinstance(error, psycopg.Error):
        return False
    # PgBouncer's own errors carry only the (English) localized severity.
    return (error.diag.severity_nonlocalized or error.diag.severity) == "ERROR"


# SQLSTATEs that mean the session is gone, not that the statement failed.
_SESSION_LOST = frozenset({"57P01", "57P02", "57P03"})  # admin/crash shutdown, starting up


def is_connection_loss(error: BaseException) -> bool:
    """True for an error that means the server or the connection went away (class 08,
    a shutdown, or no SQLSTATE at all), as opposed to an error in the statement, such as
    a deadlock or a cancelled query, which the caller should see as it is."""
    sqlstate = getattr(error, "sqlstate", None)
    if sqlstate is None:
        return True
    if _refused_in_session(error, sqlstate):
        return False
    return sqlstate.startswith("08") or sqlstate in _SESSION_LOST


def is_unreachable(error: BaseException) -> bool:
    """True while a worker starting up should wait for the server: it refused the
    connection (ConnectionFailed), or the session went away during the first statements
    (a server shutting down or restarting), rather than answering them with an error."""
    if isinstance(error, ConnectionFailed):
        return True
    return isinstance(error, psycopg.OperationalError) and is_connection_loss(error)


# A statement prepared by psycopg missing, already there, or of another shape.
_PREPARED_STATEMENT_SQLSTATES = frozenset({"26000", "42P05"})


def is_prepared_statement_mixup(error: BaseException) -> bool:
    """True for the errors of a client that prepares statements through a transaction
    pool: its statement unknown on the server connection it got, a name another client
    prepared there already, or a bind to another client's statement of the same name."""
    sqlstate = getattr(error, "sqlstate", None)
    if sqlstate in _PREPARED_STATEMENT_SQLSTATES:
        return True
    return sqlstate == "08P01" and "prepared statement" in str(error)


RECONNECT_FIRST_SECONDS = 0.5
RECONNECT_MAX_SECONDS = 10.0
T = TypeVar("T")


async def when_reachable(
    attempt: Callable[[], Awaitable[T]], timeout: float, logger: logging.Logger, *,
    gave_up: Callable[[Exception], Exception] | None = None,
) -> T:
    """attempt()'s result; while the server cannot be reached (or goes away during the
    attempt), attempt again with jittered backoff for up to `timeout` seconds, then raise
    the last error (or gave_up(error), from it). Other errors are raised at once. The
    one reconnect loop: the worker's start (worker/sessions.py) and `pgbaton worker`'s
    wait for the database (cli/main.py) both use it."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    pause = RECONNECT_FIRST_SECONDS
    while True:
        try:
            return await attempt()
        except Exception as error:
            if not is_unreachable(error):
                raise
            left = deadline - loop.time()
            if left <= 0:
                if gave_up is None:
                    raise
                raise gave_up(error) from error
            wait = min(left, pause * random.uniform(0.75, 1.0))
            logger.warning(
                "cannot reach the database yet: %s; retrying in %.1f s", error, wait,
                extra={"retry_in": round(wait, 3), "gives_up_in": round(left, 3)},
            )
            await asyncio.sleep(wait)
            pause = min(pause * 2, RECONNECT_MAX_SECONDS)
