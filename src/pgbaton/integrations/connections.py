"""The psycopg 3 connection inside a caller's SQLAlchemy or Django connection.

`enqueue(..., conn=X)` writes in X's transaction. X may be a psycopg 3 connection, a
SQLAlchemy 2 Session, Connection, AsyncSession or AsyncConnection on the psycopg
driver (`postgresql+psycopg://`), or a Django connection (`django.db.connection`,
`connections[alias]`). SQLAlchemy and Django are imported only when X comes from them.

The async kind is awaited because an AsyncSession may have to open its connection
first; that is also why the wanted kind is passed as the class itself: the generated
sync twin of the queue asks for `psycopg.Connection` and gets one without awaiting.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeAlias, TypeVar, overload

import psycopg

from ..errors import InvalidArgument

if TYPE_CHECKING:
    from django.db.backends.base.base import BaseDatabaseWrapper
    from sqlalchemy.engine import Connection as SAConnection
    from sqlalchemy.ext.asyncio import AsyncConnection as SAAsyncConnection
    from sqlalchemy.ext.asyncio import AsyncSession
    from sqlalchemy.orm import Session

AsyncConnection = psycopg.AsyncConnection[Any]
Connection = psycopg.Connection[Any]

# What conn= accepts, for the annotations of the enqueue methods. Without SQLAlchemy
# or Django installed (or typed), their names count as Any for a type checker.
CallerConnection: TypeAlias = (
    "psycopg.Connection[Any] | Session | SAConnection | BaseDatabaseWrapper"
)
AsyncCallerConnection: TypeAlias = (
    "psycopg.AsyncConnection[Any] | AsyncSession | SAAsyncConnection"
)
# What App.provide_connection and provide_async_connection take: a callable giving the
# connection whose transaction an enqueue without conn= joins, or None for the pool.
ConnectionProvider: TypeAlias = "Callable[[], CallerConnection | None]"
AsyncConnectionProvider: TypeAlias = "Callable[[], AsyncCallerConnection | None]"
Driver = TypeVar("Driver", psycopg.Connection[Any], psycopg.AsyncConnection[Any])

_SYNC_ADVICE = "use Queue.enqueue or a task's enqueue/defer"
_ASYNC_ADVICE = "use AsyncQueue.enqueue or a task's enqueue_async/defer_async"


@overload
def psycopg_connection(
    conn: object, kind: type[psycopg.AsyncConnection[Any]]
) -> Awaitable[AsyncConnection]: ...


@overload
def psycopg_connection(conn: object, kind: type[psycopg.Connection[Any]]) -> Connection: ...


def psycopg_connection(
    conn: object, kind: type[psycopg.AsyncConnection[Any]] | type[psycopg.Connection[Any]]
) -> Awaitable[AsyncConnection] | Connection:
    """The psycopg connection of `kind` that writes in `conn`'s transaction, or
    InvalidArgument saying what to pass instead."""
    if kind is psycopg.AsyncConnection:
        return _async_connection(conn)
    return _sync_connection(conn)


def _sync_connection(conn: object) -> Connection:
    if isinstance(conn, psycopg.Connection):
        return conn
    if isinstance(conn, psycopg.AsyncConnection):
        raise InvalidArgument(
            f"conn is a psycopg.AsyncConnection, which a sync enqueue cannot use: "
            f"{_ASYNC_ADVICE}, or pass a psycopg.Connection"
        )
    origin = _library_of(conn)
    if origin == "sqlalchemy":
        return _sqlalchemy_sync(conn)
    if origin == "django":
        return _django(conn)
    raise _not_a_connection(conn, "psycopg.Connection")


async def _async_connection(conn: object) -> AsyncConnection:
    if isinstance(conn, psycopg.AsyncConnection):
        return conn
    if isinstance(conn, psycopg.Connection):
        raise InvalidArgument(
            f"conn is a psycopg.Connection, which an async enqueue cannot use: "
            f"{_SYNC_ADVICE}, or pass a psycopg.AsyncConnection"
        )
    origin = _library_of(conn)
    if origin == "sqlalchemy":
        return await _sqlalchemy_async(conn)
    if origin == "django":
        raise InvalidArgument(
            "conn is a Django connection, which is sync: "
            f"{_SYNC_ADVICE} (in async code, through asgiref's sync_to_async)"
        )
    raise _not_a_connection(conn, "psycopg.AsyncConnection")


def _library_of(conn: object) -> str:
    """The top-level package a connection's class comes from ("sqlalchemy", "django")."""
    return type(conn).__module__.partition(".")[0]


