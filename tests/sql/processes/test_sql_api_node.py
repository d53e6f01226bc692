"""A Node.js program using npm's `pg` enqueues through the SQL API, and a Python
worker runs the jobs (docs/reference/sql.md, "From another language")."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.worker_processes import scalar, wait_until

NODE = Path(__file__).resolve().parent / "node"

pytestmark = pytest.mark.skipif(
    shutil.which("node") is None or shutil.which("npm") is None,
    reason="needs Node.js and npm",
)


@pytest.fixture(scope="module")
def node_program(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """tests/sql/processes/node installed from the npm registry into a folder of its own."""
    folder = tmp_path_factory.mktemp("node")
    for name in ("package.json", "enqueue.mjs"):
        shutil.copy(NODE / name, folder / name)
    subprocess.run(["npm", "install", "--no-audit", "--no-fund", "--loglevel=error"],
                   cwd=folder, check=True, timeout=300, capture_output=True)
    return folder / "enqueue.mjs"


def test_a_node_program_enqueues_and_a_python_worker_runs_its_jobs(
    node_program, dsn, app_schema, start_worker, db
):
    ran = subprocess.run(["node", str(node_program), dsn, app_schema], check=True,
                         timeout=60, capture_output=True, text=True)
    said = json.loads(ran.stdout)
    ids = [said["id"], *said["ids"]]
    assert ids == sorted(ids) and len(set(ids)) == 3
    assert said["refused"]["code"] == "22023"
    assert "delay must be a >= 0 number of seconds" in said["refused"]["message"]
    assert scalar(db, "SELECT count(*) FROM jobs") == 3  # the refused call wrote nothing
    worker = start_worker()
    try:
        # Only these: the test app's periodic task adds jobs of its own.
        wait_until(lambda: scalar(db, "SELECT count(*) FROM jobs WHERE status = 'done'"
                                  " AND id = ANY(%s)", ids) == 3,
                   what="the worker to finish the three jobs")
    except AssertionError:
        jobs = db.execute("SELECT id, task, status, errors FROM jobs WHERE id = ANY(%s)",
                          (ids,)).fetchall()
        raise AssertionError(f"{jobs}\n{worker.log()}") from None
    ran_by = db.execute("SELECT job_id FROM effects WHERE what = 'end' AND job_id = ANY(%s)"
                        " ORDER BY job_id", (ids,))
    assert [row["job_id"] for row in ran_by] == ids
