"""pgbaton's schema created and upgraded by a real Alembic run of a user's revisions."""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest
from alembic import command
from alembic.config import Config
from psycopg.rows import DictRow

import pgbaton
from pgbaton import _sql
from pgbaton.integrations import alembic as pgbaton_alembic
from tests.integrations.conftest import sqlalchemy_url

PROJECT = Path(__file__).parent / "alembic_project"


@pytest.fixture
def alembic_config(
    dsn: str, schema: str, monkeypatch: pytest.MonkeyPatch
) -> Config:
    """Alembic on the test project, its version table and pgbaton's in the test schema."""
    monkeypatch.setenv("PGBATON_TEST_SCHEMA", schema)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')  # type: ignore[arg-type]
    config = Config()
    config.set_main_option("script_location", str(PROJECT))
    config.set_main_option("sqlalchemy.url", sqlalchemy_url(dsn).replace("%", "%%"))
    return config


def versions(db: psycopg.Connection[DictRow]) -> list[int]:
    return [row["version"] for row in db.execute("SELECT version FROM schema_version")]


def test_revisions_create_then_upgrade_the_schema(
    alembic_config: Config, dsn: str, schema: str, db: psycopg.Connection[DictRow]
) -> None:
    """Revision a1 brings the schema to version 1, a2 to version 3, a3 to version 6, a4
    to version 8, a5 to version 9, a6 to version 10, a7 to version 11, a8 to version 12,
    a9 to version 13, a10 to version 18, a11 to version 19, a12 to version 20, a13 to
    version 21, a14 to version 22, a15 to version 23, a16 to version 24, a17
    to version 25, a18 to version 26, a19 to version 27, a20 to version 28 (this
    pgbaton's); then a Queue works."""
    command.upgrade(alembic_config, "a1")
    assert versions(db) == [1]
    with pytest.raises(pgbaton.SchemaOutOfDate):
        pgbaton.Queue(dsn, schema=schema).enqueue("t")
    command.upgrade(alembic_config, "head")
    assert versions(db) == list(range(1, 29))
    assert db.execute("SELECT version_num FROM alembic_version").fetchone() == {
        "version_num": "a20"
    }
    with pgbaton.Queue(dsn, schema=schema) as queue:
        job_id = queue.enqueue("t", {"n": 1})
        assert queue.get(job_id) is not None


def test_a_schema_migrated_by_pgbaton_is_left_as_it_is(
    alembic_config: Config, dsn: str, schema: str, db: psycopg.Connection[DictRow]
) -> None:
    """After `pgbaton migrate`, the revisions find nothing of pgbaton's left to do."""
    pgbaton.Queue(dsn, schema=schema).migrate()
    applied_at = db.execute("SELECT version, applied_at FROM schema_version").fetchall()
    command.upgrade(alembic_config, "head")
    assert db.execute("SELECT version, applied_at FROM schema_version").fetchall() == applied_at


def test_a_failing_revision_takes_pgbatons_step_back_with_it(
    alembic_config: Config, db: psycopg.Connection[DictRow], monkeypatch: pytest.MonkeyPatch
) -> None:
    """pgbaton's DDL is in the revision's transaction: its failure leaves version 1."""
    command.upgrade(alembic_config, "a1")
    monkeypatch.setenv("FAIL_AFTER_PGBATON", "1")
    with pytest.raises(RuntimeError, match="on purpose"):
        command.upgrade(alembic_config, "head")
    assert versions(db) == [1]
    assert db.execute("SELECT to_regclass('orders') AS t").fetchone() == {"t": None}


def test_a_version_this_pgbaton_does_not_know_is_refused(alembic_config: Config) -> None:
    """A revision asking for a version out of range fails in one line, before any SQL."""
    newest = _sql.schema_version()
    with pytest.raises(pgbaton.InvalidArgument, match=f"from 1 to {newest}"):
        pgbaton_alembic.upgrade(None, newest + 1)
