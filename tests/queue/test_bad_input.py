"""Bad input gets a clear pgbaton error that names the problem, and nothing is written."""

from __future__ import annotations

import datetime as dt
import math
import re
import time
import uuid
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

import pgbaton
from tests.helpers import job_rows

UNREACHABLE = "postgresql://postgres:hunter2secret@127.0.0.1:1/test"
CLAIM_COLUMNS = ("id", "status", "attempts", "claim_token", "lease_until", "worker_id", "result")


def _count(db: psycopg.Connection[Any]) -> int:
    return int(db.execute("SELECT count(*) AS n FROM jobs").fetchone()["n"])  # type: ignore[index]


def _schemas(db: psycopg.Connection[Any]) -> list[str]:
    return [row["nspname"] for row in db.execute("SELECT nspname FROM pg_namespace")]


# -- arguments that JSON cannot hold ---------------------------------------------------


@pytest.mark.parametrize(
    ("args", "named"),
    [
        ({"when": dt.datetime(2024, 1, 1, tzinfo=dt.UTC)}, "datetime"),
        ({"ids": {1, 2}}, "set"),
        ({"ratio": math.nan}, "Out of range float"),
        ({"ratio": math.inf}, "Out of range float"),
        ({1: "one"}, "string keys"),
    ],
    ids=["datetime", "set", "nan", "inf", "int-key"],
)
def test_args_json_cannot_hold_raise_not_serializable_and_write_nothing(queue, db, args, named):
    """Arguments that JSON cannot hold raise NotSerializable naming the task and the
    offending value's kind, from enqueue and enqueue_many, and no row is written."""
    with pytest.raises(pgbaton.NotSerializable) as raised:
        queue.enqueue("resize_image", args)
    message = str(raised.value)
    assert "'resize_image'" in message and named in message
    assert isinstance(raised.value, TypeError) and isinstance(raised.value, ValueError)

    with pytest.raises(pgbaton.NotSerializable, match="resize_image"):
        queue.enqueue_many([{"task": "resize_image", "args": args}])
    assert _count(db) == 0


def test_args_that_are_not_a_mapping_are_refused(queue, db):
    """Positional arguments (a list) are refused with InvalidArgument naming the task."""
    with pytest.raises(pgbaton.InvalidArgument, match=r"'resize_image' must be a mapping"):
        queue.enqueue("resize_image", [1, 2])  # type: ignore[arg-type]
    assert _count(db) == 0


@pytest.mark.parametrize(
    "enqueue",
    [
        lambda q: q.enqueue("resize_image", {"name": "a\x00b"}),
        lambda q: q.enqueue("resize_image", {"name": "\ud800"}),
        lambda q: q.enqueue("resize\x00image"),
        lambda q: q.enqueue("resize_image", queue="img\x00"),
    ],
    ids=["nul-in-args", "lone-surrogate-in-args", "nul-in-task", "nul-in-queue"],
)
def test_text_postgresql_cannot_store_is_refused_by_pgbaton(queue, db, enqueue):
    """Text PostgreSQL cannot store (a NUL character, a lone surrogate) is refused with
    a pgbaton InvalidArgument, and no row is written."""
    with pytest.raises(pgbaton.InvalidArgument):
        enqueue(queue)
    assert _count(db) == 0


