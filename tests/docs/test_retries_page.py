"""docs/howto/retries.md's table of the default backoff is what pgbaton.Backoff() does."""

from __future__ import annotations

import re
from pathlib import Path

import pgbaton
from pgbaton.app import Task

PAGE = Path(__file__).resolve().parents[2] / "docs" / "howto" / "retries.md"
ROW = re.compile(r"^\| (\d+)( and later)? \| ([\d,.]+) to ([\d,.]+) \|$", re.M)


def test_the_table_of_waits_is_the_default_backoff() -> None:
    rows = ROW.findall(PAGE.read_text())
    assert len(rows) >= 5
    backoff = pgbaton.Backoff()
    for attempt, later, low, high in rows:
        low_s, high_s = float(low.replace(",", "")), float(high.replace(",", ""))
        for n in (int(attempt), int(attempt) + 5) if later else (int(attempt),):
            waits = [backoff(n) for _ in range(2000)]
            assert low_s <= min(waits) and max(waits) <= high_s, (n, min(waits), max(waits))
            assert max(waits) - min(waits) > (high_s - low_s) * 0.8, n  # jitter spans it


def test_a_task_without_retry_uses_the_default_backoff() -> None:
    app = pgbaton.App("postgresql:///unused")

    @app.task
    def sync_invoice(invoice_id: int) -> None: ...

    task = app.tasks["sync_invoice"]
    assert isinstance(task, Task)
    assert task.retry == pgbaton.Backoff() and task.max_attempts == 5
