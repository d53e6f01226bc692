"""Encoding what jobs carry for PostgreSQL: JSON that jsonb accepts (no NaN, no NUL, valid
UTF-8, nesting within MAX_JSON_DEPTH), and an attempt's error as stored in `errors`."""

from __future__ import annotations

import json
import re
import traceback
from collections.abc import Sequence
from typing import Any

from .errors import InvalidArgument, NotSerializable
from .limits import MAX_ARGS_BYTES, MAX_JSON_DEPTH

_JSON_NUL = re.compile(r"(?<!\\)(?:\\\\)*\\u0000")
_ENCODER = json.JSONEncoder(allow_nan=False, ensure_ascii=False)
# json.dumps() builds its C encoder at every call, which costs three times what encoding
# a small job's args does; this one is built once and gives the same text. It keeps no
# record of the containers it is inside (shared, one would outlive a failed call), so
# a value that contains itself recurses to RecursionError, and _ENCODER then names it.
_C_MAKE_ENCODER = getattr(json.encoder, "c_make_encoder", None)  # CPython's C speedups
_C_ENCODE = None if _C_MAKE_ENCODER is None else _C_MAKE_ENCODER(
    None, _ENCODER.default, json.encoder.encode_basestring, None, ": ", ", ",
    False, False, False,
)


def _encode(value: Any) -> str:
    if _C_ENCODE is not None:
        try:
            return "".join(_C_ENCODE(value, 0))
        except RecursionError:
            pass  # too deep, or circular: the checking encoder says which
    return _ENCODER.encode(value)


def to_json(
    value: Any, what: str, max_bytes: int = MAX_ARGS_BYTES, max_depth: int = MAX_JSON_DEPTH
) -> str:
    """JSON that PostgreSQL's jsonb accepts and Python decodes again: no NaN, no NUL
    character, valid UTF-8, nested at most max_depth levels, at most max_bytes long."""
    try:
        text = _encode(value)
    except (TypeError, ValueError) as error:
        raise NotSerializable(f"{what} cannot be stored as JSON: {error}") from None
    except RecursionError:
        raise _nested_too_deeply(what, max_depth) from None
    if "\\u0000" in text and _JSON_NUL.search(text):  # the cheap test first
        raise NotSerializable(f"{what} cannot be stored: PostgreSQL cannot hold a NUL character")
    try:
        encoded = text.encode("utf-8")
    except UnicodeEncodeError:
        raise NotSerializable(
            f"{what} cannot be stored: it holds a lone surrogate, which is not valid Unicode"
        ) from None
    size = len(encoded)
    if size > max_bytes:
        raise InvalidArgument(
            f"{what} is {size:,} bytes as JSON, over pgbaton's limit of {max_bytes:,}: "
            "keep large data in a table and pass its id"
        )
    if _nested_deeper_than(encoded, max_depth):
        raise _nested_too_deeply(what, max_depth)
    return text


def to_json_many(values: Sequence[Any]) -> list[str] | None:
    """Each value's to_json text (under one job's limits, MAX_ARGS_BYTES and
    MAX_JSON_DEPTH), when every one passes to_json's checks; None when some value fails
    one, or might: to_json, value by value, then says which and why.

    For enqueue_many's large batches: one encoder call for all the values and a few
    passes in C over their text, where to_json runs its checks in Python for each
    value. Each check only clears a batch; whatever it cannot clear goes to to_json, so
    a value refused there is never taken here."""
    if _C_ENCODE is None:
        return None
    if not values:
        return []
    # One JSON array of the values with a string of one NUL between each two: an item's
    # text does not depend on where it stands, and the separator is text that no value
    # PostgreSQL can store writes (only a NUL is written so), so the array split at
    # each separator gives the values' texts, exactly when their count comes out right.
    spaced: list[Any] = [_NUL] * (2 * len(values) - 1)
    spaced[::2] = values
    try:
        texts = "".join(_C_ENCODE(spaced, 0))[1:-1].split(_NUL_SEPARATOR)
    except (TypeError, ValueError, RecursionError):
        return None  # not JSON, NaN, too deep or circular
    if len(texts) != len(values):
        return None
    return texts if _all_storable(texts) else None


