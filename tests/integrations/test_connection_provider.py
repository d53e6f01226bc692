"""App.provide_connection and provide_async_connection: enqueues without conn= join the
transaction a framework says is current (here a SQLAlchemy session held in a context
variable, as a request scope would hold it), or go to the App's pool when there is none."""

from __future__ import annotations

import subprocess
from collections.abc import AsyncIterator, Iterator
from contextvars import ContextVar
from typing import Any

import psycopg
import pytest
import sqlalchemy as sa
from psycopg.rows import DictRow
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, create_async_engine
from sqlalchemy.orm import Session

import pgbaton
from tests.integrations.conftest import (
    ROLLED_BACK_QUEUE,
    check_transaction_proof,
    on_schema,
    sqlalchemy_url,
)
from tests.integrations.shop_tasks import app, send_receipt

INSERT_ORDER = sa.text("INSERT INTO orders (item) VALUES ('book') RETURNING id")

current_session: ContextVar[Session | None] = ContextVar("current_session", default=None)
current_async_session: ContextVar[AsyncSession | None] = ContextVar(
    "current_async_session", default=None
)


@pytest.fixture
def engine(dsn: str, shop: str) -> Iterator[sa.Engine]:
    engine = sa.create_engine(sqlalchemy_url(dsn), **on_schema(shop))
    yield engine
    engine.dispose()


@pytest.fixture
async def async_engine(dsn: str, shop: str) -> AsyncIterator[AsyncEngine]:
    engine = create_async_engine(sqlalchemy_url(dsn), **on_schema(shop))
    yield engine
    await engine.dispose()


@pytest.fixture
def provided(shop: str) -> Iterator[None]:
    """The shop's App asks the context variables; no provider again afterwards."""
    app.provide_connection(current_session.get)
    app.provide_async_connection(current_async_session.get)
    yield
    app.provide_connection(None)
    app.provide_async_connection(None)
    app.queue.close()


def jobs_seen_elsewhere(db: psycopg.Connection[DictRow]) -> int:
    row = db.execute("SELECT count(*) AS n FROM jobs").fetchone()
    assert row is not None
    return int(row["n"])


def test_the_current_session_is_joined_without_conn(
    engine: sa.Engine, provided: None, db: psycopg.Connection[DictRow],
    wakeups: psycopg.Connection[Any], shop_worker: subprocess.Popen[bytes],
) -> None:
    """defer, enqueue (keyed too), Queue.enqueue_many and enqueue_once with no conn= write
    in the current session's
    transaction: its rollback takes them (and their wake-ups), its commit hands one
    over."""
    with Session(engine) as session:
        token = current_session.set(session)
        try:
            send_receipt.using(queue=ROLLED_BACK_QUEUE).defer(order_id=0)
            send_receipt.enqueue({"order_id": 0}, queue=ROLLED_BACK_QUEUE)
            app.queue.enqueue_many(
                [{"task": "send_receipt", "args": {"order_id": 0}, "queue": ROLLED_BACK_QUEUE}]
            )
            app.queue.enqueue_once("send_receipt", {"order_id": 0}, idempotency_key="once",
                                   queue=ROLLED_BACK_QUEUE)
            send_receipt.enqueue({"order_id": 0}, idempotency_key="keyed",
                                 queue=ROLLED_BACK_QUEUE)
            assert jobs_seen_elsewhere(db) == 0
            session.rollback()
            order_id = session.execute(INSERT_ORDER).scalar_one()
            job_id = send_receipt.defer(order_id=order_id)
            assert jobs_seen_elsewhere(db) == 0  # not committed yet: it is the session's
            session.commit()
        finally:
            current_session.reset(token)
    check_transaction_proof(db, wakeups, committed_job=job_id, committed_order=order_id)


def test_with_no_current_session_the_pool_commits_at_once(
    engine: sa.Engine, provided: None, db: psycopg.Connection[DictRow]
) -> None:
    """The provider giving None means the App's own connection, committed at once, even
    while some session (not the current one) is open."""
    with Session(engine) as session:
        session.execute(INSERT_ORDER)
        send_receipt.defer(order_id=1)
        assert jobs_seen_elsewhere(db) == 1
        session.rollback()
    assert jobs_seen_elsewhere(db) == 1


def test_conn_given_wins_over_the_provider(
    engine: sa.Engine, provided: None, db: psycopg.Connection[DictRow], dsn: str, shop: str
) -> None:
    """An explicit conn= is used even when a current session is set."""
    with Session(engine) as session, psycopg.connect(dsn) as theirs:
        theirs.execute(f'SET search_path TO "{shop}"')  # type: ignore[arg-type]
        token = current_session.set(session)
        try:
            send_receipt.using(conn=theirs).defer(order_id=2)
            theirs.commit()
            session.rollback()
        finally:
            current_session.reset(token)
    assert jobs_seen_elsewhere(db) == 1


def test_a_provider_giving_no_connection_is_refused_in_one_line(
    shop: str, db: psycopg.Connection[DictRow]
) -> None:
    """What the provider gives is checked as conn= is; the error names the provider."""
    app.provide_connection(lambda: "postgresql://")  # type: ignore[arg-type,return-value]
    try:
        with pytest.raises(pgbaton.InvalidArgument) as raised:
            send_receipt.defer(order_id=3)
    finally:
        app.provide_connection(None)
    message = str(raised.value)
    assert message.startswith("the queue's connection_provider gave what conn= cannot be")
    assert "got builtins.str" in message and "\n" not in message
    assert jobs_seen_elsewhere(db) == 0


async def test_the_current_async_session_is_joined_without_conn(
    async_engine: AsyncEngine, provided: None, db: psycopg.Connection[DictRow],
    wakeups: psycopg.Connection[Any], shop_worker: subprocess.Popen[bytes],
) -> None:
    """The async enqueues ask provide_async_connection's provider the same way."""
    async with AsyncSession(async_engine) as session:
        token = current_async_session.set(session)
        try:
            await send_receipt.using(queue=ROLLED_BACK_QUEUE).defer_async(order_id=0)
            await session.rollback()
            order_id = (await session.execute(INSERT_ORDER)).scalar_one()
            job_id = await send_receipt.defer_async(order_id=order_id)
            assert jobs_seen_elsewhere(db) == 0
            await session.commit()
        finally:
            current_async_session.reset(token)
    await app.async_queue.close()
    check_transaction_proof(db, wakeups, committed_job=job_id, committed_order=order_id)


@pytest.mark.parametrize("method", ["provide_connection", "provide_async_connection"])
def test_a_provider_that_is_no_function_is_refused_at_once(method: str) -> None:
    """The mistake is reported where it is made, not at the next enqueue."""
    with pytest.raises(pgbaton.InvalidArgument) as raised:
        getattr(app, method)("postgresql://")
    assert str(raised.value) == (
        f"{method} takes a function that returns the connection to join (or None), "
        "or None; got str"
    )
