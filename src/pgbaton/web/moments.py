"""Times as the dashboard shows them: relative to now ("3 min ago", "in 12 min"), with
the absolute time, to the second, in the element's title (shown on hover) and its
datetime attribute (machine-readable)."""

from __future__ import annotations

import datetime as dt

from markupsafe import Markup


def relative(value: dt.datetime, now: dt.datetime) -> str:
    """'just now', '42 s ago', '3 min ago', '2 h 5 min ago', '3 d ago', or 'in ...'."""
    seconds = (value - now).total_seconds()
    ahead = seconds > 0
    whole = int(abs(seconds))
    if whole < 1:
        return "just now"
    if whole < 60:
        span = f"{whole} s"
    elif whole < 3600:
        span = f"{whole // 60} min"
    elif whole < 86400:
        minutes = whole % 3600 // 60
        span = f"{whole // 3600} h" + (f" {minutes} min" if minutes else "")
    else:
        span = f"{whole // 86400} d"
    return f"in {span}" if ahead else f"{span} ago"


def absolute(value: dt.datetime) -> str:
    """The server's local time to the second, with its offset: no microseconds."""
    return value.astimezone().isoformat(sep=" ", timespec="seconds")


def moment(value: dt.datetime | str | None, now: dt.datetime | None = None) -> Markup:
    """A <time> element: relative text, the absolute time on hover; empty for None. A
    string is an ISO 8601 time (an attempt's `at` in the errors JSON); one that does
    not parse is shown as it is, escaped."""
    if value is None:
        return Markup("")
    if isinstance(value, str):
        try:
            value = dt.datetime.fromisoformat(value)
        except ValueError:
            return Markup("{}").format(value)
        if value.tzinfo is None:
            value = value.replace(tzinfo=dt.UTC)
    now = now or dt.datetime.now(dt.UTC)
    return Markup('<time datetime="{}" title="{}">{}</time>').format(
        value.isoformat(timespec="seconds"), absolute(value), relative(value, now))


__all__ = ["absolute", "moment", "relative"]
