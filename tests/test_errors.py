"""Every pgbaton exception survives pickling with its message and its attributes: an
App.wait inside a process pool, a handler's outcome logged by a multiprocessing
handler, a test runner's worker reporting a failure, all send exceptions between
processes by pickle, and an exception whose __init__ takes other arguments than its
message used to fail to unpickle (TypeError) or, worse, to come back wrong."""

from __future__ import annotations

import datetime as dt
import importlib
import pickle
import pkgutil

import pytest

import pgbaton
from pgbaton.errors import JobCancelled, JobEnded, JobFailed, PgbatonError
from pgbaton.outcomes import Cancel, Discard, Snooze

ERRORS = [{"type": "ValueError", "message": "<b>no</b>'; DROP TABLE jobs; --",
           "attempt": 3}]
# The exceptions whose __init__ takes more than a message, built as pgbaton builds them.
BUILT: list[PgbatonError] = [
    JobEnded(7, "send_mail", ERRORS, attempts=3),
    JobFailed(8, "send_mail", ERRORS, attempts=0),
    JobFailed(9, "send_mail", []),
    JobCancelled(10, "send_mail", ERRORS),
    Snooze(30),
    Snooze(until=dt.datetime(2030, 1, 1, tzinfo=dt.UTC), note="rate limited"),
    Cancel("the order was refunded"),
    Discard("stale"),
]


def every_error_class() -> list[type[PgbatonError]]:
    for module in pkgutil.walk_packages(pgbaton.__path__, "pgbaton."):
        if module.name.startswith(("pgbaton.contrib", "pgbaton.integrations")):
            continue  # need Django or SQLAlchemy settings of their own to import
        if module.name.endswith("__main__"):
            continue  # runs the command line
        importlib.import_module(module.name)
    found: list[type[PgbatonError]] = []
    todo = [PgbatonError]
    while todo:
        cls = todo.pop()
        found.append(cls)
        todo.extend(cls.__subclasses__())
    return found


def round_trip(error: BaseException) -> BaseException:
    return pickle.loads(pickle.dumps(error))


@pytest.mark.parametrize("error", BUILT, ids=lambda e: type(e).__name__)
def test_an_error_built_with_its_own_arguments_comes_back_whole(error: PgbatonError) -> None:
    back = round_trip(error)
    assert type(back) is type(error)
    assert str(back) == str(error)
    assert back.args == error.args
    assert vars(back) == vars(error)


def test_every_error_class_pickles() -> None:
    classes = every_error_class()
    assert len(classes) > 20
    built = {type(e) for e in BUILT}
    for cls in classes:
        if any("__init__" in vars(own) for own in cls.__mro__
               if issubclass(own, PgbatonError)):
            # Its own __init__: BUILT builds it with its own arguments.
            assert cls in built, f"{cls.__qualname__} has an __init__ of its own: add it to BUILT"
            continue
        error = cls("the message")
        back = round_trip(error)
        assert type(back) is cls and str(back) == "the message"


class Holder:
    """Something kept on an error that refers back to it."""

    error: BaseException


def test_an_error_that_refers_to_itself_comes_back_whole() -> None:
    """An attribute whose value refers back to the error (a holder kept on it) comes
    back pointing at the rebuilt error, as a plain exception's does."""
    error = JobFailed(11, "send_mail", ERRORS, attempts=1)
    holder = Holder()
    holder.error = error
    error.holder = holder  # type: ignore[attr-defined]
    back = round_trip(error)
    assert back.holder.error is back  # type: ignore[attr-defined]
    assert (back.job_id, back.attempts) == (11, 1)  # type: ignore[attr-defined]
