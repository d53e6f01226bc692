"""Real `pgbaton worker` processes on the test schema, for the tests in every
`processes/` folder and in tests/fleet: tests/conftest.py gives the fixtures to all."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
import pytest

import pgbaton
from tests import app_under_test

APP_SPEC = "tests.app_under_test:app"
ROOT = Path(__file__).resolve().parents[1]


@dataclass
class WorkerProcess:
    """A `pgbaton worker` subprocess; its log goes to a file the test can read."""

    process: subprocess.Popen[bytes]
    log_path: Path
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def pid(self) -> int:
        return self.process.pid

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self, timeout: float = 30) -> int:
        """SIGTERM, then wait for a clean exit. A worker that does not stop in time is
        made to print every thread's stack (faulthandler, on SIGABRT) for the failure."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.send_signal(signal.SIGABRT)
            self.process.wait(10)
            raise AssertionError(
                f"worker {self.pid} did not stop within {timeout}s of SIGTERM; its log and "
                f"stacks:\n{self.log()[-20000:]}"
            ) from None

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)

    @property
    def stats_path(self) -> Path:
        return self.log_path.with_suffix(".stats.json")

    def final_stats(self) -> dict[str, int]:
        """The counters the worker wrote as it stopped (--stats-file)."""
        assert self.stats_path.exists(), f"worker wrote no statistics:\n{self.log()}"
        return dict(json.loads(self.stats_path.read_text())["stats"])

    def wait_for_log(self, text: str, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while text not in self.log():
            if self.process.poll() is not None:
                raise AssertionError(f"worker exited before logging {text!r}:\n{self.log()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"worker did not log {text!r} in {timeout}s:\n{self.log()}")
            time.sleep(0.02)


@pytest.fixture
def app_schema(dsn: str, schema: str, queue: pgbaton.Queue, db) -> str:
    """The test schema, migrated, with the effects table that the test app writes to;
    the test's own copy of the app enqueues into it."""
    db.execute(app_under_test.EFFECTS_DDL.format(schema=schema))
    app_under_test.app.configure(dsn=dsn, schema=schema)
    return schema


@pytest.fixture
def start_worker(
    dsn: str, app_schema: str, tmp_path: Path
) -> Iterator[Callable[..., WorkerProcess]]:
    """Start `pgbaton worker` processes for the test app; every one is killed at teardown."""
    started: list[WorkerProcess] = []

    def start(
        *options: str, dsn_override: str | None = None, new_session: bool = False,
        env_extra: dict[str, str] | None = None, wait_for: str = "started:",
        app_spec: str = APP_SPEC,
    ) -> WorkerProcess:
        log_path = tmp_path / f"worker-{len(started)}.log"
        env = {
            **os.environ,
            "PGBATON_DSN": dsn_override or dsn,
            "PGBATON_TEST_SCHEMA": app_schema,
            # The caller's path after the root, as cli_helpers.clean_env keeps it: a
            # checkout's src on PYTHONPATH is the pgbaton the workers run.
            "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT),
                                                        os.environ.get("PYTHONPATH")])),
            "PYTHONFAULTHANDLER": "1",  # a stuck worker's stacks, on SIGABRT (stop())
            **(env_extra or {}),
        }
        with log_path.open("wb") as log:
            process = subprocess.Popen(
                [sys.executable, "-m", "pgbaton", "worker", app_spec, "--schema", app_schema,
                 "--stats-file", str(log_path.with_suffix(".stats.json")), *options],
                stdout=log, stderr=subprocess.STDOUT, env=env, cwd=ROOT,
                start_new_session=new_session,
            )
        worker = WorkerProcess(process, log_path)
        started.append(worker)
        worker.wait_for_log(wait_for)
        return worker

    yield start
    for worker in started:
        worker.kill()


def wait_until(condition: Callable[[], bool], timeout: float = 30, what: str = "") -> None:
    """Poll a condition (usually a SQL query) until it holds; fail after timeout."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what or condition}")
        time.sleep(0.02)


def scalar(db: psycopg.Connection[Any], query: str, *params: Any) -> Any:
    row = db.execute(query, params).fetchone()
    assert row is not None
    return next(iter(row.values()))
