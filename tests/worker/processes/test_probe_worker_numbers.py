"""Worker numbers the worker could never use (issue 25, rates and CLI numbers): a lease
past the ten years every claim checks, or a claim ahead that makes one claim ask for
more jobs than a claim may. They are refused where they are given, by WorkerConfig
and so by `pgbaton worker` before it starts, not found by the first claim, with a
worker that says it started and then fails at every claim until it gives up."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

import pgbaton
from pgbaton.limits import INT4_MAX
from tests.worker_processes import APP_SPEC, ROOT


@pytest.mark.parametrize(("options", "message"), [
    ({"lease": 1e12}, "lease must be"),
    ({"lease": 10 * 366 * 86400.0}, "lease must be"),
    ({"claim_ahead": 2**31}, "concurrency \\+ claim_ahead"),
    ({"concurrency": INT4_MAX + 1}, "concurrency \\+ claim_ahead"),
    ({"concurrency": 1000, "claim_ahead": INT4_MAX - 999}, "concurrency \\+ claim_ahead"),
], ids=["lease 1e12", "lease 10y+", "claim ahead 2^31", "concurrency int4",
        "sum past int4"])
def test_worker_config_refuses_numbers_no_claim_could_carry(options, message) -> None:
    with pytest.raises(pgbaton.InvalidArgument, match=message):
        pgbaton.WorkerConfig(**options)


def test_the_largest_usable_numbers_are_taken() -> None:
    config = pgbaton.WorkerConfig(concurrency=1000, claim_ahead=INT4_MAX - 1000,
                                  lease=9 * 365 * 86400.0)
    assert config.claim_ahead + config.concurrency == INT4_MAX


@pytest.mark.parametrize("option", [["--lease", "1e12"], ["--claim-ahead", "3000000000"]],
                         ids=["lease", "claim-ahead"])
def test_the_worker_command_refuses_them_before_it_starts(
    dsn: str, app_schema: str, option: list[str]
) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "pgbaton", "worker", APP_SPEC, "--schema", app_schema,
         "--no-maintenance", *option],
        env={**os.environ, "PGBATON_DSN": dsn, "PGBATON_TEST_SCHEMA": app_schema,
             "PYTHONPATH": str(ROOT)},
        cwd=ROOT, capture_output=True, text=True, timeout=60, check=False,
    )
    output = done.stdout + done.stderr
    assert done.returncode != 0, output
    assert "started:" not in output, output
    assert "failed (1 time(s)" not in output, output
