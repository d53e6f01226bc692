"""The checks of a durable sleep's length and a wait's timeout (docs/howto/durable-steps.md):
refused with a message that names the problem, before anything is written."""

from __future__ import annotations

import datetime as dt
import math

import pytest

import pgbaton
from pgbaton.steps import check_sleep, check_timeout


@pytest.mark.parametrize(("seconds", "until", "says"), [
    (None, None, "seconds or until=, one of them"),
    (1, dt.datetime(2030, 1, 1, tzinfo=dt.UTC), "seconds or until=, one of them"),
    (-1, None, ">= 0 number"),
    (math.nan, None, ">= 0 number"),
    (math.inf, None, ">= 0 number"),
    (True, None, ">= 0 number"),
    ("5", None, ">= 0 number"),
    (300_000_000_000, None, "past the year 9999"),
    (None, dt.datetime(2030, 1, 1), "timezone-aware"),
    (None, dt.datetime.max.replace(tzinfo=dt.UTC), "before the end of year 9999"),
])
def test_a_bad_sleep_is_refused_naming_the_problem(seconds, until, says):
    """Negative, not a number, both or neither given, naive, or past the year 9999."""
    with pytest.raises(pgbaton.InvalidArgument, match=says):
        check_sleep(seconds, until)


def test_a_good_sleep_and_timeout_pass():
    """Zero, a fraction, a time in the past (wakes at once) and None for a timeout."""
    assert check_sleep(0, None) == (0.0, None)
    assert check_sleep(0.25, None) == (0.25, None)
    past = dt.datetime(2000, 1, 1, tzinfo=dt.UTC)
    assert check_sleep(None, past) == (0.0, past)
    assert check_timeout(None) is None and check_timeout(3) == 3.0


@pytest.mark.parametrize("timeout", [-0.1, math.nan, True, "1", 300_000_000_000])
def test_a_bad_wait_timeout_is_refused(timeout):
    """A timeout is a >= 0 number ending by the year 9999, or None."""
    with pytest.raises(pgbaton.InvalidArgument, match="wait_for: "):
        check_timeout(timeout)
