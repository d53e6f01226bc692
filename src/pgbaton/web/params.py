"""Query parameters and form fields to what the statements take, or a BadInput that
names the parameter and what was wrong (answered with 400, nothing written)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from urllib.parse import urlencode

from ..actions import Action, action_of_word
from ..errors import InvalidArgument
from ..job_filter import FILTER_FIELDS, JobFilter, filter_of
from ..limits import INT4_MAX, INT4_MIN, INT8_MAX, MAX_DASHBOARD_PAGE

DEFAULT_PAGE = 50


class BadInput(ValueError):
    """A request parameter the dashboard cannot use; the message names it."""


def job_filter(params: Mapping[str, str], selected: list[str] | None = None) -> JobFilter:
    """The job filter of a request's query (or a bulk form's fields); `q` is its text,
    `ids` a selection of job ids, comma-separated (`selected`: each checked row's
    `ids`, a form's repeated field, joined in)."""
    fields = {name: params.get("q" if name == "text" else name) for name in FILTER_FIELDS}
    try:
        found = filter_of(fields)
        texts = selected if selected is not None else [params.get("ids") or ""]
        words = [w.strip() for text in texts for w in text.split(",") if w.strip()]
        if not words:
            return found
        return dataclasses.replace(found, ids=tuple(
            whole_number("ids", word, minimum=1, maximum=INT8_MAX) for word in words))
    except InvalidArgument as error:
        raise BadInput(str(error)) from None


def filter_query(job_filter: JobFilter) -> dict[str, str]:
    """A filter back to query parameters, for links and the bulk form."""
    fields = job_filter.params()
    query = {
        "status": fields["status"], "queue": fields["queue"], "task": fields["task"],
        "key": fields["key"], "q": fields["text"],
        "since": fields["since"].isoformat() if fields["since"] else None,
        "until": fields["until"].isoformat() if fields["until"] else None,
        "ids": ",".join(map(str, fields["ids"])) if fields["ids"] else None,
    }
    return {name: value for name, value in query.items() if value}


def encode(query: Mapping[str, str | int | None]) -> str:
    return urlencode({k: v for k, v in query.items() if v not in (None, "")})


def whole_number(name: str, text: str | None, *, minimum: int, maximum: int) -> int:
    try:
        value = int(text or "")
    except ValueError:
        raise BadInput(f"{name}={text!r} is not a whole number") from None
    if not minimum <= value <= maximum:
        raise BadInput(f"{name}={value} is out of range: use {minimum} to {maximum}")
    return value


def page_size(params: Mapping[str, str]) -> int:
    text = params.get("limit")
    if text is None or text == "":
        return DEFAULT_PAGE
    return whole_number("limit", text, minimum=1, maximum=MAX_DASHBOARD_PAGE)


def cursor(params: Mapping[str, str]) -> int | None:
    text = params.get("before")
    if text is None or text == "":
        return None
    return whole_number("before", text, minimum=1, maximum=INT8_MAX)


def action(word: str) -> Action:
    """The action of a URL word (/jobs/<id>/run-now, a bulk form's action=run-now)."""
    try:
        return action_of_word(word)
    except InvalidArgument as error:
        raise BadInput(str(error)) from None


def priority(text: str | None) -> int:
    return whole_number("priority", text, minimum=INT4_MIN, maximum=INT4_MAX)
