"""Argument checks, and the encoding of one job or many as statement parameters: every
value is judged here, before anything is written, with a one-line error naming it."""

from __future__ import annotations

import datetime as dt
import math
import re
import unicodedata
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import Any

from ._encoding import to_json
from .errors import InvalidArgument, NotSerializable
from .limits import (
    EARLIEST_RUN_AT,
    INT4_MAX,
    INT4_MIN,
    INT8_MAX,
    MAX_BATCH_BYTES,
    MAX_HISTORY_PARTITION_SECONDS,
    MAX_JSON_DEPTH,
    MAX_KEY_BYTES,
    MAX_NAME_BYTES,
    MAX_PROGRESS_NOTE_CHARS,
    MAX_SECONDS,
    MAX_TYPED_DIGITS,
    MIN_HISTORY_PARTITION_SECONDS,
)
from .models import DEFAULT_BACKOFF, STATES, Claim

# What a job gets for each enqueue option it leaves out. job_insert_many restores these
# with coalesce, so enqueue_many sends only the fields that differ from them.
JOB_DEFAULTS: Mapping[str, Any] = {
    "queue": "default",
    "priority": 0,
    "run_at": None,
    "delay": 0.0,
    "key": None,
    "idempotency_key": None,
    "max_attempts": 5,
    "limit_key": None,
}
ENQUEUE_OPTIONS = frozenset(JOB_DEFAULTS)


def check_text(name: str, value: str) -> str:
    """A name PostgreSQL can store as text (it must be a non-empty str already)."""
    if "\x00" in value:
        raise InvalidArgument(f"{name} cannot contain a NUL character: {value!r}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidArgument(f"{name} is not valid Unicode: {value!r}") from None
    return value


def check_name(name: str, value: object) -> str:
    """A task, queue or worker name: a non-empty str PostgreSQL can store, short enough
    for its index and for a NOTIFY payload."""
    if not isinstance(value, str) or not value:
        raise InvalidArgument(f"{name} must be a non-empty string, got {_brief(value)}")
    return _check_bytes(name, check_text(name, value), MAX_NAME_BYTES)


def check_key(name: str, value: object) -> str | None:
    """A `key` or `idempotency_key`: None, or a non-empty str short enough for its index."""
    if value is None:
        return None
    if not isinstance(value, str) or not value:
        raise InvalidArgument(f"{name} must be a non-empty string or None, got {_brief(value)}")
    return _check_bytes(name, check_text(name, value), MAX_KEY_BYTES)


def _check_bytes(name: str, value: str, limit: int) -> str:
    # Characters are at most 4 bytes: most values pass without being encoded.
    if len(value) * 4 > limit and len(value.encode("utf-8")) > limit:
        raise InvalidArgument(
            f"{name} is {len(value.encode('utf-8')):,} bytes long, over pgbaton's limit "
            f"of {limit:,}: {_brief(value)}"
        )
    return value


def check_ascii(what: str, text: str) -> str:
    """Text of a number written in ASCII: int(), float() and a regular expression's
    \\d also take the digits of other scripts (U+FF15, a full-width five), which nobody
    means to type and which show as other than what is stored. Names the first one."""
    if not text.isascii():
        char = next(c for c in text if not c.isascii())
        name = unicodedata.name(char, "a character without a name")
        raise InvalidArgument(
            f"{what} holds {char!r} (U+{ord(char):04X} {name}), which is not ASCII: write "
            "numbers with the digits 0-9"
        )
    return text


_WHOLE = re.compile(r"[+-]?[0-9]+", re.ASCII)
_NUMBER = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?", re.ASCII)


def parse_whole(what: str, text: str) -> int:
    """A whole number typed by a user: ASCII digits with an optional sign, and nothing
    else but spaces around them (no '_', no '1.0'); InvalidArgument naming `what`."""
    check_ascii(what, text)
    if not _WHOLE.fullmatch(text.strip()):
        raise InvalidArgument(f"{what} must be a whole number, got {_brief(text)}")
    digits = text.strip().lstrip("+-").lstrip("0")
    if len(digits) > MAX_TYPED_DIGITS:
        raise InvalidArgument(f"{what} is out of range: {len(digits):,} digits")
    return int(text)


def parse_number(what: str, text: str) -> float:
    """A finite decimal number typed by a user, in ASCII ('1.5', '2e3'; not 'nan',
    'inf' or '1_000'); InvalidArgument naming `what`."""
    check_ascii(what, text)
    if not _NUMBER.fullmatch(text.strip()):
        raise InvalidArgument(f"{what} must be a number, got {_brief(text)}")
    value = float(text)
    if not math.isfinite(value):
        raise InvalidArgument(f"{what} is out of range: {_brief(text)}")
    return value


def _brief(value: object) -> str:
    """A value's repr short enough for a one-line error message."""
    text = repr(value)
    return text if len(text) <= 60 else f"{text[:40]}...{text[-12:]} ({len(text):,} chars)"


def check_job_id(job_id: object) -> int:
    if (
        isinstance(job_id, bool)
        or not isinstance(job_id, int)
        or not 1 <= job_id <= INT8_MAX
    ):
        raise InvalidArgument(
            f"a job id must be a whole number from 1 to {INT8_MAX:,}, got {_brief(job_id)}"
        )
    return job_id


def check_run_at(run_at: object) -> dt.datetime:
    """A timezone-aware datetime from the Unix epoch to MAX_SECONDS from now."""
    if not isinstance(run_at, dt.datetime) or run_at.tzinfo is None:
        raise InvalidArgument(f"run_at must be a timezone-aware datetime, got {_brief(run_at)}")
    latest = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=MAX_SECONDS)
    if not EARLIEST_RUN_AT <= run_at <= latest:
        raise InvalidArgument(
            f"run_at must lie between {EARLIEST_RUN_AT:%Y-%m-%d} and ten years from now "
            f"(the same bound as delay), got {run_at.isoformat()}"
        )
    return run_at


