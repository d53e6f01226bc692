"""The event loop `pgbaton worker` runs its handlers on: uvloop at the defaults (it comes
with pgbaton on Linux), asyncio's own with --loop asyncio or PGBATON_EVENT_LOOP, in one
process or several; and a name it does not know is refused before anything starts."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

import pgbaton
from pgbaton.errors import InvalidArgument
from pgbaton.worker import WorkerConfig
from pgbaton.worker.loop import loop_factory, loop_name
from tests.cli.cli_helpers import clean_env, free_port
from tests.cli.cli_helpers import pgbaton as run_pgbaton

DEADLINE_SECONDS = 60
JOBS = 40

APP = '''
import asyncio

import atexit
import os

import pgbaton

app = pgbaton.App(schema={schema!r})
if os.environ.get("EXIT_MARK"):
    atexit.register(lambda: open(os.environ["EXIT_MARK"], "w").close())


@app.task
async def which_loop(n: int) -> str:
    await asyncio.sleep(0)
    return type(asyncio.get_running_loop()).__module__.partition(".")[0]


# Handed back due at once, twice (a retry after 0 s, then a snooze of 0 s): the worker
# wakes its own claim for each (Producer.wake_in), on whichever loop it runs.
@app.task
async def touches_a_thread(n: int) -> None:
    await asyncio.to_thread(lambda: None)  # leaves an idle thread in asyncio's pool


@app.task
async def sleeps_in_a_thread() -> None:
    import time

    await asyncio.to_thread(time.sleep, 30)


snoozed: set[int] = set()


@app.task(max_attempts=3, retry=lambda attempt: 0, pass_context=True)
async def retried_at_once(ctx: pgbaton.JobContext, n: int) -> str:
    if ctx.attempt == 1:
        raise RuntimeError("the first attempt fails")
    if ctx.job_id not in snoozed:
        snoozed.add(ctx.job_id)
        raise pgbaton.Snooze(0)
    return type(asyncio.get_running_loop()).__module__.partition(".")[0]
'''


def _run_worker(tmp_path: Path, dsn: str, schema: str, db: Any, *options: str,
                task: str = "which_loop", **env: str) -> tuple[list[str], str]:
    """Start `pgbaton worker` on an app whose task returns the name of the loop it runs
    on, enqueue JOBS jobs, wait for them in SQL, stop it with SIGTERM; the results and
    what it logged."""
    (tmp_path / "loop_app.py").write_text(textwrap.dedent(APP.format(schema=schema)))
    assert run_pgbaton("migrate", "--schema", schema, dsn=dsn).returncode == 0
    queue = pgbaton.Queue(dsn, schema=schema)
    try:
        queue.enqueue_many([{"task": task, "args": {"n": n}} for n in range(JOBS)])
        log = tmp_path / "worker.log"
        with log.open("wb") as out:
            worker = subprocess.Popen(
                [sys.executable, "-m", "pgbaton", "worker", "loop_app:app", "--dsn", dsn,
                 "--poll-interval", "0.2", *options],
                stdout=out, stderr=subprocess.STDOUT, env=clean_env(**env), cwd=tmp_path)
        try:
            deadline = time.monotonic() + DEADLINE_SECONDS
            while db.execute("SELECT count(*) AS n FROM jobs WHERE status = 'done'"
                             ).fetchone()["n"] < JOBS:
                assert worker.poll() is None, log.read_text()
                assert time.monotonic() < deadline, "the jobs were not done in time"
                time.sleep(0.1)
            worker.send_signal(signal.SIGTERM)
            assert worker.wait(timeout=DEADLINE_SECONDS) == 0, log.read_text()
        finally:
            if worker.poll() is None:
                worker.kill()
                worker.wait()
        results = [row["loop"] for row in db.execute(
            "SELECT result #>> '{}' AS loop FROM jobs ORDER BY id")]
    finally:
        queue.close()
    return results, log.read_text()


@pytest.mark.parametrize("case", [
    ((), {}, "uvloop"),
    (("--loop", "asyncio"), {}, "asyncio"),
    ((), {"PGBATON_EVENT_LOOP": "asyncio"}, "asyncio"),
    (("--loop", "uvloop", "--processes", "2"), {}, "uvloop"),
    (("--loop", "asyncio", "--processes", "2"), {}, "asyncio"),
], ids=["defaults", "option", "environment", "uvloop-2-processes", "asyncio-2-processes"])
def test_handlers_run_on_the_loop_the_worker_was_given(tmp_path, dsn, schema, db, case):
    """Every job's handler ran on the loop asked for (uvloop at the defaults), and the
    worker's start line says which."""
    options, env, expected = case
    results, log = _run_worker(tmp_path, dsn, schema, db, *options, **env)
    assert results == [expected] * JOBS
    assert f"loop={expected}" in log


@pytest.mark.parametrize("event_loop", ["uvloop", "asyncio"])
def test_jobs_handed_back_due_at_once_wake_the_worker(tmp_path, dsn, schema, db, event_loop):
    """A retry after 0 s and a snooze of 0 s: the worker wakes its claim for each (a
    timer for a time already past, which uvloop makes a plain handle) and goes on."""
    results, log = _run_worker(tmp_path, dsn, schema, db, "--loop", event_loop,
                               "--poll-interval", "30", task="retried_at_once")
    assert results == [event_loop] * JOBS
    assert db.execute("SELECT count(*) AS n FROM jobs WHERE attempts = 2 AND snoozes = 1"
                      ).fetchone()["n"] == JOBS
    assert "failed (" not in log  # no part of the worker failed


