"""Rolling deploys: the previous release runs against this release's schema, and this
release refuses the previous schema (docs/explanation/guarantees.md, "Rolling deploys").

The previous release's statements are kept verbatim in previous_release/queries_v3.sql
(schema version 3); a test here runs them on connections of their own, as that
release's producers and workers would, opened before and after `pgbaton migrate`.
"""

from __future__ import annotations

import datetime as dt
import json
import uuid
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.rows import DictRow, dict_row

import pgbaton
from pgbaton import _sql
from tests.helpers import job_rows, wait_for_lease_to_pass

PREVIOUS_VERSION = 3
PREVIOUS_QUERIES = Path(__file__).parent / "previous_release" / "queries_v3.sql"


class PreviousRelease:
    """The previous release's statements, run with its parameters on one connection."""

    def __init__(self, conn: psycopg.Connection[DictRow], schema: str) -> None:
        parts = _sql._QUERY_HEADER.split(PREVIOUS_QUERIES.read_text(encoding="utf-8"))
        self.sql = {
            name: body.strip().replace(_sql.SCHEMA_PLACEHOLDER, f'"{schema}"')
            for name, body in zip(parts[1::2], parts[2::2], strict=True)
        }
        self.conn = conn

    def run(self, name: str, **params: Any) -> list[dict[str, Any]]:
        # prepare=True: a long-lived producer's statements are prepared, as psycopg does
        # after a few executions, and must survive the schema changing under them.
        cursor = self.conn.execute(self.sql[name], params, prepare=True)  # type: ignore[arg-type]
        return cursor.fetchall() if cursor.description else []

    def enqueue(self, task: str, **options: Any) -> int:
        params = {
            "queue": "default", "task": task, "args": "{}", "priority": 0, "run_at": None,
            "delay": 0.0, "key": None, "idempotency_key": None, "max_attempts": 5,
            **options,
        }
        name = "job_insert" if params["idempotency_key"] is None else "job_insert_idempotent"
        return int(self.run(name, **params)[0]["id"])

    def claim(self, worker_id: str, limit: int = 10, lease: float = 60.0) -> list[dict]:
        return self.run(
            "job_claim_many", worker_id=worker_id, limit=limit, lease=lease, queues=None,
            tasks=None, after=None,
        )

    def held(self, *claims: dict[str, Any], **extra: list[Any]) -> dict[str, Any]:
        return {"ids": [c["id"] for c in claims], "tokens": [c["claim_token"] for c in claims],
                **extra}


def _previous_schema(db: psycopg.Connection[DictRow], schema: str) -> None:
    """A schema exactly as the previous release's `pgbaton migrate` left it."""
    sql = _sql.queries(schema)
    db.execute(sql["schema_create"])  # type: ignore[arg-type]
    db.execute(sql["schema_version_create"])  # type: ignore[arg-type]
    for migration in _sql.migrations()[:PREVIOUS_VERSION]:
        db.execute(migration.in_schema(schema))  # type: ignore[arg-type]
        db.execute(
            sql["schema_version_record"],  # type: ignore[arg-type]
            {"version": migration.version, "name": migration.name},
        )


@pytest.fixture
def previous(dsn: str, schema: str, db) -> Any:
    """The previous release's connection on a schema at its version, opened before any
    migration of this release."""
    _previous_schema(db, schema)
    with psycopg.connect(dsn, autocommit=True, row_factory=dict_row) as conn:
        yield PreviousRelease(conn, schema)


