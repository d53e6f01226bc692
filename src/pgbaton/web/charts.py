"""The overview's charts, drawn here as SVG: no script, no library, nothing fetched.

Each chart covers the last hour, one slot per minute, oldest on the left. Only numbers
computed here go into the markup, and the titles pass through html.escape.
"""

from __future__ import annotations

import datetime as dt
import html
from collections.abc import Sequence
from typing import Any

from markupsafe import Markup

MINUTES = 60
WIDTH, HEIGHT, PAD = 360, 80, 14


def _slots(rows: Sequence[dict[str, Any]], now: dt.datetime) -> list[dict[str, Any] | None]:
    start = now.replace(second=0, microsecond=0) - dt.timedelta(minutes=MINUTES - 1)
    slots: list[dict[str, Any] | None] = [None] * MINUTES
    for row in rows:
        index = int((row["minute"] - start).total_seconds() // 60)
        if 0 <= index < MINUTES:
            slots[index] = row
    return slots


def _frame(title: str, peak: str, body: str) -> Markup:
    label = html.escape(title)
    return Markup(
        f'<svg class="chart" viewBox="0 0 {WIDTH} {HEIGHT + PAD}" role="img" '
        f'aria-label="{label}"><title>{label}</title>'
        f'<line x1="0" y1="{HEIGHT}" x2="{WIDTH}" y2="{HEIGHT}" class="axis"/>'
        f'{body}<text x="2" y="10" class="peak">{html.escape(peak)}</text>'
        f'<text x="2" y="{HEIGHT + PAD - 2}" class="tick">-60 min</text>'
        f'<text x="{WIDTH - 2}" y="{HEIGHT + PAD - 2}" class="tick end">now</text></svg>'
    )


def throughput(rows: Sequence[dict[str, Any]], now: dt.datetime) -> Markup:
    """Jobs finished per minute: done, with failed and cancelled stacked on top."""
    slots = _slots(rows, now)
    totals = [0 if s is None else s["done"] + s["failed"] + s["cancelled"] for s in slots]
    top = max(totals) or 1
    step = WIDTH / MINUTES
    bars = []
    for index, slot in enumerate(slots):
        if slot is None:
            continue
        base = float(HEIGHT)
        for part in ("done", "failed", "cancelled"):
            height = HEIGHT * slot[part] / top
            if height:
                base -= height
                bars.append(
                    f'<rect class="{part}" x="{index * step + 0.5:.1f}" y="{base:.1f}" '
                    f'width="{step - 1:.1f}" height="{height:.1f}">'
                    f'<title>{slot[part]} {part}</title></rect>'
                )
    return _frame(f"jobs finished per minute, last hour (peak {top})",
                  f"{max(totals)} / min", "".join(bars))


def queue_time(rows: Sequence[dict[str, Any]], now: dt.datetime) -> Markup:
    """Mean seconds from due to start, per minute, with the minute's largest as a tick."""
    slots = _slots(rows, now)
    means = [None if s is None else s["queue_seconds_mean"] for s in slots]
    peaks = [None if s is None else s["queue_seconds_max"] for s in slots]
    top = max([p for p in peaks if p is not None] or [0.0]) or 1.0
    step = WIDTH / MINUTES
    points = [
        f"{index * step + step / 2:.1f},{HEIGHT - HEIGHT * mean / top:.1f}"
        for index, mean in enumerate(means) if mean is not None
    ]
    ticks = "".join(
        f'<circle class="max" cx="{index * step + step / 2:.1f}" '
        f'cy="{HEIGHT - HEIGHT * peak / top:.1f}" r="1.5"/>'
        for index, peak in enumerate(peaks) if peak is not None
    )
    line = f'<polyline class="mean" points="{" ".join(points)}"/>' if points else ""
    return _frame("queue time in seconds per minute (line: mean, dots: largest)",
                  f"{top:.3g} s", line + ticks)
