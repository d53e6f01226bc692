"""How many jobs a worker claims ahead when it sizes them itself (`claim_ahead="auto"`):
enough to keep its slots busy while its next claim is in flight, and never more than it
runs in about TARGET_WAIT_SECONDS (docs/explanation/architecture.md, "Claiming ahead
sized by the worker").

    ahead = 0                                         no backlog (the last claim came
                                                      back short of what it asked)
    ahead = clamp(ceil(R * max(2 r, T)), 0, cap)      otherwise (0 below half a job)

R is the rate at which this worker's handlers end (per second, an average that forgets
within about RATE_MEMORY_SECONDS), r the claim's round trip (an average), T the target
wait, cap = min(16 * concurrency, 1024). In a backlog's first RATE_MEMORY_SECONDS the
estimate is at least n * min(1, max(2 r, T) / t): n the handlers that began since the
backlog began and have ended, t the time since. The average remembers the idle minutes
before a burst and took half a second or more to climb (a drain of 10,000 no-op jobs was
over before the claims reached half their size); n counts only what the backlog's own
jobs show, never claims more than n ahead, and leaves out the handlers that were
running when it began (jobs of a second that end just after it began). A job claimed
ahead so waits in the worker about T (or a round trip or two, on a slow link), whatever
its run time: 1 s jobs at concurrency 32 get 2 ahead, no-op jobs hundreds. Pure
arithmetic on what the producer tells it, with the clock passed in, so it is tested
without a database or a loop.
"""

from __future__ import annotations

import math

# The longest a job claimed ahead should wait in its worker for a slot.
TARGET_WAIT_SECONDS = 0.05
# A job claimed ahead and still waiting after this long is handed back (its attempt
# given back): the estimate was wrong (handlers slowed down or hang), and another worker
# may be free. max(1 s, 20 T): far above the target, so a healthy drain never hits it.
HOLD_LIMIT_SECONDS = max(1.0, 20 * TARGET_WAIT_SECONDS)
# R forgets completions older than this (an exponential average in time): handlers that
# slow down bring the claims ahead down within a second or two.
RATE_MEMORY_SECONDS = 0.5
# The weight of each new round trip in r.
ROUND_TRIP_WEIGHT = 0.2
# Fewer handlers than this expected to end within the horizon: claim none ahead (its
# slot would free long after the claim is back; and R, decaying after handlers hang,
# never quite reaches 0).
LEAST_EXPECTED = 0.5
MOST_AHEAD = 1024
MOST_AHEAD_PER_SLOT = 16


def most_ahead(concurrency: int) -> int:
    """The cap: min(16 * concurrency, 1024)."""
    return min(MOST_AHEAD_PER_SLOT * concurrency, MOST_AHEAD)


class AheadSizer:
    """Sizes each claim's share of jobs beyond the free slots, from what this worker
    measured: the rate its handlers end at, the claim's round trip, and whether its last
    claim came back full (a backlog waits)."""

    def __init__(
        self, concurrency: int, *, now: float, target_wait: float = TARGET_WAIT_SECONDS
    ) -> None:
        self.cap = most_ahead(concurrency)
        self.target_wait = target_wait
        self.rate = 0.0  # R: handlers ended per second
        self.round_trip: float | None = None  # r: seconds
        self._rate_at = now
        self._handlers_ended = 0
        self._executing = 0  # handlers running at the last ahead()
        # When the backlog began (the last ahead() before the first claim that came
        # back full), and how many handlers had ended and were running then; None while
        # no backlog waits.
        self._backlog_from: tuple[float, int, int] | None = None

    @property
    def backlog(self) -> bool:
        """Whether the last claim came back full: a backlog waits."""
        return self._backlog_from is not None

    def claimed(self, *, asked: int, got: int, round_trip: float) -> None:
        """A claim asked for `asked` jobs, got `got`, and took `round_trip` seconds. A
        claim that came back full says a backlog waits; one that came back short, that
        the worker has caught up."""
        if not (asked > 0 and got >= asked):
            self._backlog_from = None
        elif self._backlog_from is None:
            self._backlog_from = (self._rate_at, self._handlers_ended, self._executing)
        if round_trip >= 0:
            self.round_trip = round_trip if self.round_trip is None else (
                self.round_trip + ROUND_TRIP_WEIGHT * (round_trip - self.round_trip))

    def ahead(self, *, now: float, handlers_ended: int, executing: int) -> int:
        """How many jobs the next claim takes beyond the free slots. `handlers_ended`:
        how many handlers this worker has ended so far (a running total); `executing`:
        how many run now."""
        self._update_rate(now, handlers_ended)
        self._executing = executing
        if not self.backlog:
            return 0
        horizon = max(2 * (self.round_trip or 0.0), self.target_wait)
        expected = max(self.rate * horizon, self._burst(now, handlers_ended, horizon))
        if expected < LEAST_EXPECTED:
            return 0  # long jobs: a claim comes back long before a slot frees
        return min(math.ceil(expected), self.cap)

    def _burst(self, now: float, handlers_ended: int, horizon: float) -> float:
        """In a backlog's first RATE_MEMORY_SECONDS, the jobs ahead that its own pace
        asks for: the handlers that began since it began and have ended (at least those
        ended beyond the ones running then), over the time since, times the horizon.
        Never more than those handlers: a few handlers of short jobs read as a few, not
        as a rate of thousands, and the jobs running when the backlog began (a second's
        jobs about to end) count for nothing. It falls as they slow down (none ends, the
        time grows)."""
        if self._backlog_from is None:
            return 0.0
        began, ended_then, executing_then = self._backlog_from
        since = now - began
        if not 0 <= since < RATE_MEMORY_SECONDS:
            return 0.0
        began_and_ended = max(0, handlers_ended - ended_then - executing_then)
        if since <= horizon:
            return float(began_and_ended)
        return began_and_ended * horizon / since

    def _update_rate(self, now: float, handlers_ended: int) -> None:
        elapsed = now - self._rate_at
        if elapsed <= 0:
            return
        ended = max(0, handlers_ended - self._handlers_ended)
        # An average in time, not per sample: a second of samples weighs the same
        # whether the producer claimed twice in it or two thousand times.
        weight = 1.0 - math.exp(-elapsed / RATE_MEMORY_SECONDS)
        self.rate += weight * (ended / elapsed - self.rate)
        self._rate_at, self._handlers_ended = now, handlers_ended
