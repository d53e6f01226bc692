"""Migrations: schema.sql equals the migrations, concurrent migrating is safe, and a
client refuses a schema of another version before writing anything."""

from __future__ import annotations

import multiprocessing
import multiprocessing.synchronize
import threading
import time
import traceback
import uuid
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.rows import DictRow

import pgbaton
from pgbaton import _database, _sql
from pgbaton.integrations.migrations import migrate_to
from tests.helpers import in_client_encoding, run_at_once

SPAWN = multiprocessing.get_context("spawn")
# A spawned process imports psycopg and pgbaton afresh: seconds on a loaded 2-core machine.
PROCESS_TIMEOUT_SECONDS = 90.0

# Each query lists one kind of object of the schema %(schema)s, in a stable order, with
# its full definition as PostgreSQL reports it. The version table is left out: it is
# migrate()'s bookkeeping, not part of what schema.sql promises.
CATALOG: dict[str, str] = {
    "tables": """
        SELECT c.relname, c.relkind, c.relpersistence, c.reloptions
        FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname = %(schema)s AND c.relname NOT LIKE 'schema_version%%'
        ORDER BY c.relname""",
    "columns": """
        SELECT c.relname, a.attnum, a.attname, format_type(a.atttypid, a.atttypmod) AS type,
               a.attnotnull, a.attidentity, a.attgenerated, a.attcollation::regcollation::text,
               pg_get_expr(d.adbin, d.adrelid) AS default
        FROM pg_attribute a
        JOIN pg_class c ON c.oid = a.attrelid
        JOIN pg_namespace n ON n.oid = c.relnamespace
        LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
        WHERE n.nspname = %(schema)s AND c.relkind = 'r' AND a.attnum > 0
          AND NOT a.attisdropped AND c.relname <> 'schema_version'
        ORDER BY c.relname, a.attnum""",
    "constraints": """
        SELECT c.relname, k.conname, k.contype, pg_get_constraintdef(k.oid) AS definition,
               k.condeferrable, k.condeferred
        FROM pg_constraint k
        JOIN pg_class c ON c.oid = k.conrelid
        JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname = %(schema)s AND c.relname <> 'schema_version'
        ORDER BY c.relname, k.conname""",
    "indexes": """
        SELECT indexname, indexdef FROM pg_indexes
        WHERE schemaname = %(schema)s AND tablename <> 'schema_version'
        ORDER BY indexname""",
    "sequences": """
        SELECT sequencename, data_type::text, start_value, min_value, max_value,
               increment_by, cycle, cache_size
        FROM pg_sequences WHERE schemaname = %(schema)s
        ORDER BY sequencename""",
    "triggers": """
        SELECT c.relname, t.tgname, t.tgenabled, pg_get_triggerdef(t.oid) AS definition
        FROM pg_trigger t
        JOIN pg_class c ON c.oid = t.tgrelid
        JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname = %(schema)s AND NOT t.tgisinternal
        ORDER BY c.relname, t.tgname""",
    "functions": """
        SELECT p.proname, pg_get_functiondef(p.oid) AS definition
        FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
        WHERE n.nspname = %(schema)s
        -- Overloads (job_claim_flow's five and six arguments) share a name: the
        -- arguments order them, or the two lists may differ by chance.
        ORDER BY p.proname, pg_get_function_identity_arguments(p.oid)""",
    "other_objects": """
        SELECT t.typname FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace
        WHERE n.nspname = %(schema)s AND t.typtype NOT IN ('c', 'b')
        ORDER BY t.typname""",
}


def _catalog(conn: psycopg.Connection[DictRow], schema: str) -> dict[str, list[dict[str, Any]]]:
    """Every object of the schema, with the schema's own name replaced by SCHEMA."""

    def normalise(value: Any) -> Any:
        if isinstance(value, str):
            return value.replace(f'"{schema}".', "SCHEMA.").replace(f"{schema}.", "SCHEMA.")
        return value

    with conn.transaction():
        # Definitions name objects on the search_path without their schema: keep it empty
        # so that both schemas are always spelled out, and then normalised alike.
        conn.execute("SET LOCAL search_path TO pg_catalog")
        return {
            kind: [
                {column: normalise(value) for column, value in row.items()}
                for row in conn.execute(query, {"schema": schema})  # type: ignore[arg-type]
            ]
            for kind, query in CATALOG.items()
        }


