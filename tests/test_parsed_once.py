"""The statements a pooled connection parses once are converted exactly as psycopg
converts them at every call (_parsed_once.py): the same query bytes, parameter order,
formats and types, from the cache as on the first call. A psycopg whose PostgresQuery
keeps its parse in other attributes fails here."""

from __future__ import annotations

import re

import psycopg
import pytest
from psycopg._queries import PostgresQuery
from psycopg.adapt import Transformer

from pgbaton import _parsed_once, _sql

_PLACEHOLDER = re.compile(r"%\((\w+)\)[sbt]")


def converted(query_class: type[PostgresQuery], text: str, params: dict[str, object]):
    query = query_class(Transformer())
    query.convert(text, params)
    return query.query, query.params, tuple(query.types), query.formats


def statements() -> list[tuple[str, str]]:
    return [(name, text) for name, text in sorted(_sql.queries("pgbaton").items())
            if _PLACEHOLDER.search(text)]


@pytest.mark.parametrize(("name", "text"), statements(), ids=[n for n, _ in statements()])
def test_a_statement_parsed_once_is_converted_as_psycopg_converts_it(name, text):
    names = sorted(set(_PLACEHOLDER.findall(text)))
    # Values of differing types, so that a parameter put in the wrong place shows.
    params = {n: (i if i % 2 else f"v{i}") for i, n in enumerate(names)}
    expected = converted(PostgresQuery, text, params)
    _parsed_once._PARSED.pop((text, "utf-8"), None)
    assert converted(_parsed_once.ParsedOnceQuery, text, params) == expected  # parsed
    assert (text, "utf-8") in _parsed_once._PARSED
    assert converted(_parsed_once.ParsedOnceQuery, text, params) == expected  # kept


def test_the_claim_is_longer_than_psycopg_keeps_and_is_kept_here():
    from psycopg._queries import MAX_CACHED_STATEMENT_LENGTH

    claim = _sql.queries("pgbaton")["job_claim_many"]
    assert len(claim.encode()) > MAX_CACHED_STATEMENT_LENGTH  # why this module exists
    converted(_parsed_once.ParsedOnceQuery, claim, dict.fromkeys(
        set(_PLACEHOLDER.findall(claim))))
    assert (claim, "utf-8") in _parsed_once._PARSED


def test_wrong_params_are_refused_from_the_cache_as_by_psycopg():
    text = _sql.queries("pgbaton")["job_claim_many"]
    converted(_parsed_once.ParsedOnceQuery, text, dict.fromkeys(
        set(_PLACEHOLDER.findall(text))))
    with pytest.raises(psycopg.ProgrammingError) as ours:
        converted(_parsed_once.ParsedOnceQuery, text, {"limit": 1})
    with pytest.raises(psycopg.ProgrammingError) as theirs:
        converted(PostgresQuery, text, {"limit": 1})
    assert str(ours.value) == str(theirs.value)


def test_text_that_is_not_a_str_and_calls_without_params_are_not_kept():
    before = dict(_parsed_once._PARSED)
    converted(_parsed_once.ParsedOnceQuery, "SELECT 1", None)  # type: ignore[arg-type]
    converted(_parsed_once.ParsedOnceQuery, b"SELECT %(a)s", {"a": 1})
    assert before == _parsed_once._PARSED


def test_a_full_cache_starts_again_and_takes_the_claim_back(monkeypatch):
    """Texts of a caller's own (an ORM's one-off VALUES lists through a pooled
    connection), or many schemas in one process, fill the cache: it then starts again
    rather than refusing every new text, so the claim is kept again at its next call."""
    monkeypatch.setattr(_parsed_once, "MAX_PARSED", 8)
    monkeypatch.setattr(_parsed_once, "_PARSED", {})
    for n in range(20):
        converted(_parsed_once.ParsedOnceQuery, f"SELECT %(a)s + {n}", {"a": 1})
        assert len(_parsed_once._PARSED) <= 8
    claim = _sql.queries("other_schema")["job_claim_many"]
    converted(_parsed_once.ParsedOnceQuery, claim, dict.fromkeys(
        set(_PLACEHOLDER.findall(claim))))
    assert (claim, "utf-8") in _parsed_once._PARSED