@pytest.mark.parametrize(
    "call",
    [
        lambda q, c: q.enqueue("t", priority=2**31),
        lambda q, c: q.enqueue("t", max_attempts=2**31),
        lambda q, c: q.enqueue("t", delay=math.nan),
        lambda q, c: q.enqueue("t", delay=math.inf),
        lambda q, c: q.enqueue("t", delay=1e300),
        lambda q, c: q.claim("w2", lease=math.inf),
        lambda q, c: q.claim("w2", lease=1e300),
        lambda q, c: q.heartbeat(c, lease=math.inf),
        lambda q, c: q.fail(c, "boom", retry_in=math.nan),
        lambda q, c: q.fail(c, "boom", retry_in=math.inf),
        lambda q, c: q.prune(retention=math.nan),
        lambda q, c: q.prune(retention=math.inf),
    ],
    ids=[
        "priority-2**31", "max_attempts-2**31", "delay-nan", "delay-inf", "delay-1e300",
        "claim-lease-inf", "claim-lease-1e300", "heartbeat-lease-inf",
        "retry_in-nan", "retry_in-inf", "prune-retention-nan", "prune-retention-inf",
    ],
)
def test_numbers_postgresql_cannot_store_are_refused_by_pgbaton(queue, db, call):
    """A number outside what PostgreSQL can store is refused with InvalidArgument before
    any statement runs, and no job changes."""
    queue.enqueue("held")
    queue.enqueue("waiting")
    [claim] = queue.claim("w1")
    before = job_rows(db, *CLAIM_COLUMNS)
    with pytest.raises(pgbaton.InvalidArgument):
        call(queue, claim)
    assert job_rows(db, *CLAIM_COLUMNS) == before


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"run_at": dt.datetime(2030, 1, 1)}, "timezone-aware"),
        ({"run_at": dt.datetime.now(dt.UTC), "delay": 5}, "run_at or delay"),
        ({"delay": -1}, "delay"),
        ({"priority": 1.5}, "priority"),
        ({"max_attempts": 0}, "max_attempts"),
        ({"queue": ""}, "queue"),
        ({"key": ""}, "key"),
    ],
    ids=["naive-run_at", "run_at-and-delay", "negative-delay", "float-priority",
         "zero-max_attempts", "empty-queue", "empty-key"],
)
def test_bad_enqueue_options_are_refused_by_name(queue, db, options, named):
    """Each bad enqueue option raises InvalidArgument naming the option; nothing written."""
    with pytest.raises(pgbaton.InvalidArgument, match=named):
        queue.enqueue("send_email", **options)
    assert _count(db) == 0


# -- enqueue_many is all or nothing ----------------------------------------------------


def test_one_bad_job_among_good_ones_writes_none_of_them(queue, db):
    """enqueue_many with one unserialisable job among good ones raises NotSerializable
    naming its position and task, and writes none of the jobs."""
    jobs = [
        {"task": "send_email", "args": {"to": "a@example.com"}},
        {"task": "send_email", "args": {"to": "b@example.com"}},
        {"task": "charge_card", "args": {"amount": object()}},
        {"task": "send_email", "args": {"to": "c@example.com"}},
    ]
    with pytest.raises(pgbaton.NotSerializable) as raised:
        queue.enqueue_many(jobs)
    assert "job 2" in str(raised.value) and "'charge_card'" in str(raised.value)
    assert _count(db) == 0


@pytest.mark.parametrize(
    ("bad", "named"),
    [
        ({"task": "t", "prio": 3}, "unknown fields ['prio']"),
        ({"args": {}}, "must be a mapping with a 'task'"),
        ({"task": "t", "max_attempts": -1}, "max_attempts"),
        ("send_email", "must be a mapping"),
    ],
    ids=["unknown-field", "no-task", "bad-max_attempts", "not-a-mapping"],
)
def test_an_invalid_job_among_good_ones_writes_none_of_them(queue, db, bad, named):
    """enqueue_many with one invalid job raises InvalidArgument naming its position and
    the problem, and writes none of the jobs."""
    with pytest.raises(pgbaton.InvalidArgument, match=re.escape(named)) as raised:
        queue.enqueue_many([{"task": "ok"}, bad, {"task": "ok"}])
    assert "job 1" in str(raised.value)
    assert _count(db) == 0


# -- statuses, leases and other call arguments -----------------------------------------


