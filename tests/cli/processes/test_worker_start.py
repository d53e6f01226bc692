"""Starting `pgbaton worker` as a deploy does: before the database is up, with JSON logs,
and with connections that pg_stat_activity can tell apart."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from tests.cli.cli_helpers import Forwarder, clean_env, free_port, pgbaton, write_app

DEADLINE_SECONDS = 60


def wait_until(condition: Callable[[], Any], what: str) -> Any:
    """Poll a condition until it holds, or fail the test after a generous deadline."""
    deadline = time.monotonic() + DEADLINE_SECONDS
    while not (result := condition()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)
    return result


def json_lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _connected(db: Any, worker: subprocess.Popen[bytes]) -> str | None:
    """The application_name of the worker process's LISTEN connection, once it has one
    (so the worker runs and its signal handlers are in place)."""
    row = db.execute(
        "SELECT application_name FROM pg_stat_activity"
        " WHERE application_name LIKE %s AND query LIKE '%%LISTEN \"%%'",
        (f"pgbaton worker %:{worker.pid}:%",),
    ).fetchone()
    return None if row is None else str(row["application_name"])


@pytest.fixture
def start_worker(tmp_path, schema):
    """Start `pgbaton worker` on a test app with JSON logs to a file; stopped by SIGTERM
    (or killed) at the end of the test."""
    started: list[subprocess.Popen[bytes]] = []

    def start(dsn: str, *options: str) -> tuple[subprocess.Popen[bytes], Path]:
        spec = write_app(tmp_path, "worker_app", schema=schema)
        log = tmp_path / f"worker-{len(started)}.log"
        with log.open("wb") as out:
            process = subprocess.Popen(
                [sys.executable, "-m", "pgbaton", "worker", spec, "--dsn", dsn,
                 "--log-format", "json", "--poll-interval", "0.5", *options],
                stdout=out, stderr=subprocess.STDOUT, env=clean_env(), cwd=tmp_path,
            )
        started.append(process)
        return process, log

    yield start
    for process in started:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_a_worker_started_before_the_database_waits_for_it(start_worker, dsn, schema, db):
    """The server is unreachable at start: the worker logs its retries (JSON, with the
    delay as a field), connects once the server answers, and names itself in
    pg_stat_activity as `pgbaton worker <its id>`."""
    assert pgbaton("migrate", "--schema", schema, dsn=dsn).returncode == 0
    target = conninfo_to_dict(dsn)
    port = free_port()
    worker, log = start_worker(make_conninfo(dsn, host="127.0.0.1", port=str(port)))
    retry = wait_until(
        lambda: next((r for r in json_lines(log) if "retry_in" in r), None),
        "a logged retry",
    )
    assert retry["level"] == "WARNING" and "cannot reach the database yet" in retry["message"]
    assert worker.poll() is None, "the worker gave up instead of waiting"

    forwarder = Forwarder(port, target.get("host") or "127.0.0.1", int(target.get("port", 5432)))
    try:
        name = wait_until(lambda: _connected(db, worker), "the worker's connections")
        started = wait_until(
            lambda: next((r for r in json_lines(log) if "started" in r["message"]), None),
            "the worker's start line",
        )
        assert name.removeprefix("pgbaton worker ") in started["message"]
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(timeout=DEADLINE_SECONDS) == 0
    finally:
        forwarder.close()


def test_a_worker_gives_up_after_its_connect_timeout(start_worker, dsn):
    """With --connect-timeout 1 and no server, the worker exits 1 with one error line
    after retrying, and never waits past the timeout by much."""
    began = time.monotonic()
    worker, log = start_worker(
        make_conninfo(dsn, host="127.0.0.1", port=str(free_port())),
        "--connect-timeout", "1", "--log-level", "WARNING",
    )
    assert worker.wait(timeout=DEADLINE_SECONDS) == 1
    assert time.monotonic() - began < 30
    lines = log.read_text().splitlines()
    errors = [line for line in lines if line.startswith("pgbaton: error:")]
    assert len(errors) == 1 and "gave up after --connect-timeout 1 s" in errors[0]
    retries = [json.loads(line) for line in lines if line.startswith("{")]
    assert retries and all(r["level"] == "WARNING" for r in retries)


def test_log_level_hides_what_is_below_it(start_worker, dsn, schema, db):
    """--log-level WARNING: the worker's INFO start line is not written."""
    assert pgbaton("migrate", "--schema", schema, dsn=dsn).returncode == 0
    worker, log = start_worker(dsn, "--log-level", "WARNING")
    wait_until(lambda: _connected(db, worker), "the worker's connections")
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(timeout=DEADLINE_SECONDS) == 0
    assert all(r["level"] != "INFO" for r in json_lines(log))
