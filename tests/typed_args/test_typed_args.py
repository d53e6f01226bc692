"""Typed args (docs/howto/typed-args.md): a handler's annotations judge a job's args at
enqueue, with an error naming each field and its problem but never its value; at run
they turn the stored JSON back into the handler's types; without pydantic they are
ignored as before."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import subprocess
import sys
import typing
from typing import Any, Literal

import pytest
from typing_extensions import TypedDict  # pydantic wants it before Python 3.12

import pgbaton
from pgbaton.errors import ArgsRejected

pydantic = pytest.importorskip("pydantic")

app = pgbaton.App(dsn="postgresql://nobody@127.0.0.1:1/none")


class Order(pydantic.BaseModel):
    id: int
    lines: list[str]


@dataclasses.dataclass
class Point:
    x: int
    y: int


class Address(TypedDict):
    street: str
    zip: int


class Plain(typing.TypedDict):
    n: int


@app.task
def ship(order: Order, point: Point, to: Address, at: dt.datetime, *,
         mode: Literal["air", "sea"] = "sea", note=None) -> None:
    pass


@app.task
def untyped(a, b: Any = None, **rest) -> None:  # type: ignore[no-untyped-def]
    pass


GOOD: dict[str, Any] = {
    "order": Order(id=1, lines=["tea"]), "point": Point(1, 2),
    "to": {"street": "Main", "zip": 12345}, "at": dt.datetime(2026, 1, 2, tzinfo=dt.UTC),
}


def test_models_dataclasses_and_datetimes_are_stored_as_json():
    """A model, a dataclass and a datetime given to enqueue are stored as their JSON."""
    stored = ship.stored_args(GOOD)
    assert stored == {"order": {"id": 1, "lines": ["tea"]}, "point": {"x": 1, "y": 2},
                      "to": {"street": "Main", "zip": 12345}, "at": "2026-01-02T00:00:00Z"}
    json.dumps(stored)


def test_the_stored_json_is_handed_to_the_handler_as_its_types():
    """At run the stored JSON becomes the model, the dataclass, the TypedDict (a dict)
    and the datetime again; an untyped parameter is given as stored."""
    given = ship.args_for_run({**ship.stored_args(GOOD), "note": {"any": [1]}})  # type: ignore[dict-item]
    assert given["order"] == GOOD["order"] and isinstance(given["order"], Order)
    assert given["point"] == Point(1, 2) and given["to"] == GOOD["to"]
    assert given["at"] == GOOD["at"] and given["note"] == {"any": [1]}


@pytest.mark.parametrize(("args", "named"), [
    ({**GOOD, "order": {"id": "seven", "lines": ["x"]}},
     "order.id: Input should be a valid integer"),
    ({**GOOD, "order": {"id": 1}}, "order.lines: Field required"),
    ({**GOOD, "point": {"x": 1, "y": [2]}}, "point.y: Input should be a valid integer"),
    ({**GOOD, "to": {"street": "Main"}}, "to.zip: Field required"),
    ({**GOOD, "at": "yesterday-ish"}, "at: Input should be a valid datetime"),
    ({**GOOD, "mode": "rail"}, "mode: Input should be 'air' or 'sea'"),
])
def test_args_that_do_not_fit_name_the_field_and_the_problem(args, named):
    """InvalidArgument at enqueue names the task, the field's path and the problem."""
    with pytest.raises(pgbaton.InvalidArgument, match="nothing was written") as raised:
        ship.stored_args(args)
    assert "'ship'" in str(raised.value) and named in str(raised.value)


def test_a_problem_never_shows_the_value_given():
    """The value at fault may be a secret: the message names where, never what."""
    with pytest.raises(pgbaton.InvalidArgument) as raised:
        ship.stored_args({**GOOD, "order": {"id": "hunter2-secret", "lines": "s3cr3t-line"}})
    assert "hunter2" not in str(raised.value) and "s3cr3t" not in str(raised.value)


def test_many_problems_are_listed_up_to_five():
    bad = {"order": {"id": "x", "lines": [1, 2, 3, 4]}, "point": {}, "to": {}, "at": "x"}
    with pytest.raises(pgbaton.InvalidArgument, match=r"and \d+ more"):
        ship.stored_args(bad)


def test_stored_args_that_do_not_fit_are_rejected_at_run():
    """A job written by the SQL API with args that do not fit: ArgsRejected, which fails
    the job at once; so are missing and unexpected names."""
    with pytest.raises(ArgsRejected, match=r"order\.id: Input should be a valid integer"):
        ship.args_for_run({**ship.stored_args(GOOD), "order": {"id": "x", "lines": []}})
    with pytest.raises(ArgsRejected, match="missing 'at'"):
        ship.args_for_run({k: v for k, v in ship.stored_args(GOOD).items() if k != "at"})
    with pytest.raises(ArgsRejected, match="unexpected 'extra'"):
        ship.args_for_run({**ship.stored_args(GOOD), "extra": 1})


@app.task
def count(n: int, ratio: float, name: str, on: bool = True) -> None:
    pass