def _schema_exists(db: psycopg.Connection[DictRow], schema: str) -> bool:
    row = db.execute("SELECT count(*) AS n FROM pg_namespace WHERE nspname = %s", (schema,))
    return row.fetchone() == {"n": 1}


def _versions(db: psycopg.Connection[DictRow]) -> list[tuple[int, str, Any]]:
    rows = db.execute("SELECT version, name, applied_at FROM schema_version ORDER BY version")
    return [(row["version"], row["name"], row["applied_at"]) for row in rows]


def _job_count(db: psycopg.Connection[DictRow]) -> int:
    return int(db.execute("SELECT count(*) AS n FROM jobs").fetchone()["n"])  # type: ignore[index]


def test_schema_sql_creates_exactly_what_the_migrations_create(dsn, schema, other_schema, db):
    """schema.sql in one schema and every migration in another give the same tables,
    columns, types, defaults, constraints, indexes, sequences, triggers and functions."""
    db.execute(f'CREATE SCHEMA "{other_schema}"')  # type: ignore[arg-type]
    db.execute(_sql.schema_sql(other_schema))  # type: ignore[arg-type]
    with pgbaton.Queue(dsn, schema=schema) as queue:
        assert queue.migrate() == [m.version for m in _sql.migrations()]

    migrated = _catalog(db, schema)
    from_schema_sql = _catalog(db, other_schema)

    # The comparison is only as good as what it sees: make sure it sees the real thing.
    job_columns = [c["attname"] for c in migrated["columns"] if c["relname"] == "jobs"]
    assert job_columns[:3] == ["id", "queue", "task"]
    # Migration 4's limit_key, migration 5's columns, migration 6's meta, then
    # migration 12's unique columns, 13's awaited, 14's snoozes, 15's progress and the
    # durable steps' two (18), then migration 21's holds (claiming ahead by default).
    assert job_columns[-15:] == [
        "limit_key", "has_dependents", "waiting_for", "batch_id", "meta",
        "unique_key", "unique_states", "awaited", "snoozes",
        "progress", "progress_note", "progress_at", "has_steps", "waiting_event", "holds",
    ]
    assert len(job_columns) == 34
    assert {i["indexname"] for i in migrated["indexes"]} >= {
        "jobs_pkey", "jobs_claimable", "jobs_one_running_per_key",
    }
    assert [t["tgname"] for t in migrated["triggers"]] == [
        "job_logs_follow_delete", "jobs_ended_by_delete", "jobs_notify_ended_by_delete",
        "jobs_notify_inserted", "jobs_status_changed", "jobs_steps_deleted",
    ]
    assert {f["proname"] for f in migrated["functions"]} == {
        "batches_count", "job_claim_flow", "jobs_ended", "jobs_history_partitions",
        "jobs_notify_inserted", "jobs_release_children",
        # Migration 13's SQL API (docs/reference/sql.md).
        "enqueue", "enqueue_many", "job_enqueue_check", "jobs_notify_ended",
        # Migration 14's logs leave with their job.
        "job_logs_follow_delete",
        # The durable steps (docs/howto/durable-steps.md).
        "jobs_steps_deleted", "send_event", "send_event_by_key",
        # Migration 22: the retry's rule for a job with parents (a trigger before).
        "job_retry_status",
        # Migration 28: one trigger of a job's change of status, where three were
        # (migration 27's jobs_notify_cancelled among them).
        "jobs_status_changed",
    }
    # Migration 8's history table: partitioned, with no partition until a move.
    history = next(t for t in migrated["tables"] if t["relname"] == "jobs_history")
    assert history["relkind"] == "p"
    assert "jobs_history_id" in {i["indexname"] for i in migrated["indexes"]}
    jobs_table = next(t for t in migrated["tables"] if t["relname"] == "jobs")
    assert "fillfactor=70" in jobs_table["reloptions"]
    assert all(
        "SCHEMA." in i["indexdef"] and schema not in i["indexdef"] for i in migrated["indexes"]
    )

    for kind in CATALOG:
        assert from_schema_sql[kind] == migrated[kind], kind


