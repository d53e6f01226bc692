"""A `pgbaton worker` process runs a typed job (its handler given the model, the
datetime and the dataclass) and an encrypted one (opened with its key); a job whose
stored args do not fit, or that it cannot open, fails at its first attempt with the
reason, its other attempts unspent (docs/howto/typed-args.md, docs/howto/encryption.md)."""

from __future__ import annotations

import datetime as dt
import hashlib
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import pgbaton
from pgbaton import encryption
from tests.worker_processes import ROOT, WorkerProcess, scalar, wait_until

pytest.importorskip("pydantic")
pytest.importorskip("cryptography")

APP_SPEC = "tests.typed_args.processes.typed_app:app"
KEY, OTHER = encryption.new_key(), encryption.new_key()
SECRET = "s3cret-4111-1111"


@pytest.fixture
def typed_app(dsn: str, schema: str, queue: pgbaton.Queue, monkeypatch) -> pgbaton.App:
    from tests.typed_args.processes import typed_app

    monkeypatch.setenv(encryption.KEYS_VARIABLE, KEY)
    typed_app.app.configure(dsn=dsn, schema=schema)
    return typed_app.app


@pytest.fixture
def start_worker(dsn: str, schema: str, tmp_path: Path) -> Iterator[Callable[..., WorkerProcess]]:
    started: list[WorkerProcess] = []

    def start(keys: str | None) -> WorkerProcess:
        env = {k: v for k, v in os.environ.items() if k != encryption.KEYS_VARIABLE}
        env.update({"PGBATON_DSN": dsn, "PGBATON_TEST_SCHEMA": schema,
                    "PYTHONPATH": str(ROOT)})
        if keys is not None:
            env[encryption.KEYS_VARIABLE] = keys
        log_path = tmp_path / f"worker-{len(started)}.log"
        with log_path.open("wb") as log:
            process = subprocess.Popen(
                [sys.executable, "-m", "pgbaton", "worker", APP_SPEC, "--schema", schema,
                 "--no-maintenance", "--poll-interval", "0.2"],
                stdout=log, stderr=subprocess.STDOUT, env=env, cwd=ROOT)
        worker = WorkerProcess(process, log_path)
        started.append(worker)
        worker.wait_for_log("started:")
        return worker

    yield start
    for worker in started:
        worker.kill()


def ended(db: Any, ids: list[int]) -> Callable[[], bool]:
    return lambda: scalar(db, "SELECT count(*) FROM jobs WHERE id = ANY(%s) AND status IN "
                          "('done', 'failed')", ids) == len(ids)


def test_a_worker_runs_typed_and_encrypted_jobs_and_fails_bad_ones_at_once(
    typed_app, start_worker, db, schema
):
    ship, charge = typed_app.tasks["ship"], typed_app.tasks["charge"]
    typed = ship.defer(order={"id": 3, "lines": ["tea"]},
                       at=dt.datetime(2026, 1, 2, tzinfo=dt.UTC), point={"x": 4, "y": 0})
    sealed = charge.defer(card=SECRET, cents=250)
    # Through the SQL API, which no Python judges: args that do not fit the handler.
    bad_sql = scalar(db, f'SELECT "{schema}".enqueue(\'ship\', %s::jsonb)',
                     '{"order": {"id": "seven", "lines": []}, "at": "2026-01-02T00:00:00Z",'
                     ' "point": {"x": 1}}')
    plain = scalar(db, f'SELECT "{schema}".enqueue(\'charge\', %s::jsonb)',
                   '{"card": "x", "cents": 1}')
    stranger = typed_app.queue.enqueue("charge", encryption.seal(
        "charge", '{"card": "x", "cents": 1}', encryption.parse_keys(OTHER)))
    worker = start_worker(KEY)
    ids = [typed, sealed, bad_sql, plain, stranger]
    wait_until(ended(db, ids), what="the worker to end the five jobs")
    worker.stop()
    rows = {row["id"]: row for row in db.execute(
        "SELECT id, status, attempts, result, errors FROM jobs WHERE id = ANY(%s)", (ids,))}
    assert rows[typed]["status"] == "done"
    assert rows[typed]["result"] == ["Order", "datetime", "Point", "7"]
    assert rows[sealed]["status"] == "done"
    assert rows[sealed]["result"] == hashlib.sha256(f"{SECRET}:251".encode()).hexdigest()
    for job_id, says in ((bad_sql, "order.id: Input should be a valid integer"),
                         (plain, "encrypts its args but this job's are not encrypted"),
                         (stranger, "which this worker's PGBATON_ENCRYPTION_KEYS does not hold")):
        row = rows[job_id]
        assert (row["status"], row["attempts"]) == ("failed", 1), row
        assert row["errors"][-1]["type"] == "ArgsRejected" and says in row["errors"][-1]["message"]
    assert "point.y: Field required" in rows[bad_sql]["errors"][-1]["message"]
    assert scalar(db, "SELECT count(*) FROM jobs WHERE jobs::text LIKE %s", f"%{SECRET}%") == 0
    assert SECRET not in worker.log()


def test_a_worker_without_the_key_fails_an_encrypted_job_at_once(
    typed_app, start_worker, db
):
    job = typed_app.tasks["charge"].defer(card=SECRET, cents=1)
    worker = start_worker(None)
    wait_until(ended(db, [job]), what="the worker to fail the job")
    worker.stop()
    row = db.execute("SELECT status, attempts, errors FROM jobs WHERE id = %s",
                     (job,)).fetchone()
    assert (row["status"], row["attempts"]) == ("failed", 1)
    assert "this worker has no PGBATON_ENCRYPTION_KEYS" in row["errors"][-1]["message"]
    assert SECRET not in worker.log()


def test_an_encrypted_batch_callback_gets_its_args_and_its_batch(typed_app, start_worker, db):
    """The callback's args are sealed in the batch's row; at the batch's end the database
    puts `batch` beside them, and the worker hands the handler both."""
    ids = typed_app.enqueue_many(
        [{"task": "charge", "args": {"card": SECRET, "cents": n}} for n in range(3)],
        batch=pgbaton.Batch(on_finish=pgbaton.Callback("settle", {"card": SECRET})))
    assert scalar(db, "SELECT count(*) FROM batches WHERE batches::text LIKE %s",
                  f"%{SECRET}%") == 0
    worker = start_worker(KEY)
    wait_until(lambda: scalar(db, "SELECT count(*) FROM jobs WHERE task = 'settle' AND "
                              "status = 'done'") == 1, what="the callback to run")
    worker.stop()
    assert ended(db, ids)()
    result = scalar(db, "SELECT result FROM jobs WHERE task = 'settle'")
    assert result == [hashlib.sha256(SECRET.encode()).hexdigest(), 3]
    assert scalar(db, "SELECT count(*) FROM jobs WHERE jobs::text LIKE %s", f"%{SECRET}%") == 0