def test_plain_types_run_as_given_and_are_judged_otherwise():
    """A handler typed with int, float, str and bool only: args of exactly those types
    reach it as they are (nothing to convert, decided at registration); any other
    value is still judged and converted, and missing, unexpected or unfit ones are
    rejected as for any typed task."""
    assert count.arg_types.as_is is not None and ship.arg_types.as_is is None
    given = {"n": 3, "ratio": 0.5, "name": "x"}
    assert count.args_for_run(given) is given
    converted = count.args_for_run({"n": "3", "ratio": 1, "name": "x", "on": 0})
    assert converted == {"n": 3, "ratio": 1.0, "name": "x", "on": False}
    assert type(converted["ratio"]) is float
    assert count.args_for_run({"n": True, "ratio": 0.5, "name": "x"})["n"] == 1
    with pytest.raises(ArgsRejected, match=r"n: Input should be a valid integer"):
        count.args_for_run({"n": "three", "ratio": 0.5, "name": "x"})
    with pytest.raises(ArgsRejected, match="missing 'name'"):
        count.args_for_run({"n": 3, "ratio": 0.5})
    with pytest.raises(ArgsRejected, match="unexpected 'extra'"):
        count.args_for_run({**given, "extra": 1})


@app.task
def pair(n: int, name: str) -> None:
    pass


def test_all_required_plain_types_are_judged_by_count_and_type():
    """Every parameter required and of a plain type: args of exactly those names and
    types are stored and run as they are; another name in the place of one, a missing or an extra
    one, or a value of another type still go the whole way."""
    assert pair._exact_args is not None and count._exact_args is None
    given = {"n": 3, "name": "x"}
    assert pair.args_for_run(given) is given
    assert pair.args_for_run({"n": "3", "name": "x"}) == given
    assert pair.stored_args(given) is given
    assert pair.stored_args({"n": "3", "name": "x"}) == given
    with pytest.raises(pgbaton.InvalidArgument, match="n: Input should be a valid integer"):
        pair.stored_args({"n": [3], "name": "x"})
    for wrong, message in (({"n": 3, "nom": "x"}, "missing 'name'; unexpected 'nom'"),
                           ({"n": 3}, "missing 'name'"),
                           ({**given, "extra": 1}, "unexpected 'extra'"),
                           ({"n": None, "name": "x"}, "n: Input should be a valid integer")):
        with pytest.raises(ArgsRejected, match=message):
            pair.args_for_run(wrong)


def test_untyped_parameters_are_untouched():
    assert not untyped.arg_types
    assert untyped.stored_args({"a": object}) == {"a": object}
    assert untyped.args_for_run({"a": 1, "zz": 2}) == {"a": 1, "zz": 2}


def test_the_args_schema_is_json_schema():
    """Each task's args as one JSON Schema object: typed fields, required names, $defs."""
    schema = ship.args_schema()
    assert schema["type"] == "object" and schema["additionalProperties"] is False
    assert schema["required"] == ["order", "point", "to", "at"]
    assert schema["properties"]["order"]["properties"]["id"]["type"] == "integer"
    assert schema["properties"]["at"] == {"format": "date-time", "type": "string"}
    assert schema["properties"]["mode"]["enum"] == ["air", "sea"]
    assert schema["properties"]["note"] == {}
    json.dumps(schema)
    loose = untyped.args_schema()
    assert loose["additionalProperties"] is True and loose["properties"] == {"a": {}, "b": {}}


def test_a_type_pydantic_cannot_judge_is_left_untyped():
    """An annotation pydantic has no schema for (a class of the caller's) is ignored,
    as all annotations were before typed args."""

    class Opaque:
        pass

    local = pgbaton.App(dsn="postgresql://nobody@127.0.0.1:1/none")

    @local.task
    def takes(thing: Opaque, n: int) -> None:
        pass

    assert set(takes.arg_types.adapters) == {"n"}
    assert takes.stored_args({"thing": "anything", "n": "3"}) == {"thing": "anything", "n": 3}


def test_an_annotation_pydantic_refuses_is_named_at_registration():
    """typing.TypedDict before Python 3.12 (pydantic wants typing_extensions'): the
    registration says which parameter, rather than ignoring its type unseen."""
    if sys.version_info >= (3, 12):
        pytest.skip("typing.TypedDict is judged from Python 3.12 on")
    local = pgbaton.App(dsn="postgresql://nobody@127.0.0.1:1/none")
    with pytest.raises(pgbaton.ConfigurationError, match="parameter 'p'"):
        @local.task
        def takes(p: Plain) -> None:
            pass


def test_without_pydantic_annotations_are_ignored():
    """In a process where pydantic cannot be imported, a typed handler takes any args,
    as before, and its schema lists the names only."""
    program = """
import sys
sys.modules["pydantic"] = None  # import pydantic now raises ImportError
import pgbaton
app = pgbaton.App(dsn="postgresql://nobody@127.0.0.1:1/none")
@app.task
def f(n: int, when: "str") -> None: ...
assert not f.arg_types
assert f.stored_args({"n": "not a number", "when": 5}) == {"n": "not a number", "when": 5}
assert f.args_schema()["properties"] == {"n": {}, "when": {}}
print("ok")
"""
    ran = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True,
                         timeout=60, check=False)
    assert ran.stdout.strip() == "ok", ran.stderr


class Card(pydantic.BaseModel):
    kind: Literal["card"]
    number: str


class Bank(pydantic.BaseModel):
    kind: Literal["bank"]
    iban: str


@app.task
def settle(cards: dict[str, int],
           method: typing.Annotated[Card | Bank, pydantic.Field(discriminator="kind")]
           ) -> None:
    pass


def test_a_problem_never_shows_a_dict_key_or_a_union_tag_given():
    """A dict's keys and a union's tag are data too: a path shows [key] for a key, and a
    tag that matches nothing is not quoted back."""
    with pytest.raises(pgbaton.InvalidArgument) as raised:
        settle.stored_args({"cards": {"4111-1111-1111-1111": "x"},
                            "method": {"kind": "SECRET-TAG-4111", "number": "1"}})
    said = str(raised.value)
    assert "4111" not in said and "SECRET" not in said, said
    assert "cards.[key]" in said and "method" in said
