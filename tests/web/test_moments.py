"""Times as the dashboard shows them: relative, the absolute one to the second on hover."""

from __future__ import annotations

import datetime as dt

import pytest

from pgbaton.web.moments import moment, relative

NOW = dt.datetime(2026, 12, 5, 12, 0, 0, 123456, tzinfo=dt.UTC)


@pytest.mark.parametrize(("offset", "said"), [
    (0, "just now"), (-0.5, "just now"), (-42, "42 s ago"), (-200, "3 min ago"),
    (-3600 * 2 - 300, "2 h 5 min ago"), (-3600 * 3, "3 h ago"), (-86400 * 3 - 5, "3 d ago"),
    (720, "in 12 min"), (86400 * 2, "in 2 d"),
])
def test_relative(offset: float, said: str) -> None:
    assert relative(NOW + dt.timedelta(seconds=offset), NOW) == said


def test_a_moment_is_a_time_element_with_the_absolute_time_on_hover() -> None:
    html = str(moment(NOW - dt.timedelta(minutes=3), NOW))
    assert html.startswith('<time datetime="2026-12-05T11:57:00+00:00" title="')
    assert ".123" not in html and html.endswith(">3 min ago</time>")


def test_a_stored_time_text_is_read_and_a_hostile_one_escaped() -> None:
    assert str(moment("2026-12-05T11:59:00.5+00:00", NOW)).endswith(">59 s ago</time>")
    assert str(moment("<b>soon</b>", NOW)) == "&lt;b&gt;soon&lt;/b&gt;"
    assert str(moment(None, NOW)) == ""
