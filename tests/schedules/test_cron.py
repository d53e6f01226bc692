"""Fire times in a zone across both daylight saving transitions, and what each catch-up
policy plans after an outage: pure computation, an injected now, no sleeping."""

from __future__ import annotations

import datetime as dt

import pytest

import pgbaton
from pgbaton.cron import Cron, check_catch_up, plan

UTC = dt.UTC


def at(*parts: int) -> dt.datetime:
    return dt.datetime(*parts, tzinfo=UTC)


def test_spring_forward_runs_once_at_the_end_of_the_gap():
    """02:30 does not exist in Berlin on 2027-03-28 (02:00 -> 03:00): it fires once, at
    03:00 CEST (01:00 UTC), and the next day at 02:30 CEST again."""
    cron = Cron("30 2 * * *", "Europe/Berlin")
    ticks = list(cron.ticks(at(2027, 3, 27, 12), at(2027, 3, 29, 12)))
    assert ticks == [at(2027, 3, 28, 1, 0), at(2027, 3, 29, 0, 30)]
    assert cron.in_zone(ticks[0]).strftime("%H:%M %Z") == "03:00 CEST"


def test_fall_back_runs_once_at_the_first_occurrence():
    """02:30 happens twice in Berlin on 2027-10-31 (03:00 -> 02:00): once, at 02:30 CEST."""
    cron = Cron("30 2 * * *", "Europe/Berlin")
    ticks = list(cron.ticks(at(2027, 10, 30, 12), at(2027, 11, 1, 12)))
    assert ticks == [at(2027, 10, 31, 0, 30), at(2027, 11, 1, 1, 30)]
    assert cron.in_zone(ticks[0]).strftime("%H:%M %Z") == "02:30 CEST"


def test_an_every_hour_schedule_runs_in_both_occurrences_of_the_repeated_hour():
    cron = Cron("0,30 * * * *", "Europe/Berlin")
    ticks = list(cron.ticks(at(2027, 10, 30, 23, 45), at(2027, 10, 31, 2, 15)))
    # 02:00 and 02:30 CEST, then 02:00 and 02:30 CET, then 03:00 CET: every half hour
    # of real time, none twice.
    assert ticks == [at(2027, 10, 31) + dt.timedelta(minutes=30 * n) for n in range(5)]
    assert len(set(ticks)) == len(ticks)


def test_ticks_inside_the_gap_fall_on_its_end():
    cron = Cron("*/20 * * * *", "Europe/Berlin")
    ticks = list(cron.ticks(at(2027, 3, 28, 0, 30), at(2027, 3, 28, 1, 30)))
    # 01:40 CET, then 02:00, 02:20, 02:40 do not exist: all at 03:00 CEST, then 03:20.
    assert ticks == [at(2027, 3, 28, 0, 40), at(2027, 3, 28, 1, 0), at(2027, 3, 28, 1, 20)]


def test_newest_walks_back_and_matches_ticks():
    cron = Cron("*/20 * * * *", "Europe/Berlin")
    start, end = at(2027, 3, 27, 20), at(2027, 3, 28, 4)
    forward = list(cron.ticks(start, end))
    assert cron.newest(start, end, 5) == forward[-5:]
    assert cron.newest(start, end, 1000) == forward


@pytest.mark.parametrize(("expression", "zone", "message"), [
    ("0 0 30 2 *", "UTC", "never fires"),
    ("not cron", "UTC", "not a cron expression"),
    ("* * * * *", "Mars/Olympus", "unknown time zone 'Mars/Olympus'"),
    ("* * * * *", "localtime", "unknown time zone 'localtime'"),
    ("* * * * *", "../../etc/passwd", "unknown time zone"),
    ("* * * * *", "Europe/Berlin\x00", "unknown time zone"),
])
def test_bad_definitions_are_named(expression, zone, message):
    with pytest.raises(pgbaton.InvalidArgument, match=message):
        Cron(expression, zone).check_fires(at(2026, 1, 1))


NOW = at(2026, 6, 1, 12)
HOUR_AGO = NOW - dt.timedelta(hours=1)


@pytest.mark.parametrize(("policy", "missed"), [("skip", 0), ("latest", 1), ("all", 50)])
def test_catch_up_after_an_hour_down(policy, missed):
    """Every minute, down an hour, a 10 s handover window: the on-time ticks (none in
    the window here) plus what the policy keeps of the 60 missed."""
    planned = plan(Cron("* * * * *"), last_tick=HOUR_AGO, now=NOW, window=10,
                   catch_up=policy, catch_up_limit=50)
    assert len(planned.ticks) == missed + 1  # NOW itself is a tick, on time
    assert planned.ticks == sorted(planned.ticks) and planned.ticks[-1] == NOW
    if missed:
        assert planned.ticks[-2] == NOW - dt.timedelta(minutes=1)  # the newest missed
    assert planned.dropped >= 1
    assert planned.last_tick == NOW and planned.next_tick == NOW + dt.timedelta(minutes=1)


def test_all_within_its_limit_drops_nothing():
    planned = plan(Cron("* * * * *"), last_tick=HOUR_AGO, now=NOW, window=10,
                   catch_up="all", catch_up_limit=100)
    assert len(planned.ticks) == 60 and planned.dropped == 0


@pytest.mark.parametrize("limit", [0, -1, True, 10_001, 2**40, "5"])
def test_a_catch_up_limit_out_of_range_is_refused(limit):
    with pytest.raises(pgbaton.InvalidArgument, match="catch_up_limit must be"):
        check_catch_up("all", limit)


def test_a_new_schedule_starts_from_the_handover_window():
    planned = plan(Cron("* * * * * *"), last_tick=None, now=NOW, window=5, catch_up="all")
    assert planned.ticks == [NOW - dt.timedelta(seconds=n) for n in range(4, -1, -1)]


@pytest.mark.parametrize(("alias", "fields"), [
    ("@daily", "0 0 * * *"), ("@hourly", "0 * * * *"), ("@weekly", "0 0 * * 0"),
    ("@monthly", "0 0 1 * *"), ("@yearly", "0 0 1 1 *"), ("@midnight", "0 0 * * *"),
])
def test_named_expressions_fire_as_the_fields_they_stand_for(alias, fields):
    """croniter's @daily and the like worked in @app.periodic before schedules were rows,
    and work the same now, in a zone too."""
    start = at(2027, 3, 27, 12)
    named, spelled = Cron(alias, "Europe/Berlin"), Cron(fields, "Europe/Berlin")
    assert list(named.ticks(start, at(2027, 4, 3))) == list(spelled.ticks(start, at(2027, 4, 3)))
    app = pgbaton.App("postgresql://localhost/none")

    @app.periodic(alias)
    def tick() -> None: ...

    assert app.periodics[-1].cron == alias
