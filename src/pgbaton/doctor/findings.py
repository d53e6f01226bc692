"""What a doctor's check gives back: a Finding, and the thresholds it was judged by."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

Status = Literal["ok", "warn", "fail"]

# Longer lists of sessions, jobs or slots are cut to this many lines of evidence.
MAX_LISTED = 10


@dataclass
class Finding:
    """One check's verdict, the evidence it was judged on, and what to do.

    evidence is short and always shown; details (the claim's EXPLAIN) are long and
    shown when the finding is not ok or the doctor runs with --verbose.
    """

    name: str
    status: Status
    summary: str
    evidence: list[str] = field(default_factory=list)
    advice: str | None = None
    data: dict[str, Any] = field(default_factory=dict)
    details: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Thresholds:
    max_idle_in_transaction: float = 60.0
    max_transaction_age: float = 300.0
    lease_grace: float = 30.0
    max_lag: float = 300.0
    max_dead_ratio: float = 0.5


def overall(findings: list[Finding]) -> Status:
    statuses = {f.status for f in findings}
    if "fail" in statuses:
        return "fail"
    return "warn" if "warn" in statuses else "ok"


def age(seconds: float | None) -> str:
    """A duration for people: 4.2 s, 3 min 20 s, 2 h 5 min, 3 d 4 h."""
    if seconds is None:
        return "never"
    if seconds < 60:
        return f"{seconds:.1f} s"
    whole = int(seconds)
    if whole < 3600:
        return f"{whole // 60} min {whole % 60} s"
    if whole < 86400:
        return f"{whole // 3600} h {whole % 3600 // 60} min"
    return f"{whole // 86400} d {whole % 86400 // 3600} h"


# Words whose plural is not the word and an s.
_PLURALS = {"index": "indexes", "process": "processes", "batch": "batches"}


def plural(count: int, word: str) -> str:
    return f"{count} {word}" if count == 1 else f"{count} {_PLURALS.get(word, word + 's')}"