@pytest.mark.parametrize("status", ["finished", "DONE", ""])
def test_unknown_status_names_the_value_and_the_known_ones(queue, status):
    """Listing jobs by an unknown status raises InvalidArgument naming the value and
    every known status."""
    with pytest.raises(pgbaton.InvalidArgument) as raised:
        queue.jobs(status=status)
    message = str(raised.value)
    assert f"unknown status {status!r}" in message
    assert all(known in message for known in ("pending", "running", "done", "failed"))


@pytest.mark.parametrize("lease", [-5, 0, math.nan, True, "30"])
def test_a_lease_that_is_not_positive_claims_nothing(queue, db, lease):
    """claim() with a lease that is not a positive number raises InvalidArgument naming
    the lease, and the pending job stays untouched."""
    queue.enqueue("send_email")
    before = job_rows(db, *CLAIM_COLUMNS)
    with pytest.raises(pgbaton.InvalidArgument) as raised:
        queue.claim("w1", lease=lease)
    assert "lease" in str(raised.value) and repr(lease) in str(raised.value)
    assert job_rows(db, *CLAIM_COLUMNS) == before
    assert before[0][1:3] == ("pending", 0)


def test_a_negative_heartbeat_lease_leaves_the_lease_alone(queue, db):
    """heartbeat() with a negative lease raises InvalidArgument naming the lease and the
    job keeps its lease and claim."""
    queue.enqueue("send_email")
    [claim] = queue.claim("w1", lease=60)
    before = job_rows(db, *CLAIM_COLUMNS)
    with pytest.raises(pgbaton.InvalidArgument, match=r"lease must be a positive .* -1"):
        queue.heartbeat(claim, lease=-1)
    assert job_rows(db, *CLAIM_COLUMNS) == before
    assert queue.heartbeat(claim) == [True]


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"worker_id": ""}, "worker_id"),
        ({"limit": 0}, "limit"),
        ({"limit": 2.5}, "limit"),
        ({"queues": []}, "queues"),
        ({"queues": [""]}, "queues"),
    ],
    ids=["empty-worker_id", "zero-limit", "float-limit", "no-queues", "empty-queue-name"],
)
def test_bad_claim_arguments_claim_nothing(queue, db, options, named):
    """claim() with a bad worker id, limit or queue list raises InvalidArgument naming
    it, and the pending job stays untouched."""
    queue.enqueue("send_email")
    before = job_rows(db, *CLAIM_COLUMNS)
    call = {"worker_id": "w1", **options}
    with pytest.raises(pgbaton.InvalidArgument, match=named):
        queue.claim(call.pop("worker_id"), **call)
    assert job_rows(db, *CLAIM_COLUMNS) == before


def test_a_result_json_cannot_hold_leaves_the_job_running_and_held(queue, db):
    """complete() with an unserialisable result raises NotSerializable naming the job;
    the job stays running under the same claim, which can still complete it."""
    queue.enqueue("render", {"page": 1})
    queue.enqueue("render", {"page": 2})
    first, second = queue.claim("w1", limit=2)
    before = job_rows(db, *CLAIM_COLUMNS)

    with pytest.raises(pgbaton.NotSerializable, match=f"result of job {first.id}"):
        queue.complete(first, {"rendered_at": dt.datetime.now(dt.UTC)})
    # One bad result in a batch stops the whole batch: the good one is not completed.
    with pytest.raises(pgbaton.NotSerializable, match=f"result of job {second.id}"):
        queue.complete_many([(first, {"ok": True}), (second, {"bytes": b"\x89PNG"})])
    assert job_rows(db, *CLAIM_COLUMNS) == before

    assert queue.heartbeat([first, second]) == [True, True]
    assert queue.complete(first, {"ok": True}) is True
    assert job_rows(db, "status", "result")[0] == ("done", {"ok": True})