def _not_a_connection(conn: object, wanted: str) -> InvalidArgument:
    return InvalidArgument(
        f"conn must be a {wanted}, a SQLAlchemy Session or Connection (sync or async, on "
        f"postgresql+psycopg://) or a Django connection; got {_describe(conn)}"
    )


def _describe(conn: object) -> str:
    kind = type(conn)
    return f"{kind.__module__}.{kind.__qualname__}"


# -- SQLAlchemy -----------------------------------------------------------------------


def _sqlalchemy_sync(conn: object) -> Connection:
    from sqlalchemy.engine import Connection as SAConnection
    from sqlalchemy.ext.asyncio import AsyncConnection as SAAsyncConnection
    from sqlalchemy.ext.asyncio import AsyncSession
    from sqlalchemy.orm import Session

    if isinstance(conn, AsyncSession | SAAsyncConnection):
        raise InvalidArgument(
            f"conn is a SQLAlchemy {type(conn).__name__}, which a sync enqueue cannot use: "
            f"{_ASYNC_ADVICE}, or pass a Session or Connection"
        )
    if isinstance(conn, Session):
        conn = conn.connection()  # joins the session's transaction, beginning it if need be
    if not isinstance(conn, SAConnection):
        raise _not_a_connection(conn, "psycopg.Connection")
    if not conn.in_transaction():
        # Begin as SQLAlchemy would have at its next statement, so that its commit()
        # and rollback() take our statement with theirs.
        conn.begin()
    driver = conn.connection.driver_connection
    return _checked(driver, psycopg.Connection, _sqlalchemy_url_kind(conn))


async def _sqlalchemy_async(conn: object) -> AsyncConnection:
    from sqlalchemy.engine import Connection as SAConnection
    from sqlalchemy.ext.asyncio import AsyncConnection as SAAsyncConnection
    from sqlalchemy.ext.asyncio import AsyncSession
    from sqlalchemy.orm import Session

    if isinstance(conn, Session | SAConnection):
        raise InvalidArgument(
            f"conn is a SQLAlchemy {type(conn).__name__}, which an async enqueue cannot "
            f"use: {_SYNC_ADVICE}, or pass an AsyncSession or AsyncConnection"
        )
    if isinstance(conn, AsyncSession):
        conn = await conn.connection()
    if not isinstance(conn, SAAsyncConnection):
        raise _not_a_connection(conn, "psycopg.AsyncConnection")
    if not conn.in_transaction():
        await conn.begin()
    driver = (await conn.get_raw_connection()).driver_connection
    return _checked(driver, psycopg.AsyncConnection, _sqlalchemy_url_kind(conn))


def _sqlalchemy_url_kind(conn: Any) -> str:
    dialect = conn.dialect
    return f"a SQLAlchemy connection on {dialect.name}+{dialect.driver}://"


# -- Django ---------------------------------------------------------------------------


def _django(conn: Any) -> Connection:
    # django.db.connection is a proxy that forwards every attribute to the default
    # connection, so this is duck-typed rather than checked with isinstance.
    vendor = getattr(conn, "vendor", None)
    if vendor is None or not hasattr(conn, "ensure_connection"):
        raise _not_a_connection(conn, "psycopg.Connection")
    alias = getattr(conn, "alias", "?")
    if vendor != "postgresql":
        raise InvalidArgument(
            f"conn is Django's database {alias!r} on {vendor}: pgbaton needs PostgreSQL"
        )
    conn.ensure_connection()
    return _checked(conn.connection, psycopg.Connection, f"Django's database {alias!r}")


def _checked(driver: object, kind: type[Driver], what: str) -> Driver:
    if isinstance(driver, kind):
        return driver
    module = type(driver).__module__.partition(".")[0]
    raise InvalidArgument(
        f"conn is {what}, whose driver is {module}, not psycopg 3: pgbaton writes through "
        "psycopg 3 only (SQLAlchemy: a postgresql+psycopg:// URL; Django 4.2+: psycopg "
        "installed, which Django prefers to psycopg2)"
    )
