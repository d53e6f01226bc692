"""The durable-steps chaos, small enough for the fast tier: worker processes SIGKILLed
at random while jobs of five steps, a sleep and a wait run (no database restart; the
slow tier's processes/test_durable_steps_chaos.py, beside, adds one and 1,000 jobs)."""

from __future__ import annotations

from pathlib import Path

from tests.steps.processes import steps_app
from tests.steps.processes.test_durable_steps_chaos import assert_invariants

JOBS = 30


def test_durable_steps_survive_sigkilled_workers(dsn: str, schema: str, tmp_path: Path) -> None:
    """Every job ends done, each committed step's effect is recorded once (a repeat
    only with the same step key), every sleep resumed after its time, every event
    reached its waiter."""
    counts = steps_app.run(dsn, schema, tmp_path, jobs=JOBS, workers=2, kill_every=1.5,
                           timeout=120)
    assert counts["kills"] > 0, counts
    assert_invariants(counts, JOBS)
