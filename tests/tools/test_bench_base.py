"""benchmarks/base_tree.py: pgbaton at a git ref, exported beside the checkout for
`make bench BENCH_ARGS="--base REF"`: its processes import the exported copy, the folder
goes away however the run ends, and a base system refuses to run the checkout's copy."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from benchmarks import base_tree

from tests.helpers import OutputLines

ROOT = Path(__file__).resolve().parents[2]
BASE_LINE = re.compile(r"^base: \S+ = \S+ .* \(in (\S+)\)$")

pytestmark = pytest.mark.skipif(
    subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True,
                   check=False).returncode != 0,
    reason="needs the git repository of the checkout",
)


def test_the_base_is_exported_and_its_processes_import_it(tmp_path: Path) -> None:
    """A process with the tree's environment imports pgbaton from the tree, and says so."""
    with base_tree.exported("HEAD", parent=tmp_path) as tree:
        assert tree.commit == base_tree.git("rev-parse", "HEAD")
        assert tree.folder.name.startswith(f"{base_tree.FOLDER_PREFIX}{os.getpid()}-")
        assert (tree.src / "pgbaton" / "sql").is_dir()
        env = tree.env({"PYTHONPATH": "/elsewhere", "PATH": os.environ["PATH"]})
        assert env["PYTHONPATH"] == f"{tree.src}{os.pathsep}/elsewhere"
        code = ("import pgbaton, benchmarks.base_tree as b; "
                "print(b.verify_import(pgbaton.__file__))")
        done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=tree.env(),
                              capture_output=True, text=True, check=True)
        assert str(tree.src / "pgbaton" / "__init__.py") in done.stdout
        assert tree.commit in done.stdout
        folder = tree.folder
    assert not folder.exists()


def test_the_folder_goes_away_when_the_run_fails_inside(tmp_path: Path) -> None:
    with pytest.raises(KeyboardInterrupt), base_tree.exported("HEAD", parent=tmp_path):
        raise KeyboardInterrupt
    assert not list(tmp_path.iterdir())


def test_a_ref_that_is_not_a_commit_is_named_and_nothing_is_left(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="'no-such-ref-anywhere' is not a commit"), \
            base_tree.exported("no-such-ref-anywhere", parent=tmp_path):
        pass
    assert not list(tmp_path.iterdir())


def test_a_base_system_refuses_the_checkouts_pgbaton(tmp_path: Path) -> None:
    import pgbaton

    with pytest.raises(RuntimeError, match="only with --base"):
        base_tree.verify_import(pgbaton.__file__ or "", {})
    with pytest.raises(RuntimeError, match="not from the base tree"):
        base_tree.verify_import(pgbaton.__file__ or "",
                                {base_tree.BASE_TREE_ENV: str(tmp_path)})


def test_only_the_folders_of_dead_runs_are_removed(tmp_path: Path) -> None:
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True).stdout.strip()
    left = tmp_path / f"{base_tree.FOLDER_PREFIX}{dead}-abc"
    ours = tmp_path / f"{base_tree.FOLDER_PREFIX}{os.getpid()}-abc"
    for folder in (left, ours):
        (folder / "src").mkdir(parents=True)
    assert base_tree.drop_leftover_trees(tmp_path) == [left]
    assert not left.exists() and ours.exists()


@pytest.mark.processes
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signalled_run_removes_the_base_tree(signum: int, dsn: str, tmp_path: Path) -> None:
    """Stopped while it checks its systems, the harness still removes the folder."""
    command = [sys.executable, "-m", "benchmarks.run", "--quick", "--base", "HEAD",
               "--systems", "pgbaton,pgbaton_base", "--cases", "enqueue_single",
               "--dsn", dsn, "--out", str(tmp_path / "out")]
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)  # as a shell's background job
    try:
        process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE,
                                   stderr=subprocess.STDOUT, text=True,
                                   env={**os.environ, "PYTHONUNBUFFERED": "1"})
    finally:
        signal.signal(signal.SIGINT, previous)
    output = OutputLines(process)
    try:
        line = output.wait_for(lambda line: bool(BASE_LINE.match(line.strip())), 60)
        match = BASE_LINE.match(line.strip())
        assert match
        folder = Path(match.group(1))
        assert (folder / "src" / "pgbaton").is_dir()
        process.send_signal(signum)
        process.wait(60)
        rest = output.rest(5)
        assert process.returncode != 0
        assert f"stopped by {signal.Signals(signum).name}" in rest, rest
        assert not folder.exists(), rest
        assert not (tmp_path / "out").exists()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(10)


def test_a_base_system_without_a_base_is_refused_before_anything_runs() -> None:
    env = {k: v for k, v in os.environ.items() if k != "PGBATON_BENCH_BASE"}
    # An unknown case as well: were the base systems let through, the run would stop
    # there, before it looks for a server.
    done = subprocess.run([sys.executable, "-m", "benchmarks.run", "--quick", "--systems",
                           "pgbaton,pgbaton_base", "--cases", "no_such_case",
                           "--dsn", "postgresql://unused@nowhere/x"],
                          cwd=ROOT, env=env, capture_output=True, text=True, check=False,
                          timeout=60)
    assert done.returncode != 0
    assert "pgbaton_base run pgbaton at a base ref: give --base REF" in done.stderr


def test_the_plan_runs_the_held_xmin_cell_once_per_system_that_has_it() -> None:
    """Without --base the base systems are not in it; the held-xmin cell runs
    xmin_repeats times (not the plan's repeats), the readers' variant with 4 readers."""
    from benchmarks.run import FULL, case_runs

    systems = {"pgbaton": {"cases": ["drain", "held_xmin"]},
               "pgbaton_base": {"cases": ["drain", "held_xmin"]},
               "pgqueuer": {"cases": ["drain"]}}
    runs = case_runs(FULL, ["held_xmin", "held_xmin_readers", "drain"], systems)
    xmin = [(r.case_id, r.system, r.params["readers"]) for r in runs if r.case == "held_xmin"]
    assert sorted(xmin) == [("held_xmin", "pgbaton", 0), ("held_xmin", "pgbaton_base", 0),
                            ("held_xmin_readers", "pgbaton", 4),
                            ("held_xmin_readers", "pgbaton_base", 4)]
    held = next(r for r in runs if r.case == "held_xmin")
    assert (held.params["rate"], held.params["hold"], held.params["concurrency"]) == (
        2000, 90.0, 32)
    assert held.timeout > FULL.xmin_warmup + FULL.xmin_hold
    drains = [r for r in runs if r.case_id == "drain_c32"]
    assert len(drains) == 3 * FULL.repeats
