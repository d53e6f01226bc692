"""enqueue(conn=) inside SQLAlchemy 2 transactions on psycopg 3, sync and async: a
rollback leaves no job and no wake-up, a commit hands the job to a real worker."""

from __future__ import annotations

import subprocess
from collections.abc import AsyncIterator, Iterator
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


def test_session_rolls_back_and_commits_with_the_job(
    engine: sa.Engine, db: psycopg.Connection[DictRow], wakeups: psycopg.Connection[Any],
    shop_worker: subprocess.Popen[bytes],
) -> None:
    """A Session's rollback takes its job and wake-up with it; its commit lets a worker run it."""
    with Session(engine) as session:
        order_id = session.execute(INSERT_ORDER).scalar_one()
        send_receipt.using(conn=session, queue=ROLLED_BACK_QUEUE).defer(order_id=order_id)
        session.rollback()
    with Session(engine) as session, session.begin():
        order_id = session.execute(INSERT_ORDER).scalar_one()
        job_id = send_receipt.using(conn=session).defer(order_id=order_id)
    check_transaction_proof(db, wakeups, committed_job=job_id, committed_order=order_id)


def test_connection_and_enqueue_many_join_the_transaction(
    engine: sa.Engine, db: psycopg.Connection[DictRow], wakeups: psycopg.Connection[Any],
    shop_worker: subprocess.Popen[bytes],
) -> None:
    """A Connection that has not begun yet is begun, so its own commit and rollback decide."""
    with engine.connect() as conn:
        order_id = conn.execute(INSERT_ORDER).scalar_one()
        conn.rollback()
        app.queue.enqueue_many(
            [{"task": "send_receipt", "args": {"order_id": 0}, "queue": ROLLED_BACK_QUEUE}],
            conn=conn,  # type: ignore[arg-type]
        )
        conn.rollback()
        order_id = conn.execute(INSERT_ORDER).scalar_one()
        conn.commit()
        # Not begun at this point: the enqueue must begin it, or the commit below is empty.
        assert not conn.in_transaction()
        job_id = send_receipt.enqueue({"order_id": order_id}, conn=conn)  # type: ignore[arg-type]
        conn.commit()
    check_transaction_proof(db, wakeups, committed_job=job_id, committed_order=order_id)


async def test_async_session_rolls_back_and_commits_with_the_job(
    async_engine: AsyncEngine, db: psycopg.Connection[DictRow],
    wakeups: psycopg.Connection[Any], shop_worker: subprocess.Popen[bytes],
) -> None:
    """An AsyncSession whose connection is not open yet gets it opened for the enqueue."""
    async with AsyncSession(async_engine) as session:
        await send_receipt.using(conn=session, queue=ROLLED_BACK_QUEUE).defer_async(order_id=0)
        await session.rollback()
    async with AsyncSession(async_engine) as session, session.begin():
        order_id = (await session.execute(INSERT_ORDER)).scalar_one()
        job_id = await send_receipt.using(conn=session).defer_async(order_id=order_id)
    await app.async_queue.close()
    check_transaction_proof(db, wakeups, committed_job=job_id, committed_order=order_id)


async def test_async_connection_rolls_back_and_commits_with_the_job(
    async_engine: AsyncEngine, db: psycopg.Connection[DictRow],
    wakeups: psycopg.Connection[Any], shop_worker: subprocess.Popen[bytes],
) -> None:
    """An AsyncConnection joins the same way, through AsyncQueue.enqueue."""
    queue = app.async_queue
    async with async_engine.connect() as conn:
        await queue.enqueue("send_receipt", {"order_id": 0}, queue=ROLLED_BACK_QUEUE,
                            conn=conn)  # type: ignore[arg-type]
        await conn.rollback()
        order_id = (await conn.execute(INSERT_ORDER)).scalar_one()
        job_id = await queue.enqueue("send_receipt", {"order_id": order_id},
                                     conn=conn)  # type: ignore[arg-type]
        await conn.commit()
    await queue.close()
    check_transaction_proof(db, wakeups, committed_job=job_id, committed_order=order_id)


def test_a_session_on_psycopg2_is_refused_with_what_to_do(
    dsn: str, shop: str, db: psycopg.Connection[DictRow]
) -> None:
    """A Session on psycopg2 is refused in one line naming the URL to use; nothing is written."""
    engine = sa.create_engine(sqlalchemy_url(dsn, driver="psycopg2"), **on_schema(shop))
    with Session(engine) as session, pytest.raises(pgbaton.InvalidArgument) as raised:
        send_receipt.using(conn=session).defer(order_id=1)
    engine.dispose()
    message = str(raised.value)
    assert "on postgresql+psycopg2://, whose driver is psycopg2, not psycopg 3" in message
    assert "a postgresql+psycopg:// URL" in message and "\n" not in message
    assert db.execute("SELECT count(*) AS n FROM jobs").fetchone() == {"n": 0}


async def test_an_async_session_on_asyncpg_is_refused_with_what_to_do(
    dsn: str, shop: str, db: psycopg.Connection[DictRow]
) -> None:
    """An AsyncSession on asyncpg is refused the same way."""
    params = psycopg.conninfo.conninfo_to_dict(dsn)
    engine = create_async_engine(
        f"postgresql+asyncpg://{params.get('user', '')}@/{params.get('dbname', '')}",
        connect_args={"host": params.get("host"), "port": int(params.get("port") or 5432)},
    )
    async with AsyncSession(engine) as session:
        with pytest.raises(pgbaton.InvalidArgument) as raised:
            await send_receipt.using(conn=session).defer_async(order_id=1)
    await engine.dispose()
    assert "on postgresql+asyncpg://, whose driver is asyncpg, not psycopg 3" in str(raised.value)
    assert db.execute("SELECT count(*) AS n FROM jobs").fetchone() == {"n": 0}


async def test_sync_and_async_are_not_mixed(engine: sa.Engine, async_engine: AsyncEngine) -> None:
    """A sync Session given to an async enqueue, or the reverse, says which call to use."""
    with Session(engine) as session, pytest.raises(pgbaton.InvalidArgument, match="enqueue/defer"):
        await send_receipt.using(conn=session).defer_async(order_id=1)
    async with AsyncSession(async_engine) as session:
        with pytest.raises(pgbaton.InvalidArgument, match="enqueue_async/defer_async"):
            send_receipt.using(conn=session).defer(order_id=1)


def test_something_else_is_refused(shop: str) -> None:
    """An object that is no connection is named in the error."""
    with pytest.raises(pgbaton.InvalidArgument, match=r"got builtins\.str"):
        send_receipt.enqueue({"order_id": 1}, conn="postgresql://")  # type: ignore[arg-type]
