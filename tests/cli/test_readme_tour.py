"""README.md's five-minute tour, run as written: its files saved, its shell lines run one
by one with the installed `pgbaton` and `python`, against the test server."""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.cli.cli_helpers import ROOT, clean_env

BLOCK = re.compile(r"<!-- tour: (?P<name>\S+) -->\n```\w*\n(?P<body>.*?)```", re.DOTALL)
DEADLINE_SECONDS = 60


def tour_blocks() -> list[tuple[str, str]]:
    return [(m["name"], m["body"]) for m in BLOCK.finditer((ROOT / "README.md").read_text())]


def test_the_tour_has_its_files_and_its_commands():
    """The tour is marked up for this test: two files, then the shell lines."""
    assert [name for name, _ in tour_blocks()] == ["shop_jobs.py", "enqueue.py", "shell"]


def test_the_readme_tour_runs_as_written(tmp_path, dsn, schema, db):
    """Every shell line of the tour succeeds; the worker line runs until the enqueued
    jobs are done (then SIGTERM, exit 0), and the handlers' output shows they ran."""
    bin_folder = str(Path(sys.executable).parent)
    env = clean_env(None, PGBATON_SCHEMA=schema)
    env["PATH"] = os.pathsep.join([bin_folder, env.get("PATH", "")])
    env.pop("PYTHONPATH")  # the tour's own folder and the installed package only
    shell_lines: list[str] = []
    for name, body in tour_blocks():
        if name == "shell":
            shell_lines = [line.split("  #")[0].strip() for line in body.splitlines()]
        else:
            (tmp_path / name).write_text(body)
    worker_output = ""
    for line in filter(None, shell_lines):
        words = shlex.split(line)
        if words[0] == "export":
            variable = words[1].split("=", 1)[0]
            env[variable] = dsn  # the tour's example DSN stands for the test server
            continue
        if words[:2] == ["pgbaton", "worker"]:
            worker_output = run_worker_until_idle(words, env, tmp_path, db)
            continue
        result = subprocess.run(words, env=env, cwd=tmp_path, capture_output=True, text=True,
                                timeout=DEADLINE_SECONDS, check=False)
        assert result.returncode == 0, f"{line}: {result.stderr[-2000:]}"
    assert "charged customer 3: 100" in worker_output
    assert "receipt for order 7, idempotency key pgbaton-job-" in worker_output
    assert "receipt for order 8" in worker_output


def run_worker_until_idle(words: list[str], env: dict[str, str], cwd: Path, db) -> str:
    log = cwd / "worker.log"
    with log.open("wb") as out:
        worker = subprocess.Popen(words, env=env, cwd=cwd, stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + DEADLINE_SECONDS
        while db.execute(
            "SELECT count(*) FILTER (WHERE status = 'done') < 3"
            " OR bool_or(status IN ('pending', 'running') AND run_at <= now()) AS busy"
            " FROM jobs"
        ).fetchone()["busy"]:
            assert worker.poll() is None, log.read_text()[-2000:]
            assert time.monotonic() < deadline, log.read_text()[-2000:]
            time.sleep(0.1)
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(timeout=DEADLINE_SECONDS) == 0, log.read_text()[-2000:]
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
    return log.read_text()
