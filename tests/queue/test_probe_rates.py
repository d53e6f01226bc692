"""Hostile rates (issue 25): every rate pgbaton cannot hold exactly is refused with one
line of InvalidArgument, by Queue.set_rate and set_key_rate alike, and the queue's
stored settings are untouched, which the queues table says. A Rate built by hand is
judged as a (limit, seconds) pair is: a limit of 1.5 was stored as 2 per second."""

from __future__ import annotations

from typing import Any

import pytest

import pgbaton
from pgbaton.flow import Rate

HOSTILE: list[Any] = [
    "1/0s", "1/-1s", "0/s", "-1/s", "1e3/s", "\u22121/s", "\uff15/s", "1/\u00a0s",
    "99999999999999999999999/s", "1/" + "9" * 400 + "s", "5/1e3s", "1/1.s", "",
    (1, 10**400), (1, float("nan")), (1, -1), (10**30, 1), (1, True), (True, 1),
    Rate(1.5, 1.0), Rate(True, 1.0), Rate(1, True), Rate(1, 10**400),  # type: ignore[arg-type]
    Rate("1", 1.0), Rate(1, "1"), Rate(0, 1.0), Rate(1, 0.0),  # type: ignore[arg-type]
]


@pytest.mark.parametrize("rate", HOSTILE, ids=lambda r: repr(r)[:40])
def test_a_hostile_rate_is_refused_and_nothing_is_stored(queue, db, rate: Any) -> None:
    queue.set_rate("rated", "5/s")
    queue.set_key_rate("rated", "7/min")
    before = db.execute("SELECT * FROM queues WHERE name = 'rated'").fetchone()
    for setter in (queue.set_rate, queue.set_key_rate):
        with pytest.raises(pgbaton.InvalidArgument) as caught:
            setter("rated", rate)
        assert "\n" not in str(caught.value), caught.value
    assert db.execute("SELECT * FROM queues WHERE name = 'rated'").fetchone() == before


@pytest.mark.parametrize(("rate", "limit", "period"), [
    ("1/s ", 1, 1.0), ("\t5 / 2 h\n", 5, 7200.0), ("+3/min", 3, 60.0),
    (Rate(4, 2), 4, 2.0), ((10_000, 0.001), 10_000, 0.001),
])
def test_rates_within_bounds_are_stored_as_given(queue, rate: Any, limit: int,
                                                 period: float) -> None:
    stored = queue.set_rate("rated", rate).rate
    assert stored is not None
    assert (stored.limit, stored.period) == (limit, period)
    assert type(stored.limit) is int
