# WARNING: generated from _database_async.py by tools/async_to_sync.py: DO NOT EDIT.
# Change _database_async.py and run `make generate`.
"""Connecting, checking the server and schema, and migrating (generated sync twin).

The sync twin _database.py is generated from this file by tools/async_to_sync.py.
"""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg.rows import DictRow, dict_row

from . import _sql
from .dsn import redact_dsn
from .errors import (
    ConnectionFailed,
    SchemaNotMigrated,
    SchemaOutOfDate,
    SchemaTooNew,
    ServerTooOld,
)

CONNECT_TIMEOUT_SECONDS = 10

# The pool probe's rounds (pooling.py): a busy pool may give a connection's server
# process to a fourth client, so it asks again.
POOL_PROBE_ROUNDS = 3

MIN_SERVER_VERSION = 130000  # gen_random_uuid() is built in from PostgreSQL 13


class PooledConnection(psycopg.Connection[DictRow]):
    """A connection of a queue's pool, which keeps one cursor for the statements run on
    it: a cursor made for each statement costs about a fifth of an enqueue's CPU."""

    _statements: psycopg.Cursor[DictRow] | None = None

    def statements(self) -> psycopg.Cursor[DictRow]:
        """The kept cursor (used by one holder at a time, as the connection is)."""
        if self._statements is None:
            self._statements = self.cursor()
        return self._statements


def connect(dsn: str, **kwargs: Any) -> psycopg.Connection[DictRow]:
    """A connection with dict rows, or ConnectionFailed that says which server and why."""
    try:
        return psycopg.Connection.connect(
            dsn, row_factory=dict_row, connect_timeout=CONNECT_TIMEOUT_SECONDS, **kwargs
        )
    except psycopg.Error as error:
        reason = " ".join(str(error).split()) or type(error).__name__
        raise ConnectionFailed(
            f"cannot connect to PostgreSQL at {redact_dsn(dsn)}: {reason}"
        ) from error


def _fetch_one(
    conn: psycopg.Connection[Any], query: str, params: dict[str, Any] | None = None
) -> DictRow:
    # A dict cursor of our own: the caller's connection (conn=) may use any row factory.
    with conn.cursor(row_factory=dict_row) as cursor:
        cursor.execute(query, params)
        row = cursor.fetchone()
    assert row is not None
    return row


def transaction_pool_evidence(
    first: psycopg.Connection[Any], dsn: str, *, trust_backend_key: bool = False
) -> str | None:
    """Why `dsn` is a transaction pool, in one sentence; None when nothing says so.
    `first` is a connection to it in autocommit; two more are opened for the probe
    (pooling.py says how it reasons).

    With `trust_backend_key`, a connection answered by the very server process that
    libpq was named at connect (the BackendKeyData message, `info.backend_pid`) is taken
    for a direct one at once, one round trip instead of the probe: PostgreSQL names its
    own process there, and PgBouncer a key of its own making. A pool that passed a
    server's key on to its clients would go unseen; the probe then runs only behind a
    proxy."""
    query = _sql.queries("pgbaton")["server_backend"]
    if trust_backend_key and _backend_pid(first, query) == first.info.backend_pid:
        return None
    second = connect(dsn)
    third = connect(dsn)
    try:
        seen_by_first: list[int] = []
        for _ in range(POOL_PROBE_ROUNDS):
            before = _backend_pid(first, query)
            # Each of these opens a transaction, which pins one server connection; the
            # first one's, idle in a pool, goes to one of them.
            for pinned in (second, third):
                try:
                    pid = _backend_pid(pinned, query)
                except psycopg.errors.ProtocolViolation as error:
                    # PostgreSQL opens a transaction for anyone; PgBouncer in statement
                    # mode refuses every one ("transaction blocks not allowed").
                    return f"it refused a transaction: {' '.join(str(error).split())}"
                if pid == before:
                    second.rollback()
                    third.rollback()
                    return (f"two client connections were answered by one server "
                            f"process (pid {pid})")
            second.rollback()
            third.rollback()
            seen_by_first += [before, _backend_pid(first, query)]
            if len(set(seen_by_first)) > 1:
                return ("one client connection was answered by several server processes "
                        f"(pids {', '.join(map(str, dict.fromkeys(seen_by_first)))})")
        return None
    finally:
        second.close()
        third.close()


def _backend_pid(conn: psycopg.Connection[Any], query: str) -> int:
    # Never prepared: through a transaction pool, the next run may reach a server
    # connection that does not know the statement.
    with conn.cursor(row_factory=dict_row) as cursor:
        cursor.execute(query, prepare=False)
        row = cursor.fetchone()
    assert row is not None
    return int(row["pid"])


def check_server(conn: psycopg.Connection[Any]) -> None:
    row = _fetch_one(conn, _sql.queries("pgbaton")["server_version"])
    if row["version_num"] < MIN_SERVER_VERSION:
        raise ServerTooOld(
            f"PostgreSQL {row['version']} is too old: pgbaton needs 13 or later "
            "(it relies on the built-in gen_random_uuid())"
        )


def schema_version(conn: psycopg.Connection[Any], schema: str) -> int:
    """The version the schema was migrated to; 0 when it holds no pgbaton tables."""
    sql = _sql.queries(schema)
    row = _fetch_one(
        conn, sql["schema_version_table_exists"], {"table": f'"{schema}".schema_version'}
    )
    if not row["exists"]:
        return 0
    return int((_fetch_one(conn, sql["schema_version_get"]))["version"])


def check_schema(conn: psycopg.Connection[Any], schema: str) -> None:
    """Refuse to run against a schema that this pgbaton was not written for."""
    check_server(conn)
    found = schema_version(conn, schema)
    wanted = _sql.schema_version()
    if found == wanted:
        return
    if found == 0:
        raise SchemaNotMigrated(
            f"schema {schema!r} holds no pgbaton tables (this pgbaton needs version "
            f"{wanted}): run `pgbaton migrate` or Queue.migrate()"
        )
    if found < wanted:
        raise SchemaOutOfDate(
            f"schema {schema!r} is at version {found} but this pgbaton needs version "
            f"{wanted}: run `pgbaton migrate` or Queue.migrate()"
        )
    raise SchemaTooNew(
        f"schema {schema!r} is at version {found}, newer than the version {wanted} this "
        "pgbaton knows: upgrade pgbaton on this client"
    )


def migrate(conn: psycopg.Connection[DictRow], schema: str) -> list[int]:
    """Apply the migrations the schema lacks, in order, in one transaction.

    The advisory lock makes a second migrating process wait and then find nothing to do.
    """
    check_server(conn)
    sql = _sql.queries(schema)
    applied: list[int] = []
    with conn.transaction():
        conn.execute(sql["migration_lock"], {"schema": schema})
        conn.execute(sql["schema_create"])
        conn.execute(sql["schema_version_create"])
        current = int((_fetch_one(conn, sql["schema_version_get"]))["version"])
        if current > _sql.schema_version():
            raise SchemaTooNew(
                f"schema {schema!r} is at version {current}, newer than the version "
                f"{_sql.schema_version()} this pgbaton knows: upgrade pgbaton"
            )
        for migration in _sql.migrations():
            if migration.version <= current:
                continue
            conn.execute(migration.in_schema(schema))
            conn.execute(
                sql["schema_version_record"],
                {"version": migration.version, "name": migration.name},
            )
            applied.append(migration.version)
    return applied
