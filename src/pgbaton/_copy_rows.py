"""The rows of enqueue_many's COPY (docs/explanation/architecture.md, "Large batches by
COPY") in COPY's text format, checked and built before anything is written.

A batch is kept column by column: a column every job has alike is one field, any
other a field per job, each already escaped for COPY. The rows are joined with the
reserved ids and the enqueue hook's `meta` a piece at a time as the COPY streams, by
passes in C over the columns rather than Python for every job and value (psycopg's
write_row formats each row value by value, through its adapters).

A batch of plain jobs, each a dict of a task and its args and nothing else (the usual
large batch), is checked a batch at a time too (plain_copy_rows); any other goes
through many_job_params, job by job, first (copy_rows).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import chain, repeat
from operator import itemgetter
from typing import Any, cast

from ._checks import JOB_DEFAULTS, check_name
from ._encoding import to_json, to_json_many
from .errors import InvalidArgument, NotSerializable

# Rows per piece of COPY text handed to the connection (psycopg splits a piece past
# 128 KiB further): a large batch is never held as one text.
COPY_CHUNK_ROWS = 1000

NULL = "\\N"
# COPY's text format: a backslash, the delimiter (tab), newline and carriage return must
# be escaped in a field. A field that is the text `\N` is written `\\N`, not read as NULL.
_COPY_ESCAPES = str.maketrans({"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r"})

Column = str | list[str]


def copy_field(value: str | None) -> str:
    """A text value as a field of COPY's text format (None: NULL)."""
    return NULL if value is None else value.translate(_COPY_ESCAPES)


def _json_fields(texts: list[str]) -> list[str]:
    """JSON texts as COPY fields: the encoder escapes every control character, so only
    the backslashes of its escapes need doubling."""
    joined = "\n".join(texts)  # JSON holds no raw newline: these keep the texts apart
    if "\\" not in joined:
        return texts
    return joined.replace("\\", "\\\\").split("\n")


@dataclass(frozen=True, slots=True)
class CopyRows:
    """A batch's COPY rows without their id, meta and run_at: `columns` hold the fields
    from queue to limit_key with the tabs between them and the newline after them, each
    one str alike for every job or a list of one str per job. `schedule`, when some job
    has a run_at or a delay: each job's run_at (ISO text) or None, and its delay."""

    count: int
    columns: tuple[Column, ...]
    schedule: list[tuple[str | None, float]] | None = None

    def __len__(self) -> int:
        return self.count

    @property
    def scheduled(self) -> bool:
        """Whether the batch goes by job_copy_scheduled (some job is due later)."""
        return self.schedule is not None

    def text(
        self, ids: Sequence[int], meta: str | None, now: dt.datetime | None
    ) -> Iterator[str]:
        """The COPY text of job_copy, or with now (the transaction's now())
        job_copy_scheduled's, COPY_CHUNK_ROWS rows at a time."""
        if len(ids) != self.count:
            raise ValueError(f"{len(ids)} ids for {self.count} rows")
        lead = f"\t{copy_field(meta)}\t"
        due = [] if now is None else [self._due(now)]
        columns = _merged([lead, *due, *self.columns])
        for start in range(0, self.count, COPY_CHUNK_ROWS):
            chunk = ids[start:start + COPY_CHUNK_ROWS]
            # Every piece one field a row (strict): a column short of the ids raises
            # instead of ending the rows early.
            pieces = [repeat(c, len(chunk)) if isinstance(c, str)
                      else c[start:start + len(chunk)] for c in columns]
            rows = zip(map(str, chunk), *pieces, strict=True)
            yield "".join(chain.from_iterable(rows))

    def _due(self, now: dt.datetime) -> list[str]:
        """Each row's run_at field: a job's own run_at, else now plus its delay, rounded
        to the microsecond as PostgreSQL's make_interval rounds it."""
        assert self.schedule is not None
        due_now = now.isoformat()
        fields = []
        for run_at, delay in self.schedule:
            if run_at is not None:
                when = run_at
            elif delay:
                when = (now + dt.timedelta(microseconds=round(delay * 1_000_000))).isoformat()
            else:
                when = due_now
            fields.append(f"{when}\t")
        return fields


def _merged(columns: Sequence[Column]) -> list[Column]:
    """Columns with each run of fields alike for every job joined into one."""
    merged: list[Column] = []
    for column in columns:
        if isinstance(column, str) and merged and isinstance(merged[-1], str):
            merged[-1] += column
        else:
            merged.append(column)
    return merged


