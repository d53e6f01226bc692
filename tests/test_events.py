"""docs/reference/events.md documents exactly the events pgbaton emits."""

from __future__ import annotations

import re
from pathlib import Path

from pgbaton.events import EVENTS

DOC = Path(__file__).resolve().parents[1] / "docs" / "reference" / "events.md"


def test_the_events_table_names_every_event_and_no_other():
    """Each row of the table in docs/reference/events.md is an event of EVENTS, and the
    reverse."""
    documented = re.findall(r"^\| `([a-z_.]+)` \|", DOC.read_text(), flags=re.MULTILINE)
    assert sorted(documented) == sorted(EVENTS)
    assert len(documented) == len(EVENTS)