_NUL = "\x00"
_NUL_SEPARATOR = ', "\\u0000", '


def _all_storable(texts: list[str]) -> bool:
    """Whether every JSON text passes to_json's checks after the encoding: no NUL, valid
    UTF-8, at most MAX_ARGS_BYTES and MAX_JSON_DEPTH."""
    joined = "".join(texts)
    # No text ends in a backslash, so a NUL's escape cannot start in one text and end in
    # the next: the pattern finds in the joined texts what it finds in each.
    if "\\u0000" in joined and _JSON_NUL.search(joined):
        return False
    if not joined.isascii():
        try:
            joined.encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate
            return False
    # A character is at most 4 bytes: only texts that could be over the limit are
    # measured. Nesting deeper than MAX_JSON_DEPTH takes more brackets than that, each
    # closed again: only texts longer than twice that can, and only those are looked at.
    longest = max(map(len, texts), default=0)
    if longest * 4 > MAX_ARGS_BYTES:
        long_texts = (text for text in texts if len(text) * 4 > MAX_ARGS_BYTES)
        if any(len(text.encode("utf-8")) > MAX_ARGS_BYTES for text in long_texts):
            return False
    if longest > 2 * MAX_JSON_DEPTH:
        long_texts = (text for text in texts if len(text) > 2 * MAX_JSON_DEPTH)
        if any(_nested_deeper_than(text.encode("utf-8"), MAX_JSON_DEPTH)
               for text in long_texts):
            return False
    return True


def _nested_too_deeply(what: str, max_depth: int) -> NotSerializable:
    return NotSerializable(
        f"{what} cannot be stored as JSON: it is nested too deeply "
        f"(more than {max_depth} levels)"
    )


def _nested_deeper_than(encoded: bytes, limit: int) -> bool:
    """Whether JSON text (UTF-8) nests more than `limit` arrays and objects, found with
    byte-string methods and simple patterns only (each a pass in C): this runs on every
    enqueue, and a batch of a thousand jobs costs well under a millisecond."""
    if encoded.count(b"[") + encoded.count(b"{") <= limit:
        return False  # the common case: too few brackets to nest that deep
    # Drop escaped backslashes and quotes, then all but brackets and quotes. Two quotes
    # side by side now end one string and open the next with no bracket between them
    # outside: dropping them merges two strings, so what stays inside strings is kept
    # apart from the nesting, and few quotes are left for the pattern to pair up.
    unescaped = encoded.replace(b"\\\\", b"").replace(b'\\"', b"")
    shape = unescaped.translate(None, _ALL_BUT_BRACKETS_AND_QUOTES).replace(b'""', b"")
    brackets = _JSON_STRING.sub(b"", shape) if b'"' in shape else shape
    # Each pass removes the innermost level everywhere, and only that: the pairs a pass
    # finds become a marker first, so a pair it exposes waits for the next pass.
    for _ in range(limit):
        if not brackets:
            return False
        brackets = (
            brackets.replace(b"[]", b"\0").replace(b"{}", b"\0").replace(b"\0", b"")
        )
    return bool(brackets)


_JSON_STRING = re.compile(rb'"[^"]*"')
_ALL_BUT_BRACKETS_AND_QUOTES = bytes(code for code in range(256) if code not in b'[]{}"')


def error_json(error: BaseException | str) -> str:
    """An attempt's error as stored in the job's `errors` list."""
    if isinstance(error, BaseException):
        entry = {
            "type": type(error).__name__,
            "message": _storable(str(error)),
            "traceback": _storable("".join(traceback.format_exception(error))),
        }
    elif isinstance(error, str):
        entry = {"type": "Error", "message": _storable(error)}
    else:
        raise InvalidArgument(f"error must be an exception or a string, got {error!r}")
    return json.dumps(entry, ensure_ascii=False)


def _storable(text: str) -> str:
    """An error text as PostgreSQL can keep it: a failure must never fail to be recorded."""
    text = text.replace("\x00", "\\x00")
    return text.encode("utf-8", "backslashreplace").decode("utf-8")
