"""AheadSizer, the default claim-ahead's estimate (worker/ahead.py), driven through
simulated time: a producer that claims every `round_trip` seconds while handlers end at
a given rate."""

from __future__ import annotations

import math

import pytest
from click.testing import CliRunner

from pgbaton._cli_common import AutoOrWholeNumber
from pgbaton.cli.main import main
from pgbaton.worker.ahead import HOLD_LIMIT_SECONDS, TARGET_WAIT_SECONDS, AheadSizer


class Simulation:
    """A worker's producer in simulated time: each claim first asks the sizer, then
    reports whether it came back full."""

    def __init__(self, concurrency: int, round_trip: float = 0.001) -> None:
        self.now = 0.0
        self.ended = 0.0  # handlers ended, fractional so low rates are exact
        self.round_trip = round_trip
        self.sizer = AheadSizer(concurrency, now=self.now)

    def run(self, seconds: float, *, ending_per_second: float, full: bool) -> list[int]:
        """Claim for `seconds` while handlers end at that rate; the ahead of each claim."""
        aheads = []
        for _ in range(round(seconds / self.round_trip)):
            self.now += self.round_trip
            self.ended += ending_per_second * self.round_trip
            ahead = self.sizer.ahead(now=self.now, handlers_ended=int(self.ended),
                                     executing=0)
            aheads.append(ahead)
            asked = 8 + ahead
            self.sizer.claimed(asked=asked, got=asked if full else asked - 1,
                               round_trip=self.round_trip)
        return aheads


def test_a_backlog_of_no_op_jobs_grows_the_claim_ahead_to_its_cap() -> None:
    simulation = Simulation(concurrency=32)
    aheads = simulation.run(2.0, ending_per_second=30_000, full=True)
    assert aheads[0] == 0  # nothing measured yet
    assert aheads[-1] == 512 == simulation.sizer.cap  # min(16 * 32, 1024)
    assert aheads == sorted(aheads)  # it only grows while the rate holds


def test_the_cap_is_1024_at_most() -> None:
    simulation = Simulation(concurrency=200)
    assert simulation.run(2.0, ending_per_second=100_000, full=True)[-1] == 1024


def test_one_second_jobs_get_one_or_two_ahead() -> None:
    """32 slots of 1 s jobs end 32 a second: about 1.6 jobs end in T = 50 ms."""
    simulation = Simulation(concurrency=32)
    aheads = simulation.run(5.0, ending_per_second=32, full=True)
    assert set(aheads[-1000:]) <= {1, 2}


def test_long_jobs_get_none_ahead() -> None:
    simulation = Simulation(concurrency=32)
    assert set(simulation.run(5.0, ending_per_second=3.2, full=True)[-1000:]) == {0}


def test_without_a_backlog_nothing_is_claimed_ahead() -> None:
    simulation = Simulation(concurrency=32)
    assert set(simulation.run(2.0, ending_per_second=30_000, full=False)) == {0}
    # A backlog then appears: the very next claim takes ahead, the rate being known.
    aheads = simulation.run(0.002, ending_per_second=30_000, full=True)
    assert aheads == [0, 512]


def test_a_burst_at_an_idle_worker_reaches_its_cap_within_tens_of_milliseconds() -> None:
    """A worker idle for a minute, then a backlog of no-op jobs: the claims are sized by
    what ended since the backlog began, and reach the cap in under 20 ms. (The average
    alone, which remembers the idle minute, climbed for half a second: 59 ahead after
    20 ms, where a drain of 10,000 such jobs lasts a few hundred.) Each takes at most
    as many ahead as handlers ended since the backlog began."""
    simulation = Simulation(concurrency=32)
    assert set(simulation.run(60.0, ending_per_second=0, full=False)) == {0}
    ended_before = int(simulation.ended)
    aheads = []
    for _ in range(20):
        aheads += simulation.run(0.001, ending_per_second=30_000, full=True)
        assert aheads[-1] <= int(simulation.ended) - ended_before
    assert aheads[0] == 0  # no backlog known before this claim came back full
    assert aheads == sorted(aheads)
    assert aheads[-1] == 512


