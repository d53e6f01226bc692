"""The embedded PostgreSQL of a test session outlives every other pytest session.

Run by root, the server runs as the wheel's own user, which must pass through every
folder above its data. Its data used to sit under pytest's root folder
(/tmp/pytest-of-root), which every pytest session root starts makes private (0700)
again: the server PANICked at its next checkpoint and every later test of that xdist
worker got "Connection refused" (embedded.scratch_folder).
"""

from __future__ import annotations

import getpass
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict

from pgbaton import embedded

PYTEST_ROOT = Path(tempfile.gettempdir()).resolve() / f"pytest-of-{getpass.getuser()}"


def test_a_scratch_folder_is_outside_pytests_root_and_open_to_the_servers_user():
    folder = embedded.scratch_folder("pgbaton-test-")
    try:
        assert PYTEST_ROOT not in folder.resolve().parents
        assert folder.stat().st_mode & 0o777 == 0o755
    finally:
        folder.rmdir()


def test_the_sessions_server_outlives_another_pytest_session(server_dsn, tmp_path):
    """Another pytest session starts (and makes its root private), then a checkpoint,
    which writes global/pg_control: the server still answers."""
    if os.environ.get("PGBATON_TEST_DSN"):
        pytest.skip("the suite's server is PGBATON_TEST_DSN, not the embedded one")
    socket_folder = Path(str(conninfo_to_dict(server_dsn)["host"]))
    assert PYTEST_ROOT not in socket_folder.resolve().parents, socket_folder
    project = tmp_path / "project"
    project.mkdir()
    (project / "pytest.ini").write_text("[pytest]\n")
    (project / "test_other.py").write_text(
        "def test_other(tmp_path):\n    assert tmp_path.is_dir()\n"
    )
    other = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(project)],
        cwd=project, capture_output=True, text=True, timeout=120, check=False,
        env={**os.environ, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"},  # tmp_path is pytest's own
    )
    assert other.returncode == 0, other.stdout + other.stderr
    with psycopg.connect(server_dsn, autocommit=True) as conn:
        conn.execute("CHECKPOINT")
    with psycopg.connect(server_dsn, autocommit=True) as conn:
        assert conn.execute("SELECT 1").fetchone() == (1,)