def test_the_previous_release_keeps_enqueuing_and_working_across_the_migration(
    previous, dsn, schema, db
):
    """A producer and a worker of the previous release, connected before `pgbaton migrate`
    applies this release's migrations, enqueue (plain, with an idempotency key, in bulk),
    claim, heartbeat, complete, fail, release, reap, cancel and retry as before, and
    their idempotency keys still deduplicate against this release's producers."""
    before = previous.enqueue("charge_card", idempotency_key="order-1")
    previous.claim("old-worker")  # every statement prepared before the migration
    with pgbaton.Queue(dsn, schema=schema) as queue:
        assert queue.migrate() == [m.version for m in _sql.migrations()[PREVIOUS_VERSION:]]

        # Producers of both releases, one key space per task.
        assert previous.enqueue("charge_card", idempotency_key="order-1") == before
        mixed = previous.enqueue("charge_card", idempotency_key="order-2")
        assert queue.enqueue_once("charge_card", idempotency_key="order-2") == (
            pgbaton.Enqueued(id=mixed, created=False)
        )
        fresh = queue.enqueue_once("charge_card", idempotency_key="order-3")
        assert previous.enqueue("charge_card", idempotency_key="order-3") == fresh.id
        plain = previous.enqueue("send_receipt", key="customer-1")
        [row] = previous.run(
            "job_insert_many",
            jobs=json.dumps([{"task": "bulk", "idempotency_key": "order-1"}, {"task": "bulk"}]),
        )
        assert row["ids"][0] is None and row["ids"][1] is not None  # the global index

        # The previous release's worker on the new schema, with the very statement it
        # prepared before the migration (the same parameter types: an int lease would
        # prepare another): a change of what a row or a result holds fails it with
        # "cached plan must not change result type" (migration 26's first form did).
        claims = previous.claim("old-worker")
        by_task = {c["task"]: c for c in claims}
        assert set(by_task) == {"charge_card", "send_receipt", "bulk"}
        assert len(previous.run("job_heartbeat_many", **previous.held(*claims), lease=60.0)) == len(
            claims
        )
        assert previous.run(
            "job_complete_many", **previous.held(by_task["send_receipt"], results=[None])
        )
        assert previous.run(
            "job_fail_many",
            **previous.held(by_task["bulk"], errors=['{"message": "boom"}'], retry_in=[0.0]),
        )
        others = [c for c in claims if c["task"] == "charge_card"]
        assert len(previous.run("job_release_many", **previous.held(*others))) == len(others)

        # An operator of the previous release cancels and retries jobs this one runs.
        [held] = queue.claim("new-worker", lease=0.5, tasks=["charge_card"])
        assert previous.run("job_cancel", id=held.id)
        assert previous.run("job_retry", id=held.id)
        cancelled_by_new = queue.enqueue("charge_card", key="customer-2")
        [running] = queue.claim("new-worker", lease=0.5, tasks=["charge_card"])
        while running.id != cancelled_by_new:
            assert queue.complete(running) is True
            [running] = queue.claim("new-worker", lease=0.5, tasks=["charge_card"])
        assert queue.cancel(running.id) is True
        assert previous.run("job_retry", id=running.id)  # leaves the holder's lease behind
        wait_for_lease_to_pass(db, running.id)
        assert previous.run("job_reap") == []
        assert queue.reap() == 0
        assert job_rows(db, "claim_token", "lease_until")[-1] == (None, None)

        for name in ("job_get", "job_list", "queue_stats", "job_prune"):
            params = {"id": plain, "status": None, "queue": None, "task": None, "limit": 10,
                      "retention": 3600.0}
            previous.run(name, **params)
    keyed = db.execute(
        "SELECT task, idempotency_key FROM jobs WHERE idempotency_key IS NOT NULL ORDER BY id"
    ).fetchall()
    assert [(r["task"], r["idempotency_key"]) for r in keyed] == [
        ("charge_card", "order-1"), ("charge_card", "order-2"), ("charge_card", "order-3"),
    ]


def test_this_release_refuses_the_previous_schema_and_writes_nothing(dsn, schema, db):
    """A producer of this release pointed at a schema the previous release migrated is
    refused with SchemaOutOfDate naming both versions and `pgbaton migrate`, before it
    writes anything; so is its worker."""
    _previous_schema(db, schema)
    ours = pgbaton.schema_version()
    with pgbaton.Queue(dsn, schema=schema) as queue:
        with pytest.raises(pgbaton.SchemaOutOfDate) as raised:
            queue.enqueue_once("charge_card", idempotency_key="order-1")
        message = str(raised.value)
        assert f"version {PREVIOUS_VERSION}" in message and f"version {ours}" in message
        assert "pgbaton migrate" in message and "\n" not in message
        with pytest.raises(pgbaton.SchemaOutOfDate):
            queue.claim("new-worker", tasks=["charge_card"])
    assert db.execute("SELECT count(*) AS n FROM jobs").fetchone() == {"n": 0}


def test_the_previous_release_runs_on_a_schema_built_from_schema_sql(dsn, schema, db):
    """A team that applies `pgbaton schema --sql` with its own tool gets a schema the
    previous release's producers can still use."""
    db.execute(_sql.schema_sql(schema))  # type: ignore[arg-type]
    with psycopg.connect(dsn, autocommit=True, row_factory=dict_row) as conn:
        previous = PreviousRelease(conn, schema)
        first = previous.enqueue(
            "charge_card", idempotency_key=f"k-{uuid.uuid4().hex}",
            run_at=dt.datetime.now(dt.UTC),
        )
        assert [c["id"] for c in previous.claim("old-worker")] == [first]
