"""The limits of pgbaton.limits: each is refused with a one-line error before anything
is written, and everything within them is stored exactly as given.

The examples reproduce the defects of issue 10, item 7; the hypothesis tests generate
the shapes bad input takes in the wild: long, deeply nested, markup-like, pg_-prefixed.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import re
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import pgbaton
from pgbaton import limits
from tests.helpers import job_rows

FIXTURES_PER_TEST = settings(
    max_examples=60,
    deadline=None,
    # The queue and its schema are made once per test; each example adds at most a row.
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


def _count(db: psycopg.Connection[Any]) -> int:
    return int(db.execute("SELECT count(*) AS n FROM jobs").fetchone()["n"])  # type: ignore[index]


def _refused(call: Any, db: psycopg.Connection[Any], error: type[Exception], named: str) -> str:
    """Run call, which must raise `error` naming `named` on one line and write nothing."""
    before = _count(db)
    with pytest.raises(error) as raised:
        call()
    message = str(raised.value)
    assert named in message, message
    assert "\n" not in message and len(message) < 400, message
    assert _count(db) == before
    return message


def _nested(depth: int) -> dict[str, Any]:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return {"deep": value}


# -- the defects, one by one ----------------------------------------------------------


@pytest.mark.parametrize("name", ["pg_jobs", "pg_", "pg_toast"])
def test_a_schema_name_postgresql_reserves_is_refused(dsn, name):
    """Schema names starting with pg_ raise ConfigurationError naming the reserved prefix."""
    for make in (pgbaton.Queue, pgbaton.AsyncQueue, pgbaton.schema_sql):
        with pytest.raises(pgbaton.ConfigurationError, match="reserves names starting"):
            make(dsn, schema=name) if make is not pgbaton.schema_sql else make(name)


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"key": "k" * (limits.MAX_KEY_BYTES + 1)}, "key is 2,049 bytes"),
        ({"idempotency_key": "€" * 1000}, "idempotency_key is 3,000 bytes"),
        ({"queue": "q" * (limits.MAX_NAME_BYTES + 1)}, "queue is 256 bytes"),
        ({"queue": "q" * 9000, "delay": 5}, "queue is 9,000 bytes"),
    ],
    ids=["key", "multibyte-idempotency_key", "queue", "queue-too-long-for-notify-with-delay"],
)
def test_keys_and_names_too_long_for_their_index_or_notify_are_refused(queue, db, options, named):
    """Over-long keys, idempotency keys and queue names raise InvalidArgument giving the
    size and the limit, from enqueue and enqueue_many; nothing is written."""
    _refused(lambda: queue.enqueue("t", **options), db, pgbaton.InvalidArgument, named)
    _refused(
        lambda: queue.enqueue_many([{"task": "t"}, {"task": "t", **options}]),
        db, pgbaton.InvalidArgument, named,
    )


def test_the_longest_accepted_names_and_keys_fit_their_indexes(queue, db):
    """A task name, key and idempotency key each at its limit, multi-byte, are stored,
    claimed and deduplicated: the limits leave the indexes room."""
    task = "т" * (limits.MAX_NAME_BYTES // 2)
    key = "€" * (limits.MAX_KEY_BYTES // 3) + "kk"
    idem = "🙂" * (limits.MAX_KEY_BYTES // 4)
    queue_name = "q" * limits.MAX_NAME_BYTES
    first = queue.enqueue(task, queue=queue_name, key=key, idempotency_key=idem, delay=0)
    assert queue.enqueue(task, key=key, idempotency_key=idem) == first
    [claim] = queue.claim("w", queues=[queue_name], tasks=[task])
    assert (claim.id, claim.key, claim.idempotency_key) == (first, key, idem)


def test_args_over_the_size_limit_are_refused_and_so_are_results(queue, db):
    """Args of more than MAX_ARGS_BYTES as JSON raise InvalidArgument naming the task and
    both sizes; a result that large is refused and the job stays running and held."""
    big = {"blob": "x" * limits.MAX_ARGS_BYTES}
    _refused(lambda: queue.enqueue("ingest", big), db, pgbaton.InvalidArgument, "'ingest'")
    queue.enqueue("ingest")
    [claim] = queue.claim("w")
    _refused(lambda: queue.complete(claim, big), db, pgbaton.InvalidArgument, "16,777,216")
    assert queue.complete(claim, {"ok": True}) is True


def test_json_nested_up_to_the_depth_limit_is_stored_and_read_back(queue, db):
    """Args and a result nested exactly MAX_JSON_DEPTH levels are stored, claimed and read
    back as given, alone and in a batch."""
    args = _nested(limits.MAX_JSON_DEPTH - 1)  # {"deep": [...]}: one level more
    job_id = queue.enqueue("t", args)
    [batched] = queue.enqueue_many([{"task": "t", "args": args}])
    claims = queue.claim("w", limit=2)
    assert [c.args for c in claims] == [args, args]
    assert queue.complete(claims[0], args) is True
    stored = queue.get(job_id)
    assert stored is not None and stored.result == args and batched == claims[1].id


@pytest.mark.parametrize("depth", [limits.MAX_JSON_DEPTH, 1_000, 5_000])
def test_json_nested_thousands_deep_is_not_serializable_not_a_recursion_error(
    queue, db, depth
):
    """Args nested past MAX_JSON_DEPTH, up to thousands of levels, raise NotSerializable
    saying so, from enqueue and enqueue_many (naming the job), instead of a RecursionError
    when encoding, or one in every worker that later fetches the job; nothing is written."""
    args = _nested(depth)
    _refused(lambda: queue.enqueue("t", args), db, pgbaton.NotSerializable, "nested too deeply")
    _refused(
        lambda: queue.enqueue_many([{"task": "ok"}, {"task": "t", "args": args}]),
        db, pgbaton.NotSerializable, "job 1",
    )


@pytest.mark.parametrize(
    "call",
    [
        lambda q: q.cancel("abc"),
        lambda q: q.retry("1"),
        lambda q: q.get(True),
        lambda q: q.cancel(0),
        lambda q: q.get(2**63),
        lambda q: q.cancel(1.0),
    ],
    ids=["cancel-str", "retry-str", "get-bool", "cancel-zero", "get-beyond-bigint",
         "cancel-float"],
)
def test_a_job_id_that_is_not_one_is_refused(queue, db, call):
    """cancel, retry and get with something that is not a job id raise InvalidArgument
    naming it and the range of ids, instead of a database error."""
    queue.enqueue("t")
    before = job_rows(db, "status")
    _refused(lambda: call(queue), db, pgbaton.InvalidArgument,
             "job id must be a whole number from 1 to 9,223,372,036,854,775,807")
    assert job_rows(db, "status") == before


def test_the_largest_job_id_is_one(queue):
    """The top of bigint is a job id that no job has: looked up and not found."""
    assert queue.get(2**63 - 1) is None
    assert queue.cancel(2**63 - 1) is False


@pytest.mark.parametrize(
    ("filters", "named"),
    [({"queue": 5}, "queue"), ({"task": b"t"}, "task"), ({"queue": ""}, "queue")],
    ids=["queue-int", "task-bytes", "queue-empty"],
)
def test_listing_jobs_by_a_filter_that_is_not_a_name_is_refused(queue, filters, named):
    """jobs(queue=5) and the like raise InvalidArgument naming the filter."""
    with pytest.raises(pgbaton.InvalidArgument, match=named):
        queue.jobs(**filters)


@pytest.mark.parametrize(
    "run_at",
    [
        dt.datetime(1, 1, 1, tzinfo=dt.UTC),
        dt.datetime(1969, 12, 31, 23, 59, tzinfo=dt.UTC),
        dt.datetime.now(dt.UTC) + dt.timedelta(days=366 * 11),
        dt.datetime.max.replace(tzinfo=dt.UTC),
    ],
    ids=["year-1", "before-epoch", "eleven-years-ahead", "datetime-max"],
)
def test_run_at_outside_the_epoch_and_the_ten_year_horizon_is_refused(queue, db, run_at):
    """run_at before 1970 (which would jump the queue) or further ahead than delay may go
    is refused naming the bounds; nothing is written."""
    _refused(lambda: queue.enqueue("t", run_at=run_at), db, pgbaton.InvalidArgument, "run_at")
    _refused(
        lambda: queue.enqueue_many([{"task": "t", "run_at": run_at}]),
        db, pgbaton.InvalidArgument, "ten years",
    )


def test_run_at_within_the_bounds_is_stored(queue, db):
    """The epoch itself and nine years ahead are accepted and stored as given."""
    early = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
    late = dt.datetime.now(dt.UTC) + dt.timedelta(days=365 * 9)
    queue.enqueue("t", run_at=early)
    queue.enqueue("t", run_at=late)
    assert job_rows(db, "run_at") == [(early,), (late,)]


@pytest.mark.parametrize("grace", [math.nan, math.inf, -1.0, 1e300])
def test_a_shutdown_grace_that_is_not_a_duration_is_refused(grace):
    """The check the worker's configuration uses for --shutdown-grace refuses nan, inf,
    negative and absurd values naming the option."""
    from pgbaton._checks import check_seconds

    with pytest.raises(pgbaton.InvalidArgument, match="shutdown_grace"):
        check_seconds("shutdown_grace", grace)


# -- generated shapes -------------------------------------------------------------------

MARKUP = st.sampled_from([
    "<script>alert(1)</script>", "'; DROP TABLE jobs; --", "%(task)s", "{task}", "$1",
    "\\", '"', "<b>&amp;</b>", "\u202eevil", "🙂", "--", "/* */", "pg_catalog.jobs",
])
LONG = st.builds(
    lambda unit, count: unit * count,
    st.sampled_from(["x", "é", "€", "🙂"]),
    st.integers(50, 1_400),
)
PG_PREFIXED = st.text(alphabet="abcz_09", max_size=12).map(lambda s: "pg_" + s)
TEXTS = st.one_of(st.text(min_size=1, max_size=40), MARKUP, LONG, PG_PREFIXED)


def _storable(value: str) -> bool:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return "\x00" not in value


@FIXTURES_PER_TEST
@given(field=st.sampled_from(["task", "queue", "key", "idempotency_key"]), value=TEXTS)
def test_generated_names_and_keys_are_stored_exactly_or_refused_on_one_line(
    queue, db, field, value
):
    """Any generated task, queue, key or idempotency key is either stored exactly as given
    (markup and pg_ prefixes are only text) or, when too long or not storable, refused
    with one line of InvalidArgument and nothing written."""
    limit = limits.MAX_NAME_BYTES if field in ("task", "queue") else limits.MAX_KEY_BYTES
    options = {"task": "t", field: value}
    fits = _storable(value) and len(value.encode("utf-8", "surrogatepass")) <= limit
    if not fits:
        _refused(lambda: queue.enqueue(**options), db, pgbaton.InvalidArgument, field)
        return
    job_id = queue.enqueue(**options)
    stored = queue.get(job_id)
    assert stored is not None and getattr(stored, field) == value


@FIXTURES_PER_TEST
@given(
    depth=st.one_of(st.integers(0, 50), st.integers(150, 250), st.integers(900, 3_000)),
    leaf=st.one_of(MARKUP, LONG, st.integers(), st.none(), st.just([[["[{"]]])),
)
def test_generated_args_are_stored_exactly_or_refused_on_one_line(queue, db, depth, leaf):
    """Args nested up to MAX_JSON_DEPTH levels, holding markup-like, bracket-filled or
    long text, are stored exactly; deeper ones, up to thousands of levels, are refused as
    NotSerializable on one line and nothing is written, never with a RecursionError."""
    args: dict[str, Any] = {"leaf": leaf}
    for _ in range(depth):
        args = {"in": args}
    levels = depth + 1 + (3 if isinstance(leaf, list) else 0)
    if levels > limits.MAX_JSON_DEPTH:
        _refused(lambda: queue.enqueue("t", args), db, pgbaton.NotSerializable, "nested")
        return
    stored = queue.get(queue.enqueue("t", args))
    assert stored is not None and stored.args == args


@FIXTURES_PER_TEST
@given(name=st.one_of(PG_PREFIXED, MARKUP, LONG))
def test_generated_schema_names_are_refused_unless_plain_identifiers(dsn, name):
    """pg_-prefixed, markup-like and long schema names are refused with one line of
    ConfigurationError naming the value, before any connection is made; only a plain
    lower-case identifier of at most 51 characters that does not start with pg_ passes."""
    plain = re.fullmatch(r"[a-z_][a-z0-9_]{0,50}", name) and not name.startswith("pg_")
    if plain:
        assert pgbaton.Queue(dsn, schema=name).schema == name
        return
    with pytest.raises(pgbaton.ConfigurationError) as raised:
        pgbaton.Queue(dsn, schema=name)
    message = str(raised.value)
    assert "\n" not in message and "schema name" in message


def _depth(value: Any) -> int:
    if isinstance(value, dict):
        return 1 + max((_depth(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((_depth(v) for v in value), default=0)
    return 0


TRICKY_TEXT = st.sampled_from(["", "[", "]", "{", "}", '"', "\\", '\\"', '""', "[{}]", "a"])
JSON_VALUES = st.recursive(
    st.one_of(st.none(), st.integers(), TRICKY_TEXT, st.text(max_size=5)),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.dictionaries(st.one_of(TRICKY_TEXT, st.text(max_size=3)), inner, max_size=3),
    ),
    max_leaves=40,
)


@settings(max_examples=300, deadline=None)
@given(value=JSON_VALUES)
def test_the_depth_check_agrees_with_the_structure_it_was_encoded_from(value):
    """The byte-level depth check of to_json finds exactly the nesting of the value, for
    strings full of brackets, quotes and backslashes, at every limit around it."""
    from pgbaton._encoding import _nested_deeper_than

    encoded = json.dumps(value, ensure_ascii=False).encode()
    depth = _depth(value)
    for limit in {0, 1, max(depth - 1, 0), depth, depth + 1}:
        assert _nested_deeper_than(encoded, limit) is (depth > limit), (limit, depth)