# pg_trigger.tgtype's bits (PostgreSQL's catalog/pg_trigger.h): ROW 1, BEFORE 2, UPDATE 16,
# INSTEAD 64.
BEFORE_ROW_UPDATE_TRIGGERS = """
    SELECT t.tgname FROM pg_trigger t
    WHERE t.tgrelid = %(table)s::regclass
      AND t.tgtype & 1 = 1 AND t.tgtype & 2 = 2 AND t.tgtype & 16 = 16
      AND t.tgtype & 64 = 0
    ORDER BY t.tgname"""


def test_jobs_has_no_before_row_update_trigger(dsn, schema, other_schema, db):
    """No BEFORE ROW UPDATE trigger on jobs, whatever its WHEN or column list: PostgreSQL
    (ExecBRUpdateTriggers, GetTupleForTrigger) locks the row before it evaluates either,
    so every update of a job (each completion, heartbeat, start) would pay a heap lock
    and its WAL record for nothing (migration 22, docs/explanation/performance.md). The
    rules such a trigger kept are in the statements, and a CHECK
    (jobs_waiting_event_only_pending)."""
    db.execute(f'CREATE SCHEMA "{other_schema}"')  # type: ignore[arg-type]
    db.execute(_sql.schema_sql(other_schema))  # type: ignore[arg-type]
    with pgbaton.Queue(dsn, schema=schema) as queue:
        queue.migrate()
    for built in (schema, other_schema):
        rows = db.execute(BEFORE_ROW_UPDATE_TRIGGERS,  # type: ignore[arg-type]
                          {"table": f'"{built}".jobs'}).fetchall()
        assert [row["tgname"] for row in rows] == [], built
    # The query sees such a trigger when there is one.
    db.execute(f'CREATE FUNCTION "{schema}".nothing() RETURNS trigger LANGUAGE plpgsql '  # type: ignore[arg-type]
               "AS $$ BEGIN RETURN NEW; END $$")
    db.execute(f'CREATE TRIGGER never BEFORE UPDATE OF status ON "{schema}".jobs '  # type: ignore[arg-type]
               f'FOR EACH ROW WHEN (false) EXECUTE FUNCTION "{schema}".nothing()')
    rows = db.execute(BEFORE_ROW_UPDATE_TRIGGERS,  # type: ignore[arg-type]
                      {"table": f'"{schema}".jobs'}).fetchall()
    assert [row["tgname"] for row in rows] == ["never"]


def test_a_schema_built_from_schema_sql_is_accepted_by_a_queue(dsn, schema, db):
    """A team that applies schema_sql() with its own tool gets a schema pgbaton accepts."""
    db.execute(f'CREATE SCHEMA "{schema}"')  # type: ignore[arg-type]
    db.execute(_sql.schema_sql(schema))  # type: ignore[arg-type]
    with pgbaton.Queue(dsn, schema=schema) as queue:
        job_id = queue.enqueue("hello")
        assert queue.get(job_id) is not None


def _migrate_in_rounds(
    index: int,
    dsn: str,
    schemas: list[str],
    start: multiprocessing.synchronize.Barrier,
    reports: multiprocessing.Queue[dict[str, Any]],
) -> None:
    """One spawned process: for each schema, wait for all the others, then migrate it."""
    try:
        applied = {}
        for schema in schemas:
            queue = pgbaton.Queue(dsn, schema=schema)
            start.wait(timeout=PROCESS_TIMEOUT_SECONDS)
            applied[schema] = queue.migrate()
        reports.put({"process": index, "applied": applied})
    except BaseException:
        start.abort()  # free the others from the start line at once
        reports.put({"process": index, "error": traceback.format_exc()})


