"""benchmarks/soak.py stopped by a signal while it samples: it stops its lanes and its
embedded server and removes the server's folder, instead of leaving a PostgreSQL running
in /tmp (SIGTERM's default killed it where it stood)."""

from __future__ import annotations

import os
import re
import selectors
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

ROOT = Path(__file__).resolve().parents[2]
STARTED = re.compile(r"embedded PostgreSQL \S+ in (\S+),")


def read_until(process: subprocess.Popen[str], wanted: re.Pattern[str],
               seconds: float) -> tuple[re.Match[str] | None, list[str]]:
    """Lines of the soak's output until one matches, or the time is up."""
    assert process.stdout is not None
    lines: list[str] = []
    deadline = time.monotonic() + seconds
    with selectors.DefaultSelector() as selector:
        selector.register(process.stdout, selectors.EVENT_READ)
        while time.monotonic() < deadline:
            if not selector.select(max(0.0, deadline - time.monotonic())):
                break
            line = process.stdout.readline()
            if not line:
                break
            lines.append(line)
            if match := wanted.search(line):
                return match, lines
    return None, lines


def postmasters_of(folder: Path) -> list[psutil.Process]:
    found = []
    for process in psutil.process_iter(["cmdline"]):
        cmdline = process.info["cmdline"] or []
        if any(str(folder) in part for part in cmdline) and "postgres" in " ".join(cmdline):
            found.append(process)
    return found


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signalled_soak_stops_its_server_and_removes_its_folder(signum, tmp_path):
    command = [sys.executable, "-m", "benchmarks.soak", "--minutes", "5", "--modes",
               "history", "--rate", "50", "--interval", "1", "--out", str(tmp_path / "s")]
    # Started as a shell in the background starts it: with SIGINT ignored, which the
    # child inherits.
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        process = subprocess.Popen(
            command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
    finally:
        signal.signal(signal.SIGINT, previous)
    folder = None
    try:
        started, lines = read_until(process, STARTED, 120)
        assert started, "the soak did not start its server:\n" + "".join(lines)
        folder = Path(started.group(1))
        assert postmasters_of(folder), f"no server runs in {folder}"
        sample, more = read_until(process, re.compile(r" min  table "), 120)
        assert sample, "the soak took no sample:\n" + "".join(lines + more)
        process.send_signal(signum)
        rest, _ = process.communicate(timeout=150)
        assert process.returncode != 0
        assert f"stopped by {signum.name}" in rest, rest
        assert not folder.exists(), f"{folder} is left behind:\n{rest}"
        assert not postmasters_of(folder), f"a server still runs in {folder}:\n{rest}"
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(10)
        if folder is not None:
            for postmaster in postmasters_of(folder):
                postmaster.kill()
