"""Fixtures for the framework tests: a shop schema, a LISTEN on its channel, and real
`pgbaton worker` processes; and the proof each framework path must pass."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.rows import DictRow

import pgbaton
from tests.integrations import shop_tasks

ROOT = Path(__file__).resolve().parents[2]
ORDERS_DDL = 'CREATE TABLE "{schema}".orders (id bigserial PRIMARY KEY, item text NOT NULL)'


def wait_until(condition: Callable[[], bool], what: str, timeout: float = 60) -> None:
    """Poll a condition (a query) until it holds; fail after a generous deadline."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.05)


def start_worker(
    app_spec: str, dsn: str, schema: str, log_path: Path, *, env: dict[str, str] | None = None
) -> subprocess.Popen[bytes]:
    """A `pgbaton worker` process for app_spec on the test schema, logging to log_path."""
    with log_path.open("wb") as log:
        return subprocess.Popen(
            [sys.executable, "-m", "pgbaton", "worker", app_spec, "--schema", schema],
            stdout=log, stderr=subprocess.STDOUT, cwd=ROOT,
            env={**os.environ, "PGBATON_DSN": dsn, "PGBATON_TEST_SCHEMA": schema,
                 "PYTHONPATH": str(ROOT), **(env or {})},
        )


def stop_worker(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)


@pytest.fixture
def shop(dsn: str, schema: str, queue: pgbaton.Queue, db: psycopg.Connection[DictRow]) -> str:
    """The migrated test schema with an orders table; the shop's App enqueues into it."""
    db.execute(ORDERS_DDL.format(schema=schema))  # type: ignore[arg-type]
    shop_tasks.app.configure(dsn=dsn, schema=schema)
    return schema


@pytest.fixture
def wakeups(dsn: str, schema: str) -> Iterator[psycopg.Connection[Any]]:
    """A connection that LISTENs on the schema's channel, before anything is enqueued."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f'LISTEN "{pgbaton.Queue(dsn, schema=schema).channel}"')  # type: ignore[arg-type]
        yield conn


@pytest.fixture
def shop_worker(dsn: str, shop: str, tmp_path: Path) -> Iterator[subprocess.Popen[bytes]]:
    """A real worker running the shop's tasks, stopped at teardown."""
    process = start_worker(
        "tests.integrations.shop_tasks:app", dsn, shop, tmp_path / "worker.log"
    )
    yield process
    stop_worker(process)


def sqlalchemy_url(dsn: str, *, driver: str = "psycopg") -> str:
    """The test server as a SQLAlchemy URL for `driver` (conninfo keywords in the query,
    so that a Unix socket folder survives)."""
    params = psycopg.conninfo.conninfo_to_dict(dsn)
    query = "&".join(f"{key}={value}" for key, value in params.items() if value is not None)
    return f"postgresql+{driver}:///?{query}"


def on_schema(schema: str) -> dict[str, Any]:
    return {"connect_args": {"options": f"-c search_path={schema}"}}


ROLLED_BACK_QUEUE = "rolled_back"


def check_transaction_proof(
    db: psycopg.Connection[DictRow],
    wakeups: psycopg.Connection[Any],
    *,
    committed_job: int,
    committed_order: int,
) -> None:
    """What every framework path must show after one enqueue that was rolled back (on the
    queue `rolled_back`) and one that was committed (on `default`): no trace of the first,
    not even its wake-up, and the second claimable, then done by a real worker."""
    assert db.execute("SELECT count(*) AS n FROM orders").fetchone() == {"n": 1}
    rows = db.execute("SELECT id, queue, status FROM jobs").fetchall()
    assert [row["id"] for row in rows] == [committed_job], rows
    assert rows[0]["queue"] == "default"
    # Wake-ups arrive in commit order, so every one a rolled-back enqueue could have sent
    # would come before the committed one's.
    payloads = [
        note.payload for note in wakeups.notifies(timeout=60, stop_after=1)
    ]
    assert payloads == ["default"]

    def done() -> bool:
        row = db.execute("SELECT status FROM jobs WHERE id = %s", (committed_job,)).fetchone()
        return row is not None and row["status"] == "done"

    wait_until(done, f"job {committed_job} to be done by the worker")
    result = db.execute("SELECT result FROM jobs WHERE id = %s", (committed_job,)).fetchone()
    assert result == {"result": {"receipt_for": committed_order}}
