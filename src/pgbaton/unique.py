"""Unique jobs (docs/howto/unique.md): what makes two jobs the same, checked and turned
into job_insert_unique's parameters. No I/O: the database enforces it (jobs_unique_key)."""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from ._checks import check_seconds
from .errors import InvalidArgument, NotSerializable
from .limits import MAX_SECONDS, MIN_UNIQUE_PERIOD_SECONDS
from .models import STATUSES

Conflict = Literal["keep", "replace", "debounce"]
CONFLICTS: tuple[str, ...] = ("keep", "replace", "debounce")
DEFAULT_STATES: tuple[str, ...] = ("pending", "waiting", "running")
# The claim moves a job between these two, and a retry or the reaper moves it back,
# without anyone asking: if only one of them blocked, a new job could slip in while the
# old one was in the other, and the worker's own write would meet a second job of the key.
REQUIRED_STATES = frozenset({"pending", "running"})


@dataclass(frozen=True, slots=True)
class Unique:
    """What makes two jobs of a task the same, and what an enqueue that meets one does.

    args: the names of the args that count (None: all; []: none). queue: count the
    queue in. period: seconds; jobs are the same only within one window of that length,
    windows cut from the Unix epoch by run_at. states: the states in which an existing
    job blocks a new one (pending and running always among them). conflict: "keep" the
    existing job, "replace" a pending one's args, priority and run_at, or "debounce":
    push a pending one's run_at to now + delay and give it the new args.
    """

    args: tuple[str, ...] | None = None
    queue: bool = False
    period: float | None = None
    states: tuple[str, ...] = DEFAULT_STATES
    conflict: Conflict = "keep"
    delay: float | None = None

    def __init__(
        self,
        args: Iterable[str] | None = None,
        *,
        queue: bool = False,
        period: float | None = None,
        states: Iterable[str] = DEFAULT_STATES,
        conflict: Conflict = "keep",
        delay: float | None = None,
    ) -> None:
        object.__setattr__(self, "args", _check_args(args))
        if not isinstance(queue, bool):
            raise InvalidArgument(f"Unique(queue=) must be True or False, got {queue!r}")
        object.__setattr__(self, "queue", queue)
        object.__setattr__(self, "period", _check_period(period))
        object.__setattr__(self, "states", _check_states(states))
        if conflict not in CONFLICTS:
            raise InvalidArgument(
                f"Unique(conflict=) must be one of {', '.join(map(repr, CONFLICTS))}, "
                f"got {conflict!r}"
            )
        object.__setattr__(self, "conflict", conflict)
        if conflict == "debounce":
            if delay is None:
                raise InvalidArgument(
                    'Unique(conflict="debounce") needs delay=: the seconds after the last '
                    "call at which the job runs"
                )
            delay = check_seconds("Unique(delay=)", delay, positive=True)
        elif delay is not None:
            raise InvalidArgument(
                f'Unique(delay=) is the debounce delay: give it with conflict="debounce", '
                f"not {conflict!r}"
            )
        object.__setattr__(self, "delay", delay)

    def check_names(self, task: str, taken: Iterable[str] | None) -> None:
        """InvalidArgument for an args= name the task's handler does not take (taken:
        the names it takes; None when it takes any)."""
        if self.args is None or taken is None:
            return
        names = set(taken)
        unknown = [name for name in self.args if name not in names]
        if unknown:
            raise InvalidArgument(
                f"task {task!r}: Unique(args=) names {', '.join(map(repr, unknown))}, which "
                f"its handler does not take (it takes {', '.join(sorted(names)) or 'none'})"
            )

    def params(self, task: str, args: Mapping[str, Any], queue: str) -> dict[str, Any]:
        """job_insert_unique's parameters for one job: the digest of what makes it the
        same (the window's number is added by the database, from the job's run_at)."""
        chosen = dict(args) if self.args is None else {
            name: args[name] for name in self.args if name in args}
        try:
            identity = json.dumps(
                [task, queue if self.queue else None, self.period, chosen],
                sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                allow_nan=False,
            )
        except (TypeError, ValueError) as error:
            raise NotSerializable(
                f"the unique args of task {task!r} cannot be stored as JSON: {error}"
            ) from None
        return {
            "unique_base": hashlib.sha256(identity.encode("utf-8", "surrogatepass")).hexdigest(),
            "unique_period": self.period,
            "unique_states": list(self.states),
            "conflict": self.conflict,
            "unique_delay": self.delay,
        }


def check_unique(
    unique: object,
    *,
    after: object = None,
    idempotency_key: str | None = None,
    run_at: object = None,
    delay: float | None = None,
) -> None:
    """InvalidArgument for a unique= that is not a Unique, or beside what it cannot be
    combined with, before anything is written."""
    if not isinstance(unique, Unique):
        raise InvalidArgument(f"unique= must be a pgbaton.Unique, got {unique!r}")
    if after is not None:
        raise InvalidArgument(
            "unique= cannot be combined with after= (a job waiting for its parents is "
            "not found, replaced or pushed back with its edges); nothing was written"
        )
    if idempotency_key is not None:
        raise InvalidArgument(
            "give unique= or idempotency_key=, not both: the key names one job for good, "
            "the uniqueness only while a job blocks (docs/explanation/guarantees.md); nothing was "
            "written"
        )
    if unique.conflict == "debounce" and (run_at is not None or delay is not None):
        raise InvalidArgument(
            'a debounced job (Unique(conflict="debounce")) is due its delay after the '
            "last call: give no run_at or delay; nothing was written"
        )


def _check_args(args: Iterable[str] | None) -> tuple[str, ...] | None:
    if args is None:
        return None
    if isinstance(args, str) or not isinstance(args, Iterable):
        raise InvalidArgument(
            f"Unique(args=) must be a list of arg names (or None for all), got {args!r}"
        )
    names = tuple(args)
    for name in names:
        if not isinstance(name, str) or not name:
            raise InvalidArgument(f"Unique(args=) holds {name!r}, which is not an arg name")
    return tuple(dict.fromkeys(names))


def _check_period(period: float | None) -> float | None:
    if period is None:
        return None
    if (
        isinstance(period, bool)
        or not isinstance(period, int | float)
        or not math.isfinite(period)
        or not MIN_UNIQUE_PERIOD_SECONDS <= period <= MAX_SECONDS
    ):
        raise InvalidArgument(
            f"Unique(period=) must be a number of seconds from {MIN_UNIQUE_PERIOD_SECONDS} "
            f"to ten years, got {period!r}"
        )
    return float(period)


def _check_states(states: Iterable[str]) -> tuple[str, ...]:
    if isinstance(states, str) or not isinstance(states, Iterable):
        raise InvalidArgument(f"Unique(states=) must be a list of states, got {states!r}")
    chosen = tuple(dict.fromkeys(states))
    unknown = [state for state in chosen if state not in STATUSES]
    if unknown:
        raise InvalidArgument(
            f"Unique(states=) holds {', '.join(map(repr, unknown))}: the states are "
            f"{', '.join(STATUSES)}"
        )
    missing = sorted(REQUIRED_STATES - set(chosen))
    if missing:
        raise InvalidArgument(
            f"Unique(states=) must include pending and running (missing: "
            f"{', '.join(missing)}): a job moves between them without anyone asking, and "
            "a new job must not slip in while it is in the other (docs/howto/unique.md)"
        )
    return tuple(state for state in STATUSES if state in chosen)
