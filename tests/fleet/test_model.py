"""The spin model of the claim protocol (docs/explanation/model/claim.pml) holds, and its
mutant fails."""

from __future__ import annotations

import pytest

from tests.fleet import spin_model

pytestmark = pytest.mark.skipif(
    spin_model.missing_tools() is not None,
    reason=f"cannot check the spin model: {spin_model.missing_tools()}",
)


def test_safety_holds_in_every_reachable_state() -> None:
    """No assertion (completion from the current claim) or invariant fails anywhere."""
    verdict = spin_model.safety()
    assert verdict.errors == 0, verdict.output


def test_every_job_ends_done_or_failed_under_weak_fairness() -> None:
    """No fair cycle keeps a job from reaching done or failed."""
    verdict = spin_model.liveness()
    assert verdict.errors == 0, verdict.output


def test_the_mutant_without_the_token_check_is_caught() -> None:
    """Guarded by the status alone, a stalled worker's completion is accepted after its job
    was reaped and claimed again: the model must say so."""
    verdict = spin_model.safety(mutant=True)
    assert verdict.errors > 0, verdict.output
    assert "assertion violated (t==current_claim[j])" in verdict.output, verdict.output