def check_int4(name: str, value: int, minimum: int = INT4_MIN) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= INT4_MAX:
        raise InvalidArgument(
            f"{name} must be a whole number from {minimum} to {INT4_MAX}, got {value!r}"
        )
    return value


def check_seconds(name: str, value: float, *, positive: bool = False) -> float:
    """A finite duration PostgreSQL's intervals can hold: >= 0 (or > 0), at most 10 years."""
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value < 0
        or (positive and value == 0)
        or value > MAX_SECONDS
    ):
        bound = "positive" if positive else ">= 0"
        raise InvalidArgument(
            f"{name} must be a {bound} number of seconds, at most ten years, got {value!r}"
        )
    return float(value)


def check_tokens(name: str, tokens: Iterable[uuid.UUID] | None) -> list[uuid.UUID] | None:
    """Claim tokens (a claim's `finished`): UUIDs only; None or none given: None."""
    if tokens is None:
        return None
    checked = list(tokens)
    for token in checked:
        if not isinstance(token, uuid.UUID):
            raise InvalidArgument(f"{name} must hold claim tokens (uuid.UUID), "
                                  f"got {token!r}")
    return checked or None


def check_partition_width(name: str, value: float) -> float:
    """A jobs_history partition's width in seconds: whole minutes, a minute to a month."""
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or not MIN_HISTORY_PARTITION_SECONDS <= value <= MAX_HISTORY_PARTITION_SECONDS
        or value % 60 != 0
    ):
        raise InvalidArgument(
            f"{name} must be a whole number of minutes in seconds, from "
            f"{MIN_HISTORY_PARTITION_SECONDS} (a minute) to {MAX_HISTORY_PARTITION_SECONDS} "
            f"(31 days), got {value!r}"
        )
    return float(value)


def check_lease(lease: float) -> float:
    return check_seconds("lease", lease, positive=True)


def check_status(status: str | None) -> str | None:
    if status is not None and status not in STATES:
        raise InvalidArgument(
            f"unknown status {status!r}: use one of {', '.join(STATES)}"
        )
    return status


def check_queues(queues: Iterable[str] | None) -> list[str] | None:
    return _check_names("queues", "queue", queues)


def check_tasks(tasks: Iterable[str] | None) -> list[str] | None:
    return _check_names("tasks", "task", tasks)


def _check_names(what: str, each: str, names: Iterable[str] | None) -> list[str] | None:
    """None (no filter), or a non-empty list of names; one name alone is a list of one."""
    if names is None:
        return None
    if isinstance(names, str):
        names = [names]
    try:
        listed = list(names)
    except TypeError:
        raise InvalidArgument(
            f"{what} must be a list of {each} names or None, got {_brief(names)}"
        ) from None
    if not listed or not all(isinstance(name, str) and name for name in listed):
        raise InvalidArgument(
            f"{what} must be a non-empty list of {each} names or None, got {_brief(listed)}"
        )
    for name in listed:
        check_name(each, name)
    return listed


def check_filter(name: str, value: object) -> str | None:
    """An optional name to list jobs by (jobs(queue=..., task=...))."""
    return None if value is None else check_name(name, value)


def check_limit(limit: int) -> int:
    return check_int4("limit", limit, minimum=1)


