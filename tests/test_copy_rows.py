"""enqueue_many's COPY rows in COPY's text format (_copy_rows.py): each field escaped
so that the server reads back what was given, a batch of plain jobs checked a batch at
a time into the same text as job by job, and any other batch left to the checks that
name the job at fault. The round trip through the server: queue/test_enqueue_copy.py."""

from __future__ import annotations

import datetime as dt
import enum
import json
import re
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pgbaton._checks import many_job_params
from pgbaton._copy_rows import COPY_CHUNK_ROWS, CopyRows, copy_rows, plain_copy_rows

# Text that would break a hand-written COPY line: its delimiter, escapes and NULL marker,
# SQL, markup, and text beyond ASCII.
AWKWARD = [
    "tab\there", "new\nline", "carriage\rreturn", "back\\slash", "\\N", "\\.", "\\",
    "'); DROP TABLE jobs; --", "<script>alert(1)</script>", "&amp; \"quoted\"",
    "日本語 ✓ 🎉", "é\u0301", "\\u0000 as text", "\b\f\v\x1b", "",
]
TEXT = st.sampled_from(AWKWARD) | st.text(
    st.characters(exclude_characters="\x00", exclude_categories=["Cs"]))
NAME = TEXT.filter(bool).map(lambda text: text[:50])
ARGS = st.dictionaries(TEXT, st.none() | st.integers() | st.floats(allow_nan=False,
                       allow_infinity=False) | TEXT | st.lists(TEXT, max_size=3), max_size=4)

_UNESCAPE = {"\\\\": "\\", "\\t": "\t", "\\n": "\n", "\\r": "\r"}


def _fields(text: str) -> list[list[str | None]]:
    """COPY text read back as the server reads it: a row a line, a field a tab, \\N
    alone NULL, and the escapes pgbaton writes undone."""
    assert text.endswith("\n")
    return [
        [None if field == "\\N" else re.sub(r"\\[\\tnr]", lambda m: _UNESCAPE[m[0]], field)
         for field in line.split("\t")]
        for line in text[:-1].split("\n")
    ]


def _text(rows: CopyRows, ids: list[int], meta: str | None = None,
          now: dt.datetime | None = None) -> str:
    return "".join(rows.text(ids, meta, now))


def _general(jobs: list[Any]) -> CopyRows:
    return copy_rows(many_job_params(jobs, encode=False)["rows"])


@given(st.lists(st.tuples(NAME, ARGS), min_size=1, max_size=30))
def test_plain_jobs_come_out_as_the_job_by_job_text_and_read_back(pairs: Any) -> None:
    """Plain jobs, checked a batch at a time, give the text the job-by-job path gives,
    and each row reads back as the job's fields."""
    jobs = [{"task": task, "args": args} for task, args in pairs]
    plain = plain_copy_rows(jobs)
    assert plain is not None and len(plain) == len(jobs)
    ids = list(range(10, 10 + len(jobs)))
    meta = json.dumps({"traceparent": "00-a\\b-01"})
    assert _text(plain, ids, meta) == _text(_general(jobs), ids, meta)
    for job_id, job, fields in zip(ids, jobs, _fields(_text(plain, ids, meta)), strict=True):
        assert fields == [str(job_id), meta, "default", job["task"],
                          json.dumps(job["args"], ensure_ascii=False), "0", None, "5", None]


class Priority(enum.IntEnum):
    HIGH = 7


def test_every_option_reads_back_from_its_field() -> None:
    """The job-by-job path's columns: names, keys and limit keys escaped, numbers as
    digits (an IntEnum's too), NULL for what a job left out; run_at from the job, or
    now plus its delay, or now."""
    now = dt.datetime(2026, 12, 6, 12, 0, tzinfo=dt.UTC)
    at = now + dt.timedelta(days=1)
    jobs = [
        {"task": "a\tb", "args": {"k": "v\n"}, "queue": "q\\1", "priority": Priority.HIGH,
         "key": "k\r\n", "max_attempts": 9, "limit_key": "\\N", "run_at": at},
        {"task": "c", "delay": 1.5},
        {"task": "c"},
    ]
    rows = _general(jobs)
    assert rows.scheduled
    assert _fields(_text(rows, [1, 2, 3], None, now)) == [
        ["1", None, at.isoformat(), "q\\1", "a\tb", '{"k": "v\\n"}', "7", "k\r\n", "9", "\\N"],
        ["2", None, (now + dt.timedelta(seconds=1.5)).isoformat(), "default", "c",
         "{}", "0", None, "5", None],
        ["3", None, now.isoformat(), "default", "c", "{}", "0", None, "5", None],
    ]


def test_a_large_batch_comes_in_pieces_of_whole_rows() -> None:
    """The text comes COPY_CHUNK_ROWS rows at a time, each piece whole lines, the ids
    in order; ids that are not one a row are refused."""
    count = 2 * COPY_CHUNK_ROWS + 7
    jobs = [{"task": ("a", "b")[n % 2], "args": {"n": n}} for n in range(count)]
    rows = plain_copy_rows(jobs)
    assert rows is not None
    pieces = list(rows.text(list(range(count)), None, None))
    assert [piece.count("\n") for piece in pieces] == [COPY_CHUNK_ROWS, COPY_CHUNK_ROWS, 7]
    fields = _fields("".join(pieces))
    assert [row[0] for row in fields] == [str(n) for n in range(count)]
    assert [row[3] for row in fields] == [job["task"] for job in jobs]
    with pytest.raises(ValueError, match="ids for"):
        next(rows.text(list(range(count - 1)), None, None))


class Keys(dict):  # type: ignore[type-arg]
    pass


@pytest.mark.parametrize(
    "odd",
    [
        {"task": "t"},  # no args
        {"task": "t", "args": None},
        {"task": "t", "args": {"n": 1}, "priority": 1},
        {"task": "t", "label": "x"},
        {"task": "t", "args": Keys(n=1)},  # a mapping, not a dict
        Keys(task="t", args={}),
        {"task": "t", "args": [1]},
        {"task": "t", "args": {1: "x"}},  # json would write the key as "1"
        {"task": "", "args": {}},
        {"task": "nul\x00", "args": {}},
        {"task": "x" * 1000, "args": {}},
        {"task": ["t"], "args": {}},
        {"task": 1, "args": {}},
        {"job": "t", "args": {}},
        {"task": "t", "args": {"n": float("nan")}},
        {"task": "t", "args": {"n": "\x00"}},
        ("t", {}),
    ],
)
def test_a_batch_with_any_other_job_is_left_to_the_job_by_job_checks(odd: Any) -> None:
    """A job of another shape, or with a value that fails a check, anywhere in the
    batch: no rows, so that many_job_params and copy_rows take it and name the job."""
    jobs: list[Any] = [{"task": "t", "args": {"n": n}} for n in range(50)]
    jobs[30] = odd
    assert plain_copy_rows(jobs) is None
