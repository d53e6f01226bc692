"""Bounds a statement of a worker's hot path by cutting its connection off (async only).

A connection can go silent for good without an error: a firewall or a NAT that forgets
the flow, a proxy that hangs. A statement sent on it waits for TCP to give up, hours
later, and the worker's claim (or its outcomes, or its starts) with it. Cancelling the
waiting task does not help at once: psycopg then sends the server a cancel request and
waits for the statement's end on the same silent connection, five seconds and more. So
a timer shuts the socket down instead: the statement fails at once as a lost
connection, which the pool replaces, and the caller gets StatementCutOff, a
ConnectionFailed that it retries like any passing error, on another connection. Not a
psycopg error, so AsyncDatabase._connection does not check the pool's idle connections
on it (they may be as silent, and a check would wait on them): each is cut off in turn
if it is.

Shutting the socket does not stop the server: a statement that was only slow may still
commit, and a claim's jobs are then held by nobody until their leases run out. So the
bound is generous: the worker's lease, and never under MIN_BOUND_SECONDS.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
from collections.abc import AsyncIterator
from typing import Any

import psycopg

from .errors import ConnectionFailed

# The shortest bound a worker sets, whatever its lease: a claim slower than a one-second
# lease on a loaded machine is slow, not silent.
MIN_BOUND_SECONDS = 5.0


class StatementCutOff(ConnectionFailed):
    """A statement got no answer within its bound: its connection was cut off."""


@contextlib.asynccontextmanager
async def cut_off_after(conn: psycopg.AsyncConnection[Any], seconds: float
                        ) -> AsyncIterator[None]:
    """Within the block, a statement on `conn` that has not answered after `seconds`
    has its connection shut down, and the block raises StatementCutOff."""
    cut: list[bool] = []
    timer = asyncio.get_running_loop().call_later(seconds, _cut, conn, cut)
    try:
        yield
    except psycopg.OperationalError as error:
        if cut:
            raise StatementCutOff(
                f"no answer from PostgreSQL within {seconds:g} s: the connection was "
                "cut off, and the statement is sent again on another one") from error
        raise
    finally:
        timer.cancel()  # before the pool has the connection back
    if cut:
        # The timer fired as the answer came: the pool must not hand out the socket
        # it shut down.
        await conn.close()


def _cut(conn: psycopg.AsyncConnection[Any], cut: list[bool]) -> None:
    if shut_down(conn):
        cut.append(True)


def shut_down(conn: psycopg.AsyncConnection[Any]) -> bool:
    """Shut the connection's socket down, whatever waits on it: a wait for its next
    message ends at once as a lost connection. False if it was closed already, or the
    platform cannot (the wait then goes on)."""
    if conn.closed:
        return False
    # A duplicate of the descriptor: shutdown() acts on the socket that both name, and
    # libpq's own descriptor stays valid for it to read the end from, and close.
    try:
        with socket.socket(fileno=os.dup(conn.pgconn.socket)) as sock:
            sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        return False
    return True
