"""to_json's encoder, built once, writes what json.dumps writes and refuses what it refuses."""

from __future__ import annotations

import enum
import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pgbaton import InvalidArgument, NotSerializable
from pgbaton._encoding import to_json, to_json_many
from pgbaton.limits import MAX_ARGS_BYTES, MAX_JSON_DEPTH

# What PostgreSQL can hold: no NaN or infinity, no NUL, no lone surrogate.
TEXT = st.text(st.characters(exclude_characters="\x00", exclude_categories=["Cs"]))
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
    | TEXT,
    lambda children: st.lists(children) | st.dictionaries(TEXT, children),
    max_leaves=30,
)


class Colour(enum.StrEnum):
    RED = "red"


@given(JSON)
def test_the_text_is_json_dumps_text(value: Any) -> None:
    """Any JSON value encodes to json.dumps(ensure_ascii=False)'s text."""
    assert to_json({"v": value}, "args") == json.dumps({"v": value}, ensure_ascii=False)


def test_subclasses_and_non_string_keys_encode_as_json_dumps_encodes_them() -> None:
    """A str enum, a bool and an int key come out as json.dumps writes them."""
    value = {"c": Colour.RED, 1: True, "f": 1.5, "t": (1, 2)}
    assert to_json(value, "args") == json.dumps(value, ensure_ascii=False)


def test_a_value_that_contains_itself_is_named_circular() -> None:
    """The encoder kept for every call does not track containers; the error still says
    what is wrong, and the next call is not affected."""
    looped: dict[str, Any] = {}
    looped["self"] = looped
    with pytest.raises(NotSerializable, match="Circular reference"):
        to_json(looped, "args")
    assert to_json({"a": [{"b": 1}]}, "args") == '{"a": [{"b": 1}]}'


@pytest.mark.parametrize(
    ("value", "message"),
    [({"x": float("nan")}, "Out of range float"), ({"x": object()}, "not JSON serializable")],
)
def test_what_json_cannot_hold_is_refused(value: Any, message: str) -> None:
    with pytest.raises(NotSerializable, match=message):
        to_json(value, "args")


def _each(values: list[Any]) -> list[str] | Exception:
    """to_json of each value in turn, or the first error."""
    try:
        return [to_json(value, "args") for value in values]
    except (InvalidArgument, NotSerializable) as error:
        return error


# Text PostgreSQL may not hold: NULs and lone surrogates among control characters,
# backslashes, and text that reads like a NUL's escape.
ANY_TEXT = st.text(st.characters(categories=["Cs", "Cc", "Ll", "Lo", "Po"])) | st.sampled_from(
    ["\\u0000", "\\\\u0000", "\\\u0000", "a\\"]
)


@given(st.lists(st.dictionaries(ANY_TEXT, JSON | ANY_TEXT, max_size=4), max_size=20))
def test_to_json_many_gives_to_json_text_or_leaves_the_values_to_it(values: Any) -> None:
    """For any values, PostgreSQL can hold or not (NUL, lone surrogates, text of a
    NUL's escape): to_json_many gives each one's to_json text, or None, and never texts
    where to_json refuses one."""
    many = to_json_many(values)
    each = _each(values)
    if many is not None:
        assert many == each
    elif not isinstance(each, Exception):  # None for good values: only on a suspicion
        assert any("\\u0000" in text for text in each)


def _nested(levels: int) -> Any:
    value: Any = 1
    for _ in range(levels):
        value = [value]
    return value


@pytest.mark.parametrize(
    "bad",
    [
        {"x": float("nan")},
        {"x": object()},
        {"x": "nul \x00"},
        {"x": [1, "\x00", 2]},  # as to_json_many's own separator between two values
        {"x": "lone \ud800"},
        {"x": _nested(MAX_JSON_DEPTH)},  # one level more: the dict
        {"x": _nested(5_000)},  # past the C encoder's recursion limit
        {"x": "x" * MAX_ARGS_BYTES},
        {"x": "é" * (MAX_ARGS_BYTES // 2)},  # few characters, many bytes
    ],
    ids=["nan", "object", "nul", "nul-item", "surrogate", "deep", "deeper", "big", "big-utf8"],
)
def test_to_json_many_leaves_a_batch_with_a_bad_value_to_to_json(bad: Any) -> None:
    """One value to_json refuses, among good ones: no texts for any of them."""
    values = [{"n": n} for n in range(100)]
    values[70] = bad
    assert to_json_many(values) is None
    assert isinstance(_each(values), InvalidArgument | NotSerializable)


def test_to_json_many_takes_values_at_the_limits() -> None:
    """Values just inside the limits, and text that only reads like a NUL's escape, are
    encoded as to_json encodes them."""
    values = [
        {"deep": _nested(MAX_JSON_DEPTH - 1)},
        {"big": "x" * (MAX_ARGS_BYTES - len('{"big": ""}'))},
        {"text": "\\u0000 is six characters"},
        {"tab": "a\tb\nc\\d", "日本": "✓ 🎉"},
        {},
    ]
    assert to_json_many(values) == _each(values)
    assert to_json_many([]) == []
