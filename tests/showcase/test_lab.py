"""`pgbaton lab` run as a user runs it: five claim strategies measured side by side
on a real PostgreSQL, with every number checked against the tables the run left behind."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row

ROOT = Path(__file__).resolve().parents[2]

# One xdist worker runs this module's tests one after another: a test that checks the lab
# left no schema behind would otherwise see another worker's run, on a server they share
# (PGBATON_TEST_DSN), still holding its own.
pytestmark = pytest.mark.xdist_group("lab")

# Several workers, each with a gap between reading the oldest pending id and updating it,
# race for the same rows: strategy 1 hands the same job to several of them many times a
# run (every worker stands at the start line with the same oldest job, and one cycle is
# mostly that gap), so "no double at all" would take a perfect turn-taking that the
# scheduler never keeps up for 60 jobs. Work is short so that the run stays a few seconds.
RACE_RUN = ("--workers", "4", "--jobs", "60", "--work-ms", "1", "--race-gap", "2")


def run_lab(dsn: str, *options: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    """The command line as a user types it, with PGBATON_DSN pointing at the test server."""
    env = {**os.environ, "PGBATON_DSN": dsn}
    env.pop("DATABASE_URL", None)
    return subprocess.run(
        [sys.executable, "-m", "pgbaton", "lab", *options],
        capture_output=True, text=True, timeout=timeout, check=False, cwd=ROOT, env=env,
    )


@pytest.fixture
def kept_schemas(dsn: str) -> Iterator[list[str]]:
    """Schemas a `--keep` run left for the test to inspect; dropped afterwards."""
    names: list[str] = []
    yield names
    with psycopg.connect(dsn, autocommit=True) as conn:
        for name in names:
            conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')  # type: ignore[arg-type]


def per_job(conn: psycopg.Connection[Any], schema: str) -> list[dict[str, Any]]:
    """Each job of a strategy's schema with its status, attempts and effects rows."""
    return conn.execute(
        f"""SELECT j.id, j.status, j.attempts,
                   (SELECT count(*) FROM "{schema}".effects AS e WHERE e.job_id = j.id)
                       AS performed
            FROM "{schema}".jobs AS j ORDER BY j.id"""  # type: ignore[arg-type]
    ).fetchall()


def test_lab_shows_doubles_for_strategy_1_and_none_for_4_and_5(dsn, kept_schemas):
    """In a short run SELECT-then-UPDATE hands jobs to two workers and the SKIP LOCKED
    claims never do, and the table's numbers are what the jobs and effects tables hold."""
    done = run_lab(dsn, *RACE_RUN, "--strategies", "1,4,5", "--keep", "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    rows = {row["number"]: row for row in report["strategies"]}
    kept_schemas.extend(row["schema"] for row in rows.values())
    assert sorted(rows) == [1, 4, 5]
    assert (report["workers"], report["jobs"]) == (4, 60)

    assert rows[1]["doubles"] > 0
    assert rows[1]["performances"] > 60
    assert (rows[4]["doubles"], rows[5]["doubles"]) == (0, 0)
    assert (rows[4]["performances"], rows[5]["performances"]) == (60, 60)

    with psycopg.connect(dsn, autocommit=True, row_factory=dict_row) as conn:
        for number, row in rows.items():
            jobs = per_job(conn, row["schema"])
            assert len(jobs) == 60
            assert {job["status"] for job in jobs} == {"done"}, number
            assert all(job["performed"] >= 1 for job in jobs), number
            assert row["doubles"] == sum(job["performed"] > 1 for job in jobs), number
            assert row["performances"] == sum(job["performed"] for job in jobs), number
            # The claim itself counts attempts, independently of the effects rows: the
            # unguarded UPDATE of strategy 1 succeeds once per performance, and a SKIP
            # LOCKED claim happens exactly once per job.
            assert all(job["attempts"] == job["performed"] for job in jobs), number
        assert all(job["attempts"] == 1 for job in per_job(conn, rows[4]["schema"]))
        assert all(job["attempts"] == 1 for job in per_job(conn, rows[5]["schema"]))


def lab_schemas(dsn: str) -> set[str]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT nspname FROM pg_namespace WHERE nspname LIKE 'pgbaton\\_lab\\_%'"
        ).fetchall()
    return {name for (name,) in rows}


def test_table_has_one_row_per_strategy(dsn):
    """Without --json the lab prints one table row for each of the five strategies, the
    guarded ones with no double, and drops the schemas it made."""
    before = lab_schemas(dsn)
    done = run_lab(dsn, "--workers", "2", "--jobs", "10", "--work-ms", "0")
    assert done.returncode == 0, done.stderr
    doubles = {}
    for number, name in [(1, "SELECT+UPDATE"), (2, "SELECT+guarded UPDATE"),
                         (3, "FOR UPDATE, held"), (4, "SKIP LOCKED"), (5, "SKIP LOCKED x10")]:
        # jobs/s, doubles, lost races, lock wait, conns held, peak held, round trips
        row = re.compile(rf"\s*{number}\s+{re.escape(name)}((?:\s+[0-9.]+){{7}})\s*")
        [numbers] = [m[1].split() for m in map(row.fullmatch, done.stdout.splitlines()) if m]
        doubles[number] = int(numbers[1])
    assert [doubles[n] for n in (2, 3, 4, 5)] == [0, 0, 0, 0], done.stdout
    assert lab_schemas(dsn) <= before


# Nothing listens there: a run that got as far as connecting would fail differently.
UNREACHABLE_DSN = "postgresql://nobody@127.0.0.1:9/none?connect_timeout=1"


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["--workers", "0"], "Invalid value for '--workers': 0 is not in the range 1<=x<=64"),
        (["--jobs", "0"], "Invalid value for '--jobs': 0 is not in the range"),
        (["--strategies", "1,6"], "Invalid value for '--strategies': '1,6': give numbers "
                                  "from 1 to 5"),
    ],
    ids=["workers-0", "jobs-0", "strategy-6"],
)
def test_bad_input_exits_2_with_a_clear_line(options, message):
    """An impossible option is refused before anything runs: exit 2 and one line naming it."""
    done = run_lab(UNREACHABLE_DSN, *options, timeout=60)
    assert done.returncode == 2
    assert message in done.stderr
    assert "Traceback" not in done.stderr
    assert done.stdout == ""


def test_plot_without_matplotlib_says_how_to_get_it(tmp_path):
    """--plot on a machine without matplotlib fails at once with the pip command to run."""
    chart = tmp_path / "lab.png"
    # A None entry in sys.modules makes "import matplotlib" fail, as on a machine without it.
    program = (
        "import sys; sys.modules['matplotlib'] = None; from pgbaton.cli import main; "
        f"main(['lab', '--plot', {str(chart)!r}])"
    )
    done = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, timeout=60,
        check=False, cwd=ROOT, env={**os.environ, "PGBATON_DSN": UNREACHABLE_DSN},
    )
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        "pgbaton: error: --plot needs matplotlib, which is not installed: pip install matplotlib"
    ]
    assert not chart.exists()


@pytest.mark.skipif(importlib.util.find_spec("matplotlib") is None,
                    reason="matplotlib (optional, for --plot) is not installed")
def test_plot_writes_a_png(dsn, tmp_path):
    """--plot FILE.png draws the comparison into a PNG file."""
    chart = tmp_path / "lab.png"
    done = run_lab(dsn, "--workers", "2", "--jobs", "20", "--work-ms", "0",
                   "--strategies", "4,5", "--plot", str(chart))
    assert done.returncode == 0, done.stderr
    assert f"chart written to {chart}" in done.stdout
    assert chart.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