def test_processes_migrating_one_fresh_schema_at_once_all_succeed(server_dsn, db):
    """Four processes migrating the same fresh schema at the same instant all succeed,
    exactly one applies each migration, and each is recorded once; three rounds."""
    processes_count = 4
    schemas = [f"t_{uuid.uuid4().hex[:12]}" for _ in range(3)]
    try:
        ran = run_at_once(_migrate_in_rounds, processes_count, server_dsn, schemas)
        assert ran.exit_codes == [0] * processes_count
        assert not ran.errors, "\n".join(ran.errors)
        every_version = [m.version for m in _sql.migrations()]
        for schema in schemas:
            outcomes = sorted((r["applied"][schema] for r in ran.reports), key=len)
            assert outcomes == [[]] * (processes_count - 1) + [every_version], schema
            rows = db.execute(
                f'SELECT version, count(*) AS n FROM "{schema}".schema_version'  # type: ignore[arg-type]
                " GROUP BY version ORDER BY version"
            ).fetchall()
            assert rows == [{"version": v, "n": 1} for v in every_version]
    finally:
        for schema in schemas:
            db.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')  # type: ignore[arg-type]


def test_migrating_a_current_schema_applies_nothing(dsn, schema, db):
    """A second migrate() returns [] and leaves the version table as it was."""
    queue = pgbaton.Queue(dsn, schema=schema)
    assert queue.migrate() == [m.version for m in _sql.migrations()]
    recorded = _versions(db)
    assert [v for v, _, _ in recorded] == [m.version for m in _sql.migrations()]
    assert queue.migrate() == []
    assert _versions(db) == recorded
    assert queue.schema_version() == pgbaton.schema_version()


async def test_async_migrate_twice_applies_once(dsn, schema, db):
    """AsyncQueue.migrate() applies every migration once, then nothing."""
    async with pgbaton.AsyncQueue(dsn, schema=schema) as queue:
        assert await queue.migrate() == [m.version for m in _sql.migrations()]
        assert await queue.migrate() == []
        assert await queue.schema_version() == pgbaton.schema_version()
    assert [v for v, _, _ in _versions(db)] == [m.version for m in _sql.migrations()]


SQL_FOLDER = Path(pgbaton.__file__).parent / "sql"


def test_every_sql_file_is_ascii():
    """The statements and migrations hold ASCII alone, comments included: psycopg
    encodes a statement's text in the connection's client encoding, ASCII under
    SQL_ASCII (LATIN1 has no euro sign either), on a caller's connection (migrate_to:
    a Django migration, an Alembic revision); pgbaton's own talk UTF8. Migrations
    23 and 26 held a micro sign: migrate() raised UnicodeEncodeError under SQL_ASCII."""
    files = sorted(SQL_FOLDER.rglob("*.sql"))
    assert len(files) > len(_sql.migrations())
    beyond = [f"{path.relative_to(SQL_FOLDER)}:{number}: {line.strip()}"
              for path in files
              for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
              if not line.isascii()]
    assert beyond == []


@pytest.mark.parametrize("encoding", ["SQL_ASCII", "LATIN1"])
def test_a_dsn_in_another_client_encoding_migrates_enqueues_and_claims(
    dsn, schema, encoding
):
    """A DSN that sets the client encoding (options=-c client_encoding=SQL_ASCII) on
    every connection: migrate() builds a fresh schema, where the queue enqueues a job
    (its queue's name beyond ASCII) and claims it. What a claim reads back in these
    encodings is tests/queue/test_client_encoding.py's."""
    theirs = in_client_encoding(dsn, encoding)
    with pgbaton.Queue(theirs, schema=schema) as queue:
        assert queue.migrate() == [m.version for m in _sql.migrations()]
        job_id = queue.enqueue("t", {"n": 1}, queue="café")
        claims = queue.claim("w", queues=["café"])
    assert [(claim.id, claim.args) for claim in claims] == [(job_id, {"n": 1})]


async def test_an_async_queue_migrates_in_sql_ascii(dsn, schema):
    """AsyncQueue.migrate() under SQL_ASCII, then an enqueue and a claim."""
    async with pgbaton.AsyncQueue(in_client_encoding(dsn, "SQL_ASCII"), schema=schema) as queue:
        assert await queue.migrate() == [m.version for m in _sql.migrations()]
        job_id = await queue.enqueue("t", {"n": 1}, queue="café")
        claims = await queue.claim("w", queues=["café"])
    assert [(claim.id, claim.args) for claim in claims] == [(job_id, {"n": 1})]