def test_bad_failure_arguments_leave_the_job_running(queue, db):
    """fail() with an error that is neither an exception nor a string, or a negative
    retry_in, raises InvalidArgument and the job stays running and held."""
    queue.enqueue("render")
    [claim] = queue.claim("w1")
    before = job_rows(db, *CLAIM_COLUMNS, "errors", "run_at")
    with pytest.raises(pgbaton.InvalidArgument, match="error must be an exception or a string"):
        queue.fail(claim, 42)  # type: ignore[arg-type]
    with pytest.raises(pgbaton.InvalidArgument, match="retry_in"):
        queue.fail(claim, "boom", retry_in=-1)
    with pytest.raises(pgbaton.InvalidArgument, match="expected a Claim"):
        queue.complete(claim.id)  # type: ignore[arg-type]
    assert job_rows(db, *CLAIM_COLUMNS, "errors", "run_at") == before


# -- idempotency keys ------------------------------------------------------------------


def test_an_idempotency_key_already_present_returns_the_existing_job(queue, db):
    """Enqueueing an idempotency key again returns the first job's id and writes nothing,
    even when the first job has already finished."""
    first = queue.enqueue("charge_card", {"amount": 10}, idempotency_key="order-7")
    again = queue.enqueue("charge_card", {"amount": 999}, idempotency_key="order-7")
    assert again == first
    assert _count(db) == 1

    [claim] = queue.claim("w1")
    assert claim.idempotency_key == "order-7"
    assert queue.complete(claim) is True
    assert queue.enqueue("charge_card", {"amount": 999}, idempotency_key="order-7") == first
    assert job_rows(db, "id", "status", "args") == [(first, "done", {"amount": 10})]


def test_enqueue_many_returns_existing_ids_for_known_keys_and_writes_only_new_jobs(queue, db):
    """enqueue_many returns the existing id for a key already present and for a key
    repeated within the batch, in input order, and writes one row per distinct key."""
    existing = queue.enqueue("charge_card", {"n": 0}, idempotency_key="k0")
    ids = queue.enqueue_many([
        {"task": "charge_card", "args": {"n": 1}, "idempotency_key": "k1"},
        {"task": "charge_card", "args": {"n": 2}, "idempotency_key": "k0"},
        {"task": "charge_card", "args": {"n": 3}, "idempotency_key": "k1"},
        {"task": "charge_card", "args": {"n": 4}},
    ])
    assert ids[1] == existing and ids[2] == ids[0]
    assert len(set(ids)) == 3
    assert job_rows(db, "id", "idempotency_key", "args") == sorted([
        (existing, "k0", {"n": 0}),
        (ids[0], "k1", {"n": 1}),
        (ids[3], None, {"n": 4}),
    ])


# -- where the database is, and which schema -------------------------------------------


def test_no_dsn_anywhere_names_all_three_sources(monkeypatch):
    """With no dsn argument and PGBATON_DSN and DATABASE_URL unset or empty, building a
    queue raises ConfigurationError naming all three places a DSN can come from."""
    monkeypatch.delenv("PGBATON_DSN", raising=False)
    monkeypatch.setenv("DATABASE_URL", "")
    for make in (pgbaton.Queue, pgbaton.AsyncQueue):
        with pytest.raises(pgbaton.ConfigurationError) as raised:
            make()
        message = str(raised.value)
        assert "dsn=" in message and "PGBATON_DSN" in message and "DATABASE_URL" in message


def test_dsn_comes_from_the_argument_then_pgbaton_dsn_then_database_url(monkeypatch):
    """The dsn argument wins over PGBATON_DSN, which wins over DATABASE_URL."""
    monkeypatch.setenv("PGBATON_DSN", "postgresql://from-pgbaton-dsn/db")
    monkeypatch.setenv("DATABASE_URL", "postgresql://from-database-url/db")
    assert pgbaton.Queue("postgresql://from-argument/db").dsn == "postgresql://from-argument/db"
    assert pgbaton.Queue().dsn == "postgresql://from-pgbaton-dsn/db"
    monkeypatch.delenv("PGBATON_DSN")
    assert pgbaton.Queue().dsn == "postgresql://from-database-url/db"


