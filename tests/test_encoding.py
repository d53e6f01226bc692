"""to_json's encoder, built once, writes what json.dumps writes and refuses what it refuses."""

from __future__ import annotations

import enum
import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pgbaton import NotSerializable
from pgbaton._encoding import to_json

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