def test_an_unknown_loop_is_refused_by_the_command(tmp_path, dsn, schema):
    (tmp_path / "loop_app.py").write_text(textwrap.dedent(APP.format(schema=schema)))
    done = run_pgbaton("worker", "loop_app:app", "--loop", "trio", dsn=dsn, cwd=tmp_path)
    assert done.returncode == 2
    assert "'trio' is not one of 'auto', 'uvloop', 'asyncio'" in done.stderr


def test_an_unknown_loop_is_refused_by_the_config():
    with pytest.raises(InvalidArgument, match="event_loop must be one of 'auto', 'uvloop', "
                                              "'asyncio', got 'tokio'"):
        WorkerConfig(event_loop="tokio")


def test_without_uvloop_auto_falls_back_and_uvloop_is_refused(monkeypatch):
    """As on Windows, where uvloop has no build: `auto` runs asyncio's own loop, and a
    worker that insists on uvloop is refused with how to get it."""
    assert loop_name("auto") == "uvloop"  # installed with pgbaton here
    monkeypatch.setitem(sys.modules, "uvloop", None)  # import uvloop now raises
    assert loop_factory("auto") is None
    assert loop_name("auto") == "asyncio"
    with pytest.raises(InvalidArgument, match="needs the uvloop package, which is not "
                                              "installed"):
        WorkerConfig(event_loop="uvloop")


@pytest.mark.parametrize("event_loop", ["uvloop", "asyncio"])
def test_a_stopped_worker_does_not_wait_for_a_handler_thread(tmp_path, dsn, schema, db,
                                                             event_loop):
    """An async handler waits on asyncio.to_thread(time.sleep, 30): SIGTERM with a
    1 s grace releases the job, and the process exits without waiting for the thread
    (closing the loop would join asyncio's own threads)."""
    (tmp_path / "loop_app.py").write_text(textwrap.dedent(APP.format(schema=schema)))
    assert run_pgbaton("migrate", "--schema", schema, dsn=dsn).returncode == 0
    with pgbaton.Queue(dsn, schema=schema) as queue:
        job_id = queue.enqueue("sleeps_in_a_thread")
    log = tmp_path / "worker.log"
    with log.open("wb") as out:
        worker = subprocess.Popen(
            [sys.executable, "-m", "pgbaton", "worker", "loop_app:app", "--dsn", dsn,
             "--loop", event_loop, "--shutdown-grace", "1"],
            stdout=out, stderr=subprocess.STDOUT, env=clean_env(), cwd=tmp_path)
    try:
        deadline = time.monotonic() + DEADLINE_SECONDS
        while db.execute("SELECT status FROM jobs WHERE id = %s", (job_id,)
                         ).fetchone()["status"] != "running":
            assert worker.poll() is None, log.read_text()
            assert time.monotonic() < deadline, "the job never started"
            time.sleep(0.05)
        time.sleep(0.5)  # the handler is in its thread's sleep by now
        stopped_at = time.monotonic()
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(timeout=DEADLINE_SECONDS) == 0, log.read_text()
        assert time.monotonic() - stopped_at < 10, "the worker waited for the thread"
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
    row = db.execute("SELECT status, attempts FROM jobs WHERE id = %s", (job_id,)).fetchone()
    assert (row["status"], row["attempts"]) == ("pending", 0)  # released, attempt given back


def test_uvloop_asked_for_but_missing_is_refused_before_waiting_for_the_database(tmp_path):
    """--loop uvloop where uvloop cannot be imported: refused at once, naming uvloop,
    not after --connect-timeout of waiting for a server that is not there."""
    hidden = tmp_path / "hidden"
    (hidden / "uvloop").mkdir(parents=True)
    (hidden / "uvloop" / "__init__.py").write_text("raise ImportError('hidden by the test')\n")
    (tmp_path / "loop_app.py").write_text(textwrap.dedent(APP.format(schema="pgbaton")))
    env = clean_env(f"postgresql://postgres@127.0.0.1:{free_port()}/nowhere")  # down
    env["PYTHONPATH"] = os.pathsep.join([str(hidden), env["PYTHONPATH"]])
    began = time.monotonic()
    done = run_pgbaton("worker", "loop_app:app", "--loop", "uvloop", "--connect-timeout", "30",
                       env=env, cwd=tmp_path, timeout=60)
    assert time.monotonic() - began < 20
    assert done.returncode != 0
    assert "needs the uvloop package, which is not installed" in done.stderr


@pytest.mark.parametrize("event_loop", ["uvloop", "asyncio"])
def test_a_stopped_worker_exits_normally_when_no_thread_runs_on(tmp_path, dsn, schema, db,
                                                                event_loop):
    """A handler used asyncio's thread pool and returned: the idle thread is not a stray
    one, so the process exits the normal way (its atexit hooks run: an exporter's last
    flush, say), not by os._exit."""
    mark = tmp_path / "exited"
    results, log = _run_worker(tmp_path, dsn, schema, db, "--loop", event_loop,
                               task="touches_a_thread", EXIT_MARK=str(mark))
    assert results == [None] * JOBS
    assert mark.exists(), log
