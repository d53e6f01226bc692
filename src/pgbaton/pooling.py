"""Does a DSN give each client a server session of its own, or does it go through a
transaction pool (PgBouncer's `pool_mode = transaction` or `statement`)?

LISTEN and a session-level advisory lock need a session of their own: through a
transaction pool a LISTEN goes to whichever client gets that server connection next,
and an advisory lock stays with a server connection that other clients then use, each
of them holding it too; and a statement prepared on one server connection is unknown on
the next. The worker and `pgbaton doctor` ask here; a Queue asks as it opens its pool
(_database.transaction_pool_evidence runs the probe, for both).

The probe: connection A asks which server process answers it; connections B and C
each open a transaction, which a pool pins to one server connection, and ask the same;
they end their transactions and A asks again; three rounds. A server gives every client
its own process for the client's whole life, so B's and C's never equal A's and A's
never changes. In a pool, A's server connection is idle as soon as A's statement ends,
and the pool gives it to B or C before it opens another (whether it hands out the most
or the least recently used), or gives A another one the next time. Either is proof; a
busy pool whose other clients took A's connection in every round would go unseen, never
the reverse: a direct connection is never taken for a pooled one. B asks before C, so
a pool of one server connection answers at B rather than make C wait for B.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict

from . import _database

# Opens a connection with a server session of its own, in autocommit (for LISTEN, or
# for the leader's lock, which lives as long as that session).
SessionConnect = Callable[[], Awaitable[psycopg.AsyncConnection[Any]]]


def transaction_pool_evidence(dsn: str) -> str | None:
    """Why `dsn` is a transaction pool, in one sentence; None when nothing says so."""
    with _database.connect(dsn, autocommit=True) as first:
        return _database.transaction_pool_evidence(first, dsn)


def proxy_hint(dsn: str, server_port: int | None) -> str | None:
    """The DSN's port against the one the server listens on: a mismatch means something
    sits between them (PgBouncer's 6432, a port forward)."""
    port = conninfo_to_dict(dsn).get("port")
    if server_port is None or not port or "," in str(port) or int(port) == server_port:
        return None
    return f"the DSN names port {port}; the server behind it listens on {server_port}"
