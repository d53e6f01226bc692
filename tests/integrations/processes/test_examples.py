"""The examples in examples/ run as their READMEs say, so none of them rots: started,
called, and their jobs seen done. (The Django project: tests/integrations/test_django.py.)"""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from fastapi.testclient import TestClient
from psycopg.rows import DictRow

from tests.integrations.conftest import start_worker, stop_worker, wait_until

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"


def test_the_plain_script_enqueues_in_its_transaction_and_works_the_job(
    dsn: str, schema: str, db: psycopg.Connection[DictRow]
) -> None:
    """receipts.py: the rolled-back order leaves no job; the committed one's job is done."""
    run = subprocess.run(
        [sys.executable, str(EXAMPLES / "plain_script" / "receipts.py")],
        env={**os.environ, "PGBATON_DSN": dsn, "PGBATON_SCHEMA": schema},
        capture_output=True, text=True, timeout=120, check=False,
    )
    assert run.returncode == 0, run.stderr
    orders = db.execute("SELECT id, item FROM orders").fetchall()
    assert [row["item"] for row in orders] == ["book"]
    jobs = db.execute("SELECT id, status, args, result FROM jobs").fetchall()
    assert [(job["status"], job["args"]) for job in jobs] == [
        ("done", {"order_id": orders[0]["id"]})
    ]
    assert f"job {jobs[0]['id']} done: receipt for order {orders[0]['id']}" in run.stdout


@pytest.fixture
def fastapi_shop(
    dsn: str, schema: str, db: psycopg.Connection[DictRow], monkeypatch: pytest.MonkeyPatch
) -> Iterator[Any]:
    """The FastAPI shop's modules, imported afresh for the test's database and schema."""
    db.execute(f'CREATE SCHEMA "{schema}"')  # type: ignore[arg-type]
    monkeypatch.setenv("SHOP_DATABASE_URL", dsn)
    monkeypatch.setenv("SHOP_SCHEMA", schema)
    monkeypatch.syspath_prepend(str(EXAMPLES))
    for name in [m for m in sys.modules if m.startswith("fastapi_shop")]:
        monkeypatch.delitem(sys.modules, name)
    yield importlib.import_module("fastapi_shop.main")
    for name in [m for m in sys.modules if m.startswith("fastapi_shop")]:
        del sys.modules[name]


def test_the_fastapi_shop_commits_an_order_with_its_receipt_job(
    fastapi_shop: Any, dsn: str, schema: str, db: psycopg.Connection[DictRow], tmp_path: Path
) -> None:
    """POST /orders: a refused order leaves neither order nor job nor wake-up; an accepted
    one's receipt is sent by a real worker beside the app."""
    worker = None
    try:
        with TestClient(fastapi_shop.app) as client, psycopg.connect(
            dsn, autocommit=True
        ) as wakeups:
            wakeups.execute(f'LISTEN "{schema}_jobs"')  # type: ignore[arg-type]
            refused = client.post("/orders", json={"item": "refused"})
            assert refused.status_code == 422
            assert db.execute("SELECT count(*) AS n FROM jobs").fetchone() == {"n": 0}
            assert db.execute("SELECT count(*) AS n FROM orders").fetchone() == {"n": 0}
            created = client.post("/orders", json={"item": "book"})
            assert created.status_code == 201, created.text
            order = created.json()["order"]
            payloads = [note.payload for note in wakeups.notifies(timeout=60, stop_after=1)]
            assert payloads == ["default"]
            worker = start_worker(
                "fastapi_shop.jobs:app", dsn, schema, tmp_path / "worker.log",
                env={"SHOP_DATABASE_URL": dsn, "SHOP_SCHEMA": schema,
                     "PYTHONPATH": str(EXAMPLES)},
            )
            # The handler's own commit shows the receipt sent a moment before the
            # worker's completion marks the job done: wait for the job, then look.
            wait_until(
                lambda: db.execute("SELECT status FROM jobs").fetchone() == {"status": "done"},
                "the worker to finish the receipt job",
            )
            job = db.execute("SELECT status, args FROM jobs").fetchone()
            assert job == {"status": "done", "args": {"order_id": order}}
            assert client.get(f"/orders/{order}").json()["receipt_sent"] is True
    finally:
        if worker is not None:
            stop_worker(worker)
