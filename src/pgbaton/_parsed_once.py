"""pgbaton's statements parsed once per process, not at every call.

psycopg turns a statement's `%(name)s` placeholders into `$1, $2, ...` at every execute,
and keeps the result only for statements of up to 4,096 bytes
(`psycopg._queries.MAX_CACHED_STATEMENT_LENGTH`: longer ones are, it reasons, an ORM's
one-off `VALUES` lists). pgbaton's statements are a fixed set, read once from sql/*.sql,
and the longest is the hottest: the claim (13 kB with its comments when one statement
served every queue and named ones; each of the two is 6 to 8 kB now) took 38 µs of
the worker's CPU to parse at each claim, about 1.2 µs a job when a drain at concurrency
32 claims some 30 jobs at a time.

A pooled connection's cursors (`cursor_factory`) keep psycopg's own parse of each
statement they are given as a `str`, keyed by that text and the connection's encoding,
and hand it back at the next call: the same query bytes, parameter formats and order,
only not worked out again. psycopg's `PostgresQuery` has no public hook for this; the four
attributes kept here are what its `convert()` sets and its `dump()` reads, in psycopg 3.2
and 3.3. tests/test_parsed_once.py compares every statement's conversion with
psycopg's own, so a psycopg that changes them fails there, not in a worker; and should
one of them be missing at run time, the query falls back to psycopg's parse at every
call, as before.
"""

from __future__ import annotations

import contextlib
from typing import Any

import psycopg
from psycopg._queries import PostgresQuery

# pgbaton has about 180 statements per schema a process uses. A full cache starts
# again (texts of a caller's own sent through a pooled connection, a process serving
# many schemas): refusing new texts instead would leave the claim of a schema met late
# parsed at every call for good.
MAX_PARSED = 4_096

_PARSED: dict[tuple[str, str], tuple[Any, Any, Any, Any]] = {}


class ParsedOnceQuery(PostgresQuery):
    """psycopg's query conversion, done once per statement text."""

    __slots__ = ()

    def convert(self, query: Any, vars: Any) -> None:
        if vars is None or type(query) is not str:
            super().convert(query, vars)
            return
        key = (query, self._tx.encoding)
        parsed = _PARSED.get(key)
        if parsed is None:
            super().convert(query, vars)
            if len(_PARSED) >= MAX_PARSED:
                _PARSED.clear()
            # A psycopg that keeps them otherwise: parse at every call, as before.
            with contextlib.suppress(AttributeError):
                _PARSED[key] = (self.query, self._want_formats, self._order, self._parts)
            return
        self.query, self._want_formats, self._order, self._parts = parsed
        self.dump(vars)


class ParsedOnceAsyncCursor(psycopg.AsyncCursor[Any]):
    """An AsyncCursor whose statements are parsed once (ParsedOnceQuery)."""

    _query_cls = ParsedOnceQuery


class ParsedOnceCursor(psycopg.Cursor[Any]):
    """A Cursor whose statements are parsed once (ParsedOnceQuery)."""

    _query_cls = ParsedOnceQuery