def test_migrate_to_on_a_callers_connection_in_sql_ascii(dsn, schema, db):
    """migrate_to (Django's and Alembic's route) on a caller's connection whose client
    encoding is SQL_ASCII, which pgbaton leaves as it is."""
    with psycopg.connect(in_client_encoding(dsn, "SQL_ASCII")) as conn:
        applied = migrate_to(conn, schema, _sql.schema_version())
        conn.commit()
        assert conn.info.parameter_status("client_encoding") == "SQL_ASCII"
    assert applied == [m.version for m in _sql.migrations()]
    with pgbaton.Queue(dsn, schema=schema) as queue:
        assert queue.schema_version() == _sql.schema_version()


def test_unmigrated_schema_is_refused_and_nothing_is_created(dsn, schema, db):
    """Using a schema that was never migrated raises SchemaNotMigrated naming the schema
    and `pgbaton migrate`, and creates neither the schema nor any table."""
    with pgbaton.Queue(dsn, schema=schema) as queue:
        with pytest.raises(pgbaton.SchemaNotMigrated) as raised:
            queue.enqueue("send_email", {"to": "a@example.com"})
        assert queue.schema_version() == 0
    message = str(raised.value)
    assert repr(schema) in message and "pgbaton migrate" in message
    assert isinstance(raised.value, pgbaton.SchemaError)
    assert not _schema_exists(db, schema)

    # A schema a DBA created empty is no different.
    db.execute(f'CREATE SCHEMA "{schema}"')  # type: ignore[arg-type]
    with pgbaton.Queue(dsn, schema=schema) as queue, pytest.raises(pgbaton.SchemaNotMigrated):
        queue.claim("w1")
    tables = db.execute(
        "SELECT count(*) AS n FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
        " WHERE n.nspname = %s",
        (schema,),
    ).fetchone()
    assert tables == {"n": 0}


async def test_async_unmigrated_schema_is_refused(dsn, schema, db):
    """AsyncQueue refuses an unmigrated schema the same way, creating nothing."""
    async with pgbaton.AsyncQueue(dsn, schema=schema) as queue:
        with pytest.raises(pgbaton.SchemaNotMigrated, match="pgbaton migrate"):
            await queue.enqueue("send_email")
    assert not _schema_exists(db, schema)


def test_schema_newer_than_the_library_is_refused_before_writing(dsn, schema, db, queue):
    """A schema at version 99 makes a client raise SchemaTooNew naming both versions and
    telling to upgrade pgbaton; neither enqueue nor migrate writes anything."""
    db.execute("INSERT INTO schema_version (version, name) VALUES (99, 'from_the_future')")
    before = _versions(db)
    ours = pgbaton.schema_version()
    with pgbaton.Queue(dsn, schema=schema) as newer:
        with pytest.raises(pgbaton.SchemaTooNew) as raised:
            newer.enqueue("send_email")
        message = str(raised.value)
        assert "version 99" in message and f"version {ours}" in message
        assert "upgrade pgbaton" in message and repr(schema) in message

        with pytest.raises(pgbaton.SchemaTooNew, match="upgrade pgbaton") as raised:
            newer.migrate()
        assert "99" in str(raised.value)
    assert _job_count(db) == 0
    assert _versions(db) == before


def test_schema_older_than_the_library_is_refused_before_writing(
    dsn, schema, db, queue, monkeypatch
):
    """A library one version ahead of the schema raises SchemaOutOfDate naming both
    versions and `pgbaton migrate`, and writes nothing."""
    ours = pgbaton.schema_version()
    # The database is real; only the library's idea of its own version moves ahead.
    monkeypatch.setattr(_sql, "schema_version", lambda: ours + 1)
    with (
        pgbaton.Queue(dsn, schema=schema) as ahead,
        pytest.raises(pgbaton.SchemaOutOfDate) as raised,
    ):
        ahead.enqueue_many([{"task": "a"}, {"task": "b"}])
    message = str(raised.value)
    assert f"version {ours}" in message and f"version {ours + 1}" in message
    assert "pgbaton migrate" in message and repr(schema) in message
    assert _job_count(db) == 0


def test_server_version_is_read_and_accepted(dsn, db):
    """The server's version is read from the server and PostgreSQL 15 and 18 pass."""
    with _database.connect(dsn, autocommit=True) as conn:
        row = conn.execute(_sql.queries("pgbaton")["server_version"]).fetchone()
        assert row is not None
        assert row["version_num"] == conn.info.server_version
        assert row["version_num"] >= 150000
        _database.check_server(conn)


