"""benchmarks/soak_report.py: the soak's verdict, judged on samples made for each test."""

from __future__ import annotations

from typing import Any

from benchmarks.soak_report import Soak

MB = 1024 * 1024


def soak(size_mb: Any = lambda minute: 80, rss_mb: Any = lambda minute: 40,
         claim_ms: Any = lambda minute: 1.0, minutes: float = 30.0) -> Soak:
    """A soak of one sample every 10 s, each quantity a function of the minute."""
    made = Soak(minutes=minutes, rate=1000.0)
    for index in range(1, int(minutes * 6) + 1):
        minute = index / 6
        row = {"elapsed_s": index * 10.0, "total_bytes": size_mb(minute) * MB,
               "index_bytes": size_mb(minute) / 4 * MB, "worker_rss_bytes": rss_mb(minute) * MB,
               "pending": 0, "load1": 1.0, "worker_cpu_pct": 10.0}
        made.add(row, [claim_ms(minute) / 1000] * 100, [0.002] * 10)
    made.worker_exit = 0
    return made


def verdicts(made: Soak) -> dict[str, bool]:
    return {c.name.split(":")[0]: c.passed for c in made.criteria()}


def test_flat_samples_pass_every_criterion() -> None:
    """Sizes, times and memory that do not move pass, and the soak passes."""
    made = soak()
    assert all(verdicts(made).values()), made.criteria()
    assert made.passed()


def test_steady_growth_fails_the_plateau() -> None:
    """A table growing 2% a minute is 1.2x larger in the last 10 minutes: it fails."""
    got = verdicts(soak(size_mb=lambda minute: 80 * 1.02 ** minute))
    assert got["jobs table size (with indexes, TOAST) plateaus"] is False
    assert got["jobs index size plateaus"] is False


def test_growth_within_a_tenth_passes() -> None:
    """Growth of 8% from the 10 minutes before to the last 10 passes."""
    got = verdicts(soak(size_mb=lambda minute: 80 * (1.08 if minute > 20 else 1.0)))
    assert got["jobs table size (with indexes, TOAST) plateaus"] is True


def test_claim_p99_is_judged_on_every_duration_of_the_windows() -> None:
    """Claims 1.3x slower in the last 5 minutes fail; 1.1x slower pass."""
    assert verdicts(soak(claim_ms=lambda m: 1.3 if m > 25 else 1.0))["claim p99"] is False
    assert verdicts(soak(claim_ms=lambda m: 1.1 if m > 25 else 1.0))["claim p99"] is True


def test_rss_growth_in_the_warm_up_is_not_drift() -> None:
    """RSS that doubles in the first 5 minutes and then holds passes; +15% after fails."""
    def warm(minute: float) -> float:
        return 20 + 4 * min(minute, 5)

    assert verdicts(soak(rss_mb=warm))["worker RSS drift"] is True
    assert verdicts(soak(rss_mb=lambda m: warm(m) * (1.15 if m > 25 else 1.0)))[
        "worker RSS drift"] is False


def test_a_worker_that_failed_fails_the_soak() -> None:
    """A worker that exited non-zero fails the soak whatever the samples say."""
    made = soak()
    made.worker_exit = 1
    assert not made.passed()
