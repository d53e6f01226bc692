"""Connecting, checking the server and schema, migrating, and AsyncDatabase: one
schema's pool and the running of its named statements (async source).

The sync twin _database.py is generated from this file by tools/async_to_sync.py.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager, nullcontext
from typing import Any

import psycopg
import psycopg_pool
from psycopg.rows import DictRow, dict_row, tuple_row
from psycopg.types.json import JsonbLoader

from . import _sql
from ._checks import check_seconds
from ._cut_off import cut_off_after  # sync: skip (async only)
from ._decoding import JsonbBinaryLoader
from ._engine_base import Row, accepted
from ._parsed_once import ParsedOnceAsyncCursor
from ._sql import notify_channel
from ._transient import is_connection_loss, is_prepared_statement_mixup
from .dsn import CLIENT_ENCODING, merge_options, redact_dsn, resolve_dsn
from .errors import (
    ConnectionFailed,
    InvalidArgument,
    SchemaNotMigrated,
    SchemaOutOfDate,
    SchemaTooNew,
    ServerTooOld,
)
from .integrations.connections import AsyncCallerConnection, psycopg_connection

CONNECT_TIMEOUT_SECONDS = 10

# The pool probe's rounds (pooling.py): a busy pool may give a connection's server
# process to a fourth client, so it asks again.
POOL_PROBE_ROUNDS = 3

MIN_SERVER_VERSION = 130000  # gen_random_uuid() is built in from PostgreSQL 13


class PooledConnection(psycopg.AsyncConnection[DictRow]):
    """A connection of a queue's pool, which keeps one cursor for the statements run on
    it: a cursor made for each statement costs about a fifth of an enqueue's CPU."""

    _statements: psycopg.AsyncCursor[DictRow] | None = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # pgbaton's statements are parsed once per process, not at each call
        # (_parsed_once.py: the claim's parse was 38 µs a claim).
        self.cursor_factory = ParsedOnceAsyncCursor

    def statements(self) -> psycopg.AsyncCursor[DictRow]:
        """The kept cursor (used by one holder at a time, as the connection is)."""
        if self._statements is None:
            self._statements = self.cursor()
        return self._statements


async def connect(dsn: str, **kwargs: Any) -> psycopg.AsyncConnection[DictRow]:
    """A connection with dict rows in client_encoding UTF8 (dsn.CLIENT_ENCODING), or
    ConnectionFailed that says which server and why."""
    try:
        return await psycopg.AsyncConnection.connect(
            dsn, row_factory=dict_row, connect_timeout=CONNECT_TIMEOUT_SECONDS,
            client_encoding=CLIENT_ENCODING, **kwargs
        )
    except psycopg.Error as error:
        reason = " ".join(str(error).split()) or type(error).__name__
        raise ConnectionFailed(
            f"cannot connect to PostgreSQL at {redact_dsn(dsn)}: {reason}"
        ) from error


async def _fetch_one(
    conn: psycopg.AsyncConnection[Any], query: str, params: dict[str, Any] | None = None
) -> DictRow:
    # A dict cursor of our own: the caller's connection (conn=) may use any row factory.
    async with conn.cursor(row_factory=dict_row) as cursor:
        await cursor.execute(query, params)
        row = await cursor.fetchone()
    assert row is not None
    return row