def _column(values: list[Any], field: Callable[[Any], str]) -> Column:
    """One column's fields, each distinct value formatted once: one field when every
    job has the same value."""
    fields = {value: field(value) for value in set(values)}
    if len(fields) == 1:
        return next(iter(fields.values()))
    return list(map(fields.__getitem__, values))


def _number_field(value: int) -> str:
    return str(int(value))  # as a number: a subclass of int may print itself otherwise


# The fields of a job that leaves every option out, from queue to limit_key but the
# task and the args.
_DEFAULT_QUEUE = f"{copy_field(JOB_DEFAULTS['queue'])}\t"
_DEFAULT_REST = (
    f"\t{JOB_DEFAULTS['priority']}\t{copy_field(JOB_DEFAULTS['key'])}"
    f"\t{JOB_DEFAULTS['max_attempts']}\t{copy_field(JOB_DEFAULTS['limit_key'])}\n"
)
_TASK = itemgetter("task")
_ARGS = itemgetter("args")


def plain_copy_rows(jobs: Sequence[object]) -> CopyRows | None:
    """The COPY rows of a batch in which every job is a dict of exactly a "task" and
    its "args" (a dict), checked as many_job_params and copy_rows check them, but a
    batch at a time: each test is a pass in C over all the jobs, and each task name is
    checked once. None when some job is of another shape or some value fails a test
    (or might): many_job_params and copy_rows then check the jobs one by one, and
    name the one at fault as every other enqueue does."""
    plain = _tasks_and_args(jobs)
    texts = None if plain is None else to_json_many(plain[1])
    if plain is None or texts is None:
        return None
    return CopyRows(len(jobs), tuple(_merged([
        _DEFAULT_QUEUE, _column(plain[0], copy_field), "\t", _json_fields(texts),
        _DEFAULT_REST,
    ])))


def _tasks_and_args(jobs: Sequence[object]) -> tuple[list[str], list[dict[str, Any]]] | None:
    """Each job's task and args, when every job is a dict of a task name and its args
    (a dict with str keys) and nothing else; else None."""
    if set(map(type, jobs)) != {dict}:
        return None
    dicts = cast(Sequence[dict[str, Any]], jobs)
    if set(map(len, dicts)) != {2}:
        return None
    try:
        tasks = list(map(_TASK, dicts))
        args = list(map(_ARGS, dicts))
        if set(map(type, set(tasks))) != {str} or set(map(type, args)) != {dict}:
            return None
        for name in set(tasks):
            check_name("task", name)
        "".join(chain.from_iterable(args))  # a TypeError unless every key is a str
    except (KeyError, TypeError, InvalidArgument):
        # No task or no args, a task that is not hashable, a key that is not a str, a
        # task name check_name refuses.
        return None
    return tasks, args


def copy_rows(rows: Sequence[Mapping[str, Any]]) -> CopyRows:
    """The rows of many_job_params(encode=False) with JOB_DEFAULTS filled in, each job's
    args a JSON value of its own (COPY takes one value per row and column) under the
    limits of one job's args; all of them before anything is written."""
    texts = to_json_many([row["args"] for row in rows])
    if texts is None:
        texts = [_args_json(position, row) for position, row in enumerate(rows)]

    def values(name: str) -> list[Any]:
        default = JOB_DEFAULTS[name]
        return [row.get(name, default) for row in rows]

    schedule = None
    if any("run_at" in row or "delay" in row for row in rows):
        schedule = list(zip(values("run_at"), values("delay"), strict=True))
    columns = [
        _column(values("queue"), copy_field), "\t",
        _column([row["task"] for row in rows], copy_field), "\t",
        _json_fields(texts), "\t",
        _column(values("priority"), _number_field), "\t",
        _column(values("key"), copy_field), "\t",
        _column(values("max_attempts"), _number_field), "\t",
        _column(values("limit_key"), copy_field), "\n",
    ]
    return CopyRows(len(rows), tuple(_merged(columns)), schedule)


def _args_json(position: int, row: Mapping[str, Any]) -> str:
    """A job's args as JSON, or its error naming the job and its task."""
    try:
        return to_json(row["args"], f"args for task {row['task']!r}")
    except (InvalidArgument, NotSerializable) as error:
        raise type(error)(f"job {position}: {error}") from None