def job_params(
    task: str,
    args: Mapping[str, Any] | None = None,
    *,
    queue: str = "default",
    priority: int = 0,
    run_at: dt.datetime | None = None,
    delay: float | None = None,
    key: str | None = None,
    idempotency_key: str | None = None,
    max_attempts: int = 5,
    encode_args: bool = True,
    limit_key: str | None = None,
) -> dict[str, Any]:
    """Check one job's fields and encode them as statement parameters (args as JSON text,
    unless encode_args is false: enqueue_many encodes all jobs in one document)."""
    check_name("task", task)
    if args is None:
        args = {}
    if not isinstance(args, Mapping):
        raise InvalidArgument(
            f"args for task {task!r} must be a mapping of keyword arguments, "
            f"got {type(args).__name__}"
        )
    if not all(isinstance(name, str) for name in args):
        raise NotSerializable(f"args for task {task!r} must have string keys")
    check_name("queue", queue)
    check_int4("priority", priority)
    if run_at is not None and delay is not None:
        raise InvalidArgument("give run_at or delay, not both")
    if run_at is not None:
        check_run_at(run_at)
    if delay is not None:
        check_seconds("delay", delay)
    check_key("key", key)
    check_key("idempotency_key", idempotency_key)
    check_int4("max_attempts", max_attempts, minimum=1)
    check_key("limit_key", limit_key)
    return {
        "queue": queue,
        "task": task,
        "args": to_json(dict(args), f"args for task {task!r}") if encode_args else dict(args),
        "priority": priority,
        "run_at": run_at,
        "delay": float(delay or 0.0),
        "key": key,
        "idempotency_key": idempotency_key,
        "max_attempts": max_attempts,
        "limit_key": limit_key,
    }


def many_job_params(
    jobs: Iterable[Mapping[str, Any]], *, encode: bool = True
) -> dict[str, Any]:
    """Check every job before any is written; encode them all as one JSON array in
    which each job carries only what differs from JOB_DEFAULTS. With encode false the
    checked jobs come back unencoded as "rows", for copy_rows. A job's `unique`
    (docs/howto/unique.md) is taken out of its row into "uniques", by position."""
    rows: list[dict[str, Any]] = []
    uniques: dict[int, Any] = {}
    known_tasks: set[str] = set()
    queues: set[str] = set()  # the batch's queue when it has one (the tracing span's)
    idempotency_keys = False
    for position, job in enumerate(jobs):
        if (
            type(job) is dict
            and len(job) == 2
            and type(task := job.get("task")) is str
            and task in known_tasks
            and type(args := job.get("args")) is dict
            and all(type(name) is str for name in args)
        ):
            # The common case, {"task": ..., "args": {...}} for a task already checked:
            # the full check below would only find the same again.
            rows.append(job)
            queues.add("default")
            continue
        if not isinstance(job, Mapping) or "task" not in job:
            raise InvalidArgument(f"job {position} must be a mapping with a 'task'")
        unknown = job.keys() - ENQUEUE_OPTIONS - {"task", "args", "unique"}
        if unknown:
            raise InvalidArgument(
                f"job {position} has unknown fields {sorted(unknown)}; allowed: task, args, "
                f"{', '.join(sorted(ENQUEUE_OPTIONS))}, unique"
            )
        fields = job
        if "unique" in job:
            if job["unique"] is not None:
                uniques[position] = job["unique"]
            fields = {name: value for name, value in job.items() if name != "unique"}
        try:
            row = job_params(**fields, encode_args=False)
        except InvalidArgument as error:
            raise type(error)(f"job {position}: {error}") from None
        known_tasks.add(row["task"])
        queues.add(row["queue"])
        idempotency_keys = idempotency_keys or row["idempotency_key"] is not None
        if row["run_at"] is not None:
            row["run_at"] = row["run_at"].isoformat()
        rows.append({
            name: value for name, value in row.items()
            if name not in JOB_DEFAULTS or value != JOB_DEFAULTS[name]
        })
    checked = {"count": len(rows), "idempotency_keys": idempotency_keys, "uniques": uniques,
               "queue": next(iter(queues)) if len(queues) == 1 else None, "rows": rows}
    return encode_job_rows(checked) if encode else checked


def encode_job_rows(checked: Mapping[str, Any]) -> dict[str, Any]:
    """many_job_params(encode=False)'s jobs as job_insert_many's one JSON document."""
    rows = checked["rows"]
    try:
        # Each job's args sit two levels down: in the list, in the job's object.
        document = to_json(rows, "the batch of jobs", MAX_BATCH_BYTES, MAX_JSON_DEPTH + 2)
    except NotSerializable:
        # Name the job at fault: encode each one's args alone until one fails.
        for position, row in enumerate(rows):
            try:
                to_json(row["args"], f"args for task {row['task']!r}")
            except NotSerializable as error:
                raise NotSerializable(f"job {position}: {error}") from None
        raise
    return {**{k: v for k, v in checked.items() if k != "rows"}, "jobs": document}