@pytest.mark.parametrize("round_trip", [0.001, 0.1])
def test_handlers_running_when_a_backlog_begins_count_for_nothing(round_trip: float) -> None:
    """A worker keeping up with jobs of a second (32 slots: 32 end a second), then a
    backlog; just after it began, 31 handlers that were running then end within a
    millisecond. Counted as the backlog's pace they would read as 31,000 a second (512
    ahead, each waiting a second for a slot, then handed back); they began before it,
    so the claim ahead stays what the average alone gives, whatever the claim's round
    trip (the average moves a little too: it is one of time)."""
    simulation = Simulation(concurrency=32, round_trip=round_trip)
    simulation.run(5.0, ending_per_second=32, full=False)
    sizer, now, ended = simulation.sizer, simulation.now, int(simulation.ended)
    assert sizer.ahead(now=now, handlers_ended=ended, executing=32) == 0
    sizer.claimed(asked=1, got=1, round_trip=round_trip)  # full: the backlog begins
    ahead = sizer.ahead(now=now + 0.001, handlers_ended=ended + 31, executing=1)
    assert ahead == math.ceil(sizer.rate * max(2 * round_trip, TARGET_WAIT_SECONDS))
    assert ahead < 31


def test_the_backlogs_own_handlers_bound_what_it_adds() -> None:
    """In the backlog's first moments, what its own jobs show adds at most as many
    ahead as handlers began and ended since it began: 3 of them after a millisecond
    are 3 ahead, not 3,000 a second."""
    simulation = Simulation(concurrency=32)
    simulation.run(60.0, ending_per_second=0, full=False)
    sizer, now, ended = simulation.sizer, simulation.now, int(simulation.ended)
    assert sizer.ahead(now=now, handlers_ended=ended, executing=0) == 0
    sizer.claimed(asked=32, got=32, round_trip=0.001)
    assert sizer.ahead(now=now + 0.001, handlers_ended=ended + 3, executing=29) == 3


def test_a_burst_whose_handlers_then_hang_falls_as_they_do() -> None:
    """The average since the backlog began falls as soon as nothing ends (the time
    grows, the count does not), and gives way to the slower average after
    RATE_MEMORY_SECONDS: the claim ahead only falls, and is soon none."""
    simulation = Simulation(concurrency=32)
    simulation.run(60.0, ending_per_second=0, full=False)
    assert simulation.run(0.1, ending_per_second=30_000, full=True)[-1] == 512
    aheads = simulation.run(HOLD_LIMIT_SECONDS, ending_per_second=0, full=True)
    assert aheads == sorted(aheads, reverse=True)
    assert aheads[-1] < 512 / 4
    assert simulation.run(3.0, ending_per_second=0, full=True)[-1] == 0


def test_it_falls_when_handlers_slow_down() -> None:
    simulation = Simulation(concurrency=32)
    assert simulation.run(2.0, ending_per_second=30_000, full=True)[-1] == 512
    # Every handler hangs: nothing ends. Within the hold limit the claim ahead has
    # fallen by more than half (R forgets within 0.5 s), and soon it is none.
    aheads = simulation.run(HOLD_LIMIT_SECONDS, ending_per_second=0, full=True)
    assert aheads == sorted(aheads, reverse=True)
    assert aheads[-1] < 512 / 2
    assert simulation.run(3.0, ending_per_second=0, full=True)[-1] == 0
    # They recover at 1 s each: one or two ahead again.
    assert set(simulation.run(5.0, ending_per_second=32, full=True)[-500:]) <= {1, 2}


def test_a_slow_claim_widens_the_horizon_to_two_round_trips() -> None:
    """Handlers ending 2,000 a second: T = 50 ms gives 100 ahead; a claim that takes
    100 ms needs 400 to keep the slots busy until the next one is back."""
    fast = Simulation(concurrency=64, round_trip=0.001)
    assert fast.run(3.0, ending_per_second=2_000, full=True)[-1] == pytest.approx(
        2_000 * TARGET_WAIT_SECONDS, abs=3)
    slow = Simulation(concurrency=64, round_trip=0.1)
    assert slow.run(5.0, ending_per_second=2_000, full=True)[-1] == pytest.approx(
        2_000 * 0.2, abs=10)


@pytest.mark.parametrize("bad", ["-1", "1.5", "lots", ""])
def test_a_bad_claim_ahead_option_is_refused_naming_it(bad: str) -> None:
    """`pgbaton worker --claim-ahead` takes auto or a whole number >= 0; anything else
    exits 2 before the worker starts, with one line naming the option."""
    done = CliRunner().invoke(main, ["worker", "app:app", "--claim-ahead", bad])
    assert done.exit_code == 2
    assert "Invalid value for '--claim-ahead'" in done.output
    assert "must be 'auto' or a whole number >= 0" in done.output


@pytest.mark.parametrize(("given", "read"), [("auto", "auto"), ("AUTO", "auto"), ("0", 0),
                                              ("48", 48)])
def test_the_claim_ahead_option_reads_auto_or_a_number(given: str, read: object) -> None:
    assert AutoOrWholeNumber().convert(given, None, None) == read