async def transaction_pool_evidence(
    first: psycopg.AsyncConnection[Any], dsn: str, *, trust_backend_key: bool = False
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
    if trust_backend_key and await _backend_pid(first, query) == first.info.backend_pid:
        return None
    second = await connect(dsn)
    third = await connect(dsn)
    try:
        seen_by_first: list[int] = []
        for _ in range(POOL_PROBE_ROUNDS):
            before = await _backend_pid(first, query)
            # Each of these opens a transaction, which pins one server connection; the
            # first one's, idle in a pool, goes to one of them.
            for pinned in (second, third):
                try:
                    pid = await _backend_pid(pinned, query)
                except psycopg.errors.ProtocolViolation as error:
                    # PostgreSQL opens a transaction for anyone; PgBouncer in statement
                    # mode refuses every one ("transaction blocks not allowed").
                    return f"it refused a transaction: {' '.join(str(error).split())}"
                if pid == before:
                    await second.rollback()
                    await third.rollback()
                    return (f"two client connections were answered by one server "
                            f"process (pid {pid})")
            await second.rollback()
            await third.rollback()
            seen_by_first += [before, await _backend_pid(first, query)]
            if len(set(seen_by_first)) > 1:
                return ("one client connection was answered by several server processes "
                        f"(pids {', '.join(map(str, dict.fromkeys(seen_by_first)))})")
        return None
    finally:
        await second.close()
        await third.close()


async def _backend_pid(conn: psycopg.AsyncConnection[Any], query: str) -> int:
    # Never prepared: through a transaction pool, the next run may reach a server
    # connection that does not know the statement.
    async with conn.cursor(row_factory=dict_row) as cursor:
        await cursor.execute(query, prepare=False)
        row = await cursor.fetchone()
    assert row is not None
    return int(row["pid"])


async def check_server(conn: psycopg.AsyncConnection[Any]) -> None:
    row = await _fetch_one(conn, _sql.queries("pgbaton")["server_version"])
    if row["version_num"] < MIN_SERVER_VERSION:
        raise ServerTooOld(
            f"PostgreSQL {row['version']} is too old: pgbaton needs 13 or later "
            "(it relies on the built-in gen_random_uuid())"
        )


async def schema_version(conn: psycopg.AsyncConnection[Any], schema: str) -> int:
    """The version the schema was migrated to; 0 when it holds no pgbaton tables."""
    sql = _sql.queries(schema)
    row = await _fetch_one(
        conn, sql["schema_version_table_exists"], {"table": f'"{schema}".schema_version'}
    )
    if not row["exists"]:
        return 0
    return int((await _fetch_one(conn, sql["schema_version_get"]))["version"])


async def check_schema(conn: psycopg.AsyncConnection[Any], schema: str) -> None:
    """Refuse to run against a schema that this pgbaton was not written for."""
    await check_server(conn)
    found = await schema_version(conn, schema)
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


async def migrate(conn: psycopg.AsyncConnection[DictRow], schema: str) -> list[int]:
    """Apply the migrations the schema lacks, in order, in one transaction.

    The advisory lock makes a second migrating process wait and then find nothing to do.
    """
    await check_server(conn)
    sql = _sql.queries(schema)
    applied: list[int] = []
    async with conn.transaction():
        await conn.execute(sql["migration_lock"], {"schema": schema})
        await conn.execute(sql["schema_create"])
        await conn.execute(sql["schema_version_create"])
        current = int((await _fetch_one(conn, sql["schema_version_get"]))["version"])
        if current > _sql.schema_version():
            raise SchemaTooNew(
                f"schema {schema!r} is at version {current}, newer than the version "
                f"{_sql.schema_version()} this pgbaton knows: upgrade pgbaton"
            )
        for migration in _sql.migrations():
            if migration.version <= current:
                continue
            await conn.execute(migration.in_schema(schema))
            await conn.execute(
                sql["schema_version_record"],
                {"version": migration.version, "name": migration.name},
            )
            applied.append(migration.version)
    return applied


Pool = psycopg_pool.AsyncConnectionPool[PooledConnection]


class AsyncDatabase:
    """One pgbaton schema in one database, and the running of its named statements: the
    plumbing that the queue's face (queue_async.py) and its engine (engine_async.py)
    share, one pool for both.

    The pool opens on first use after checking that the server is reachable, new
    enough, and migrated to this version of pgbaton, and (prepare=None) whether the DSN
    goes through a transaction pool, where the pool's connections then prepare no
    statements (docs/howto/pgbouncer.md)."""

    def __init__(
        self,
        dsn: str | None = None,
        *,
        schema: str = "pgbaton",
        pool_size: int = 4,
        prepare: bool | None = None,
        connect_timeout: float = CONNECT_TIMEOUT_SECONDS,
    ) -> None:
        self.dsn = resolve_dsn(dsn)
        # How long a call waits for a connection of the pool (and the pool's first one
        # as it opens) before ConnectionFailed: during an outage, each call waits this.
        self.connect_timeout = check_seconds("connect_timeout", connect_timeout,
                                             positive=True)
        # Whether the pool's connections let psycopg prepare statements on the server.
        # Through a transaction pool (PgBouncer before 1.21, or without
        # max_prepared_statements) a statement prepared on one server connection is
        # unknown on the next, or another client's statement of the same name: None
        # decides at open by the probe of pooling.py, False prepares nothing, True
        # prepares without asking (PgBouncer 1.21+ with max_prepared_statements).
        self.prepare = prepare
        # Why the probe took the DSN for a transaction pool, or None: read at open.
        self.transaction_pool: str | None = None
        self.schema = _sql.check_schema_name(schema)
        self.channel = notify_channel(schema)
        self._sql = _sql.queries(schema)
        # The column names of each hot-path statement, read once: cursor.description
        # builds a Column object per column per call, about 4% of a drain's worker CPU.
        self._column_names: dict[str, list[str]] = {}
        self._pool_size = pool_size
        # The longest a statement of the hot path (_fetch_tuples) may wait for its
        # answer before its connection is cut off (_cut_off.py): a worker sets its lease
        # here. None: no bound, as for every other statement.
        self.hot_path_bound: float | None = None  # sync: skip (no loop to keep time on)
        self._pool: Pool | None = None
        self._opening = asyncio.Lock()
        self._schema_checked = False

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {redact_dsn(self.dsn)} schema={self.schema!r}>"

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def open(self) -> None:
        """Check the server and schema and open the pool now, rather than on first use."""
        if self._pool is None:
            await self._open_pool()

    async def close(self) -> None:
        if self._pool is not None:
            await self._pool.close()
            self._pool = None

    # -- connections ----------------------------------------------------------------

    async def connect(self, **kwargs: Any) -> psycopg.AsyncConnection[DictRow]:
        """A new connection of this queue's own (for LISTEN, or a caller's transaction)."""
        return await connect(self.dsn, **kwargs)

    async def _open_pool(self) -> Pool:
        async with self._opening:
            if self._pool is not None:  # opened by a caller this one waited for
                return self._pool
            conn = await connect(self.dsn, autocommit=True)
            try:
                await check_schema(conn, self.schema)
                self._schema_checked = True
                if self.prepare is None:
                    self.transaction_pool = await transaction_pool_evidence(
                        conn, self.dsn, trust_backend_key=True
                    )
                    self.prepare = self.transaction_pool is None
            finally:
                await conn.close()
            pool = Pool(
                self.dsn,
                connection_class=PooledConnection,
                min_size=1,
                max_size=self._pool_size,
                kwargs={
                    "autocommit": True,
                    "row_factory": dict_row,
                    "client_encoding": CLIENT_ENCODING,
                    **self._statement_kwargs(),
                },
                configure=_read_jsonb_binary,
                open=False,
            )
            await pool.open(wait=True, timeout=self.connect_timeout)
            self._pool = pool
            return pool

    def _statement_kwargs(self) -> dict[str, Any]:
        if not self.prepare:
            return {"prepare_threshold": None}
        # Every statement here has one good plan whatever its values
        # (tests/engine/test_claim_index.py checks the claim's), so plan each once
        # per connection instead of at every call: prepared at its second run, where
        # psycopg's default runs a statement five times unprepared, each planned anew
        # (the claim's plan takes milliseconds; docs/explanation/claim-table.md). Not
        # at its first: psycopg prepares before it runs, and a statement that fails
        # there (one that has never succeeded on the connection: a JobNotFound every
        # call) would leave a prepared statement on the server at each call.
        return {
            "prepare_threshold": 1,
            "options": merge_options(self.dsn, "-c plan_cache_mode=force_generic_plan"),
        }

    @asynccontextmanager
    async def _connection(self) -> AsyncIterator[PooledConnection]:
        pool = self._pool or await self._open_pool()
        try:
            # getconn and putconn rather than pool.connection(), which also enters the
            # connection's own block: a commit on exit that these autocommit connections
            # never need, and with it a lock and a wait (3.5 to 5.4 of the 9 to 14
            # microseconds a checkout took alone; benchmarks/results/
            # enqueue-server-cost.md). putconn does what matters of it: a connection
            # left mid-statement or broken is replaced, one left in a transaction is
            # rolled back (no statement of pgbaton's leaves one).
            conn = await pool.getconn(timeout=self.connect_timeout)
            try:
                yield conn
            finally:
                await pool.putconn(conn)
        except psycopg.Error as error:
            if self.prepare and is_prepared_statement_mixup(error):
                error.add_note(
                    f"{redact_dsn(self.dsn)} seems to go through a transaction pool, "
                    "where a prepared statement stays on one server connection: give "
                    "the queue prepare=False (docs/howto/pgbouncer.md)"
                )
            if not isinstance(error, psycopg.OperationalError) or not is_connection_loss(
                error
            ):
                raise
            # The server may have restarted: drop every dead idle connection now, so the
            # caller's retry gets a fresh one instead of the next corpse.
            await pool.check()
            raise ConnectionFailed(
                f"lost the connection to PostgreSQL at {redact_dsn(self.dsn)}: {error}"
            ) from error

    async def _fetch(
        self,
        name: str,
        params: Mapping[str, Any] | None = None,
        conn: AsyncCallerConnection | None = None,
    ) -> list[Row]:
        query = self._sql[name]
        if conn is not None:
            conn = await psycopg_connection(conn, psycopg.AsyncConnection)
            if not isinstance(conn, psycopg.AsyncConnection):
                raise InvalidArgument(
                    f"conn must be a psycopg.AsyncConnection, got {type(conn).__name__}"
                )
            if not self._schema_checked:
                await check_schema(conn, self.schema)
                self._schema_checked = True
            async with conn.cursor(row_factory=dict_row) as cursor:
                # A caller's connection may load jsonb its own way (Django's returns
                # text); pgbaton's rows want it parsed, as on its own connections.
                cursor.adapters.register_loader("jsonb", JsonbLoader)
                await cursor.execute(query, params)
                return await cursor.fetchall() if cursor.description else []
        async with self._connection() as pooled:
            cursor = pooled.statements()
            await cursor.execute(query, params)
            return await cursor.fetchall() if cursor.description else []

    async def _fetch_tuples(
        self, name: str, params: Mapping[str, Any], took: list[float] | None = None
    ) -> tuple[list[str], list[tuple[Any, ...]]]:
        """A statement of the worker's hot path: its column names and its rows as
        tuples, in binary (no dict per row, no text to parse), jsonb decoded by
        JsonbBinaryLoader (_read_jsonb_binary). `took`: gets the seconds the statement
        took, from its sending to its last row (the wait for a connection left out).
        In a worker's async database, a statement unanswered for hot_path_bound seconds
        raises StatementCutOff (_cut_off.py)."""
        async with (
            self._connection() as pooled,
            self._bounded(pooled),
            pooled.cursor(row_factory=tuple_row, binary=True) as cursor,
        ):
            sent = time.monotonic()
            await cursor.execute(self._sql[name], params)
            result = cursor.pgresult
            if result is None or not result.nfields:  # no rows returned: no description
                names: list[str] = []
                rows: list[tuple[Any, ...]] = []
            else:
                known = self._column_names.get(name)
                if known is None:
                    known = [column.name for column in cursor.description or ()]
                    self._column_names[name] = known
                names, rows = known, await cursor.fetchall()
            if took is not None:
                took.append(time.monotonic() - sent)
            return names, rows

    def _bounded(self, conn: PooledConnection) -> AbstractAsyncContextManager[None]:
        """The bound of a hot-path statement on `conn`: hot_path_bound, which only a
        worker's async database sets (_cut_off.py); none otherwise."""
        if self.hot_path_bound is not None:  # sync: skip (no loop to keep time on)
            return cut_off_after(conn, self.hot_path_bound)
        else:
            return nullcontext()

    async def _changed_positions(
        self, name: str, params: Mapping[str, Any], count: int
    ) -> list[bool]:
        """Run a *_many statement; for each input position, whether its row changed."""
        _, rows = await self._fetch_tuples(name, params)
        return accepted(rows, count)

    # -- schema ---------------------------------------------------------------------

    async def migrate(self) -> list[int]:
        """Bring the schema up to date; returns the versions applied (none if current)."""
        conn = await connect(self.dsn, autocommit=True)
        try:
            return await migrate(conn, self.schema)
        finally:
            await conn.close()

    async def schema_version(self) -> int:
        conn = await connect(self.dsn, autocommit=True)
        try:
            return await schema_version(conn, self.schema)
        finally:
            await conn.close()

    @asynccontextmanager
    async def _transaction(
        self, conn: AsyncCallerConnection | None
    ) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        """A transaction on the caller's connection (a savepoint inside theirs) or on a
        pooled one."""
        if conn is not None:
            theirs = await psycopg_connection(conn, psycopg.AsyncConnection)
            if not theirs.autocommit and (
                theirs.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
            ):
                # psycopg's transaction() on an idle connection would BEGIN and COMMIT
                # on its own; one statement first opens the caller's transaction, and the
                # block below becomes a savepoint in it, committed by the caller.
                await self._fetch("server_ping", None, theirs)
            async with theirs.transaction():
                yield theirs
            return
        async with self._connection() as pooled, pooled.transaction():
            yield pooled


async def _read_jsonb_binary(conn: PooledConnection) -> None:
    """A pooled connection reads binary jsonb (the hot path's rows, _fetch_tuples) with
    JsonbBinaryLoader: registered once per connection, as a cursor's own registration
    copies the connection's adapters map at every statement."""
    conn.adapters.register_loader("jsonb", JsonbBinaryLoader)