# A job's fields that are sent as text, in the order unencodable looks at them.
_TEXT_FIELDS = ("task", "queue", "key", "idempotency_key", "limit_key", "args")


def unencodable(
    jobs: Iterable[object], error: UnicodeEncodeError, *, numbered: bool = True
) -> InvalidArgument | None:
    """The error for jobs that psycopg could not encode in its connection's client
    encoding (`error`: LATIN1 has no euro sign, say; SQL_ASCII takes any text, as
    UTF-8): the first job and field that holds such a character, or None when no
    job's does. psycopg raises it before the statement is sent, or inside a COPY,
    which it fails: nothing was written. numbered=False for one job: its position
    left out of the message."""
    for position, job in enumerate(jobs):
        if not isinstance(job, Mapping):
            continue
        for name in _TEXT_FIELDS:
            value = job.get(name)
            if name == "args" and value is not None:
                try:
                    value = to_json(value, "args")  # as sent; checked already
                except InvalidArgument:
                    continue
            if not isinstance(value, str):
                continue
            try:
                value.encode(error.encoding)
            except UnicodeEncodeError as found:
                char = found.object[found.start]
                what = (f"args for task {job.get('task')!r}" if name == "args"
                        else f"{name} {_brief(value)}")
                return InvalidArgument(
                    f"{f'job {position}: ' if numbered else ''}{what} cannot be sent: "
                    f"the connection's client encoding {error.encoding} has no "
                    f"{char!r} (U+{ord(char):04X}); nothing was written "
                    "(client_encoding UTF8 carries any text)"
                )
    return None


@contextmanager
def encodable(jobs: Sequence[object], *, numbered: bool = True) -> Iterator[None]:
    """Around an enqueue of `jobs`: the bare UnicodeEncodeError psycopg raises for text
    the connection's client encoding lacks becomes unencodable's InvalidArgument (or
    goes on as it is when no job's text holds the character)."""
    try:
        yield
    except UnicodeEncodeError as error:
        refused = unencodable(jobs, error, numbered=numbered)
        if refused is None:
            raise
        raise refused from None


def encodable_job(**text: Any) -> AbstractContextManager[None]:
    """encodable around the enqueue of one job, given its text fields (task, args,
    queue, key, idempotency_key, limit_key): psycopg encodes them in the connection's
    client encoding, which may lack a character; the message names the field."""
    return encodable([text], numbered=False)


def retry_delay(attempts: int, retry_in: float | None) -> float:
    """Seconds before the next attempt: retry_in when given, else the default backoff."""
    if retry_in is None:
        return DEFAULT_BACKOFF(attempts)
    return check_seconds("retry_in", retry_in)


def held_params(claims: Iterable[Claim]) -> dict[str, list[Any]]:
    claims = list(claims)
    for claim in claims:
        if not isinstance(claim, Claim):
            raise InvalidArgument(f"expected a Claim from claim(), got {claim!r}")
    return {"ids": [c.id for c in claims], "tokens": [c.token for c in claims]}


def as_claim_list(claim_or_claims: Claim | Iterable[Claim]) -> list[Claim]:
    if isinstance(claim_or_claims, Claim):
        return [claim_or_claims]
    return list(claim_or_claims)


def check_progress(fraction: object, note: object) -> tuple[float | None, str | None]:
    """ctx.progress's arguments: a fraction in 0..1 (None: not known) and a short note
    that a text column can hold (docs/howto/progress-and-logs.md)."""
    if fraction is not None:
        if isinstance(fraction, bool) or not isinstance(fraction, int | float):
            raise InvalidArgument(
                f"progress fraction must be a number between 0 and 1 or None, got "
                f"{_brief(fraction)}"
            )
        if not 0 <= fraction <= 1:  # NaN fails both comparisons
            raise InvalidArgument(
                f"progress fraction must be between 0 and 1, got {fraction!r}"
            )
        fraction = float(fraction)
    if note is not None:
        if not isinstance(note, str):
            raise InvalidArgument(f"progress note must be a string or None, got {_brief(note)}")
        if len(note) > MAX_PROGRESS_NOTE_CHARS:
            raise InvalidArgument(
                f"progress note must be at most {MAX_PROGRESS_NOTE_CHARS} characters, got "
                f"{len(note):,}"
            )
        check_text("progress note", note)
    return fraction, note