def test_server_older_than_required_is_refused_before_writing(dsn, schema, db, monkeypatch):
    """A server below the library's minimum makes migrate() and the first call raise
    ServerTooOld naming the server's version, before the schema is created."""
    server = db.execute("SHOW server_version").fetchone()["server_version"]  # type: ignore[index]
    # The server is real; only the minimum the library asks for moves above it.
    monkeypatch.setattr(_database, "MIN_SERVER_VERSION", 10_000_000)
    with pgbaton.Queue(dsn, schema=schema) as queue:
        with pytest.raises(pgbaton.ServerTooOld) as raised:
            queue.migrate()
        assert f"PostgreSQL {server} is too old" in str(raised.value)
        with pytest.raises(pgbaton.ServerTooOld):
            queue.enqueue("send_email")
    assert not _schema_exists(db, schema)


def test_a_version_1_schema_with_jobs_migrates_to_the_partial_idempotency_index(
    dsn, schema, db
):
    """Migration 2 on a schema that already holds jobs: the jobs stay, an idempotency key
    taken under version 1 is still taken, and keyless jobs no longer enter its index."""
    first = _sql.migrations()[0]
    sql = _sql.queries(schema)
    db.execute(sql["schema_create"])  # type: ignore[arg-type]
    db.execute(sql["schema_version_create"])  # type: ignore[arg-type]
    db.execute(first.in_schema(schema))  # type: ignore[arg-type]
    db.execute(sql["schema_version_record"], {"version": 1, "name": first.name})  # type: ignore[arg-type]
    db.execute("INSERT INTO jobs (task, idempotency_key) VALUES ('t', 'once'), ('t', NULL)")
    db.commit()

    with pgbaton.Queue(dsn, schema=schema) as queue:
        assert queue.migrate() == [m.version for m in _sql.migrations()[1:]]
        kept = db.execute("SELECT id FROM jobs WHERE idempotency_key = 'once'").fetchone()
        assert queue.enqueue("t", idempotency_key="once") == kept["id"]
        again = queue.enqueue_many([{"task": "t", "idempotency_key": "once"}, {"task": "t"}])
        assert again[0] == kept["id"]
    index = db.execute(
        "SELECT indexdef FROM pg_indexes WHERE indexname = 'jobs_idempotency_key_unique'"
        " AND schemaname = %s", (schema,)
    ).fetchone()
    assert index["indexdef"].endswith("WHERE (idempotency_key IS NOT NULL)")
    assert db.execute("SELECT count(*) AS n FROM jobs").fetchone()["n"] == 3


LEASE_INDEXES = """
    SELECT indexname, indexdef FROM pg_indexes
    WHERE schemaname = %(schema)s AND tablename = 'jobs'
      AND indexname IN ('jobs_held', 'jobs_running_lease', 'jobs_queue_held')
    ORDER BY indexname"""


def test_one_index_holds_the_leases(dsn, schema, other_schema, db):
    """The jobs that hold a lease are in one index, jobs_held (queue, lease_until), for
    the flow claim's held count and the reaper alike: migration 23 dropped
    jobs_running_lease and jobs_queue_held, which every claim wrote an entry into as
    well (benchmarks/results/job-cost-2026-12-06.md)."""
    db.execute(f'CREATE SCHEMA "{other_schema}"')  # type: ignore[arg-type]
    db.execute(_sql.schema_sql(other_schema))  # type: ignore[arg-type]
    with pgbaton.Queue(dsn, schema=schema) as queue:
        queue.migrate()
    for built in (schema, other_schema):
        rows = db.execute(LEASE_INDEXES, {"schema": built}).fetchall()  # type: ignore[arg-type]
        assert [row["indexname"] for row in rows] == ["jobs_held"], built
        assert rows[0]["indexdef"].endswith(
            "USING btree (queue, lease_until) WHERE (lease_until IS NOT NULL)"
        ), built


