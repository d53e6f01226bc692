"""How the command line prints what the database holds: durations, hostile text."""

from __future__ import annotations

import pytest

from pgbaton._cli_common import format_duration, printable


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [
        (None, ""), (0.0, "0.00 s"), (0.35, "0.35 s"), (2.409652, "2.4 s"), (42.4, "42 s"),
        (60, "1 min"), (725, "12 min 5 s"), (3 * 3600 + 12 * 60 + 9, "3 h 12 min"),
        (2 * 86400 + 3 * 3600, "2 d 3 h"),
    ],
)
def test_durations_read_as_durations(seconds, shown):
    """Ages are `2.4 s` or `3 h 12 min`, never `2.409652`."""
    assert format_duration(seconds) == shown


def test_control_characters_are_shown_not_obeyed():
    """An escape sequence or a newline in job data prints as an escape, and plain text
    (Rich markup included, which the tables never interpret) is left alone."""
    assert printable("q\x1b[31mred\r\nx") == "q\\x1b[31mred\\r\\nx"
    assert printable("expected [/] separator") == "expected [/] separator"
    assert printable(None) == ""
    assert printable("Grüße, 東京") == "Grüße, 東京"