@pytest.mark.parametrize(
    "name",
    ["Jobs", "1jobs", "jobs; DROP SCHEMA public", 'a"b', "", "x" * 52, "pg-baton"],
)
def test_a_bad_schema_name_is_refused_before_connecting(dsn, db, name):
    """A schema name that is not a plain lower-case identifier raises ConfigurationError
    naming it, from the queue and from schema_sql(), and no schema is created."""
    with pytest.raises(pgbaton.ConfigurationError) as raised:
        pgbaton.Queue(dsn, schema=name)
    assert repr(name) in str(raised.value)
    with pytest.raises(pgbaton.ConfigurationError):
        pgbaton.AsyncQueue(dsn, schema=name)
    with pytest.raises(pgbaton.ConfigurationError):
        pgbaton.schema_sql(name)
    # Other tests may create schemas on the same server meanwhile: look for this one.
    assert name not in _schemas(db)


def test_an_unreachable_server_fails_fast_naming_the_host_not_the_password():
    """A DSN whose server refuses connections raises ConnectionFailed within seconds,
    naming the host and port and hiding the password, from every entry point."""
    queue = pgbaton.Queue(UNREACHABLE, schema="pgbaton")
    assert "hunter2secret" not in repr(queue)
    for call in (lambda: queue.enqueue("send_email"), queue.migrate, queue.schema_version):
        started = time.monotonic()
        with pytest.raises(pgbaton.ConnectionFailed) as raised:
            call()
        assert time.monotonic() - started < 5
        message = str(raised.value)
        assert "127.0.0.1:1/test" in message
        assert "hunter2secret" not in message and "***" in message
        assert "hunter2secret" not in str(raised.value.__cause__)


@pytest.mark.parametrize(
    "password",
    [
        "hunter2secret",
        "'hunter2 secret'",
    ],
    ids=["plain", "quoted-with-space"],
)
def test_an_unreachable_server_in_key_value_form_hides_the_password(password):
    """A key=value DSN that does not connect raises ConnectionFailed naming the host and
    hiding the password."""
    queue = pgbaton.Queue(
        f"host=127.0.0.1 port=1 dbname=test user=postgres password={password}",
        schema="pgbaton",
    )
    with pytest.raises(pgbaton.ConnectionFailed) as raised:
        queue.claim("w1")
    assert "host=127.0.0.1 port=1" in str(raised.value)
    for secret in ("hunter2", "secret"):
        assert secret not in str(raised.value) and secret not in repr(queue)


async def test_async_unreachable_server_fails_fast():
    """AsyncQueue against a server that refuses connections raises ConnectionFailed
    naming the host and hiding the password."""
    async with pgbaton.AsyncQueue(UNREACHABLE, schema="pgbaton") as queue:
        with pytest.raises(pgbaton.ConnectionFailed) as raised:
            await queue.enqueue("send_email")
    assert "127.0.0.1:1/test" in str(raised.value)
    assert "hunter2secret" not in str(raised.value)


def test_a_database_that_does_not_exist_is_named(dsn):
    """A DSN naming a database the server does not have raises ConnectionFailed whose
    message names that database."""
    missing = f"pgbaton_missing_{uuid.uuid4().hex[:8]}"
    with pytest.raises(pgbaton.ConnectionFailed, match=missing):
        pgbaton.Queue(make_conninfo(dsn, dbname=missing)).enqueue("send_email")


def test_enqueue_in_the_callers_transaction_refuses_an_unmigrated_schema(dsn, schema, db):
    """Enqueueing with conn= into an unmigrated schema raises SchemaNotMigrated and the
    caller's transaction is left usable."""
    with psycopg.connect(dsn) as conn, pgbaton.Queue(dsn, schema=schema) as queue:
        with pytest.raises(pgbaton.SchemaNotMigrated, match="pgbaton migrate"):
            queue.enqueue("send_email", conn=conn)
        assert conn.execute("SELECT 1").fetchone() == (1,)
    assert schema not in _schemas(db)
