"""Does a DSN give each client a server session of its own, or does it go through a
transaction pool (PgBouncer's `pool_mode = transaction` or `statement`)?

LISTEN and a session-level advisory lock need a session of their own: through a
transaction pool a LISTEN goes to whichever client gets that server connection next,
and an advisory lock stays with a server connection that other clients then use, each
of them holding it too. The worker and `pgbaton doctor` ask here.

The probe: connection A asks which server process answers it; connection B opens a
transaction, which a pool pins to one server connection, and asks the same; then A
asks again. A server gives every client its own process for the client's whole life,
so B's differs from A's and A's never changes. A pool hands A's server connection to
B as soon as A's statement ends (PgBouncer reuses the most recent first), or gives A
another one the next time. Either is proof; a pool that avoided both by chance would
go unseen, never the reverse: a direct connection is never taken for a pooled one.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict

from . import _database, _sql

# Opens a connection with a server session of its own, in autocommit (for LISTEN, or
# for the leader's lock, which lives as long as that session).
SessionConnect = Callable[[], Awaitable[psycopg.AsyncConnection[Any]]]


def transaction_pool_evidence(dsn: str) -> str | None:
    """Why `dsn` is a transaction pool, in one sentence; None when nothing says so."""
    query = _sql.queries("pgbaton")["server_backend"]
    with _database.connect(dsn, autocommit=True) as first, _database.connect(dsn) as second:
        before = first.execute(query).fetchone()
        inside = second.execute(query).fetchone()  # a transaction: pinned to one server
        after = first.execute(query).fetchone()
        second.rollback()
    assert before is not None and inside is not None and after is not None
    if inside["pid"] == before["pid"]:
        return (f"two client connections were answered by one server process "
                f"(pid {before['pid']})")
    if after["pid"] != before["pid"]:
        return (f"one client connection was answered by two server processes "
                f"(pid {before['pid']}, then {after['pid']})")
    return None


def proxy_hint(dsn: str, server_port: int | None) -> str | None:
    """The DSN's port against the one the server listens on: a mismatch means something
    sits between them (PgBouncer's 6432, a port forward)."""
    port = conninfo_to_dict(dsn).get("port")
    if server_port is None or not port or "," in str(port) or int(port) == server_port:
        return None
    return f"the DSN names port {port}; the server behind it listens on {server_port}"