def test_an_upgrade_with_jobs_held_keeps_the_limits_and_the_reaper(dsn, schema, db):
    """Migration 23 on a version-22 schema whose limited queue is at its limit, one of
    its jobs with a lease run out: after the upgrade the queue still refuses a claim,
    the reaper takes the expired job back, and the claim then takes exactly one."""
    with psycopg.connect(dsn) as conn:
        migrate_to(conn, schema, 22)
    db.execute("INSERT INTO queues (name, concurrency) VALUES ('limited', 2)")
    db.execute("INSERT INTO jobs (queue, task) SELECT 'limited', 't' FROM generate_series(1, 4)")
    # Version 22's claim, its seven arguments (this release's passes an eighth).
    claimed = db.execute(
        "SELECT * FROM job_claim_flow('old', 10, 60.0, NULL, NULL, NULL, 10)"
    ).fetchall()
    assert [row["queue"] for row in claimed] == ["limited", "limited"]
    expired = claimed[0]["id"]
    db.execute("UPDATE jobs SET lease_until = now() - interval '1 second' WHERE id = %s",
               (expired,))

    with pgbaton.Queue(dsn, schema=schema) as queue:
        assert queue.migrate() == [m.version for m in _sql.migrations()[22:]]
        assert [s.held for s in queue.queue_settings("limited")] == [2]
        assert queue.claim("new", limit=10, queues=["limited"]) == []
        assert queue.claim("new", limit=10) == []
        assert queue.reap() == 1
        assert db.execute(
            "SELECT status, claim_token, lease_until FROM jobs WHERE id = %s", (expired,)
        ).fetchone() == {"status": "pending", "claim_token": None, "lease_until": None}
        [again] = queue.claim("new", limit=10)
        assert again.queue == "limited"
        assert queue.claim("new", limit=10) == []
        assert [s.held for s in queue.queue_settings("limited")] == [2]
    held = db.execute(
        "SELECT count(*) AS n FROM jobs WHERE lease_until IS NOT NULL AND queue = 'limited'"
    ).fetchone()
    assert held == {"n": 2}


@pytest.mark.parametrize("version", [22, 23])
def test_a_migration_does_not_deadlock_with_a_transaction_that_reads_then_writes(
    dsn, schema, db, version
):
    """An application's transaction has read jobs and then enqueues while a migration
    waits for its lock. Had migration 23 built the index (a lock that blocks writes)
    and only then asked for ACCESS EXCLUSIVE to drop the old indexes, the enqueue would
    wait for the migration and the migration for it: a deadlock, one of them aborted.
    The migration takes ACCESS EXCLUSIVE first, so the enqueue goes through, and the
    migration follows its commit. 22 is held to the same: its first statement, a DROP
    TRIGGER, takes ACCESS EXCLUSIVE before anything else. (24 changes functions only
    and never waits for the table.)"""
    with psycopg.connect(dsn) as conn:
        migrate_to(conn, schema, version - 1)
    errors: list[BaseException] = []
    with psycopg.connect(dsn) as app:
        app.execute(f'SET search_path TO "{schema}"')  # type: ignore[arg-type]
        app.execute("SELECT count(*) FROM jobs")

        def migrate() -> None:
            try:
                with psycopg.connect(dsn) as conn:
                    migrate_to(conn, schema, version)
            except BaseException as error:  # reported below
                errors.append(error)

        migrating = threading.Thread(target=migrate)
        migrating.start()
        deadline = time.monotonic() + 30
        while db.execute(
            "SELECT count(*) AS n FROM pg_locks WHERE NOT granted AND relation = %s::regclass",
            (f'"{schema}".jobs',),
        ).fetchone()["n"] == 0:  # type: ignore[index]
            assert time.monotonic() < deadline, "the migration never waited for its lock"
            assert migrating.is_alive(), errors
            time.sleep(0.02)
        # A deadlock would be found by this session after 100 ms of waiting, and raised.
        app.execute("SET LOCAL deadlock_timeout = '100ms'")
        app.execute("INSERT INTO jobs (task) VALUES ('after_a_read')")
        app.commit()
    migrating.join(30)
    assert not migrating.is_alive() and errors == []
    assert db.execute("SELECT max(version) AS v FROM schema_version").fetchone() == {
        "v": version}
    assert db.execute("SELECT count(*) AS n FROM jobs").fetchone() == {"n": 1}
