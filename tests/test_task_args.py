"""Task.check_args: the short path (names only, no Signature.bind) judges every call as
the full check does, and refuses what the handler could not be called with."""

from __future__ import annotations

from typing import Any

import pytest

import pgbaton

app = pgbaton.App(dsn="postgresql://nobody@127.0.0.1:1/none")


@app.task(name="one")
async def one(seq: int) -> None:
    pass


@app.task(name="defaults")
def defaults(a: int, b: int = 1, *, c: str = "x") -> None:
    pass


@app.task(name="any_keyword")
def any_keyword(a: int, **rest: Any) -> None:
    pass


@app.task(name="star_args")
def star_args(a: int, *more: Any) -> None:
    pass


@app.task(name="positional_only")
def positional_only(a: int, /, b: int) -> None:
    pass


@app.task(name="nothing")
def nothing() -> None:
    pass


ARGS: list[Any] = [
    None, {}, {"seq": 1}, {"seq": 1, "x": 2}, {"a": 1}, {"a": 1, "b": 2}, {"a": 1, "c": "y"},
    {"b": 2}, {"a": 1, "z": 3}, {"a": 1, 5: 3}, {1: 2}, {"a": 1, "more": (1,)},
    [("a", 1)], (), "a",
]
TASKS = [one, defaults, any_keyword, star_args, positional_only, nothing]


def _outcome(task: pgbaton.Task, args: Any) -> str:
    try:
        task.check_args(args)
    except Exception as error:  # the outcome compared, whatever it is
        return f"{type(error).__name__}: {error}"
    return "accepted"


@pytest.mark.parametrize("task", TASKS, ids=[t.name for t in TASKS])
@pytest.mark.parametrize("args", ARGS, ids=repr)
def test_the_short_path_judges_as_the_full_check(task, args, monkeypatch):
    short = _outcome(task, args)
    monkeypatch.setattr(task, "_names_taken", None)  # the full check: dicts and bind()
    assert short == _outcome(task, args)


def test_the_short_path_is_taken_and_still_refuses():
    assert one._names_taken is not None and positional_only._names_taken is None
    one.check_args({"seq": 1})
    with pytest.raises(pgbaton.InvalidArgument, match=r"missing 'seq'.*unexpected 'x'"):
        one.check_args({"x": 1})
