"""benchmarks/soak.py stopped by a signal while it samples: it stops its lanes and its
embedded server and removes the server's folder, instead of leaving a PostgreSQL running
in /tmp (SIGTERM's default killed it where it stood)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from tests.helpers import OutputLines

ROOT = Path(__file__).resolve().parents[2]
STARTED = re.compile(r"embedded PostgreSQL \S+ in (\S+),")


def alive(process: psutil.Process) -> bool:
    """Running, not merely a zombie waiting for its parent to reap it."""
    try:
        return process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def postmasters_of(folder: Path) -> list[psutil.Process]:
    found = []
    for process in psutil.process_iter(["cmdline"]):
        cmdline = process.info["cmdline"] or []
        if any(str(folder) in part for part in cmdline) and "postgres" in " ".join(cmdline):
            found.append(process)
    return found


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
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
    lanes: list[psutil.Process] = []
    output = OutputLines(process)
    try:
        started = STARTED.search(output.wait_for(lambda line: bool(STARTED.search(line)), 120))
        assert started
        folder = Path(started.group(1))
        assert postmasters_of(folder), f"no server runs in {folder}"
        output.wait_for(lambda line: " min  table " in line, 120)  # a sample taken
        lanes = [child for child in psutil.Process(process.pid).children(recursive=True)
                 if "postgres" not in child.name()]
        process.send_signal(signum)
        process.wait(150)
        rest = output.rest(10)
        assert process.returncode != 0
        assert f"stopped by {signum.name}" in rest, rest
        assert not folder.exists(), f"{folder} is left behind:\n{rest}"
        assert not postmasters_of(folder), f"a server still runs in {folder}:\n{rest}"
        assert not [lane for lane in lanes if alive(lane)], rest
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(10)
        if folder is not None:
            for postmaster in postmasters_of(folder):
                postmaster.kill()
        for lane in lanes:  # the producer and worker, left running by the defect
            if alive(lane):
                lane.kill()
