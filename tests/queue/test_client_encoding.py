"""A connection whose client encoding cannot carry a job's text (LATIN1 has no euro
sign): every single-job enqueue (enqueue, with after=, an idempotency key or unique=,
enqueue_once, a task's enqueue) refuses it with one InvalidArgument naming the field
and the encoding, as enqueue_many does (tests/queue/test_enqueue_copy.py); psycopg
raises before the statement is sent, so nothing is written and a caller's transaction
stays usable. Each raised a bare UnicodeEncodeError. At the end, what a claim reads back
in these encodings, marked as failing where it is wrong (reported, not fixed)."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

import pgbaton
from pgbaton import Unique
from tests.helpers import in_client_encoding

# A field holding a character LATIN1 has not, and the error's words for it.
FIELDS = {
    "task": ({"task": "5 €"}, "task '5 €'"),
    "queue": ({"queue": "5 €"}, "queue '5 €'"),
    "key": ({"key": "5 €"}, "key '5 €'"),
    "limit_key": ({"limit_key": "5 €"}, "limit_key '5 €'"),
    "args": ({"args": {"price": "5 €"}}, "args for task 't'"),
    "idempotency_key": ({"idempotency_key": "5 €"}, "idempotency_key '5 €'"),
}

# Each single-job enqueue, as (call, options): enqueue_once takes an idempotency key
# or unique=; after= and unique= refuse one.
CALLS: dict[str, tuple[str, dict[str, Any]]] = {
    "enqueue": ("enqueue", {}),
    "enqueue-after": ("enqueue", {"after": "parent"}),
    "enqueue-unique": ("enqueue", {"unique": Unique()}),
    "enqueue_once": ("enqueue_once", {"idempotency_key": "once"}),
    "enqueue_once-unique": ("enqueue_once", {"unique": Unique()}),
}
CASES = [(call, field) for call, (_, options) in CALLS.items() for field in FIELDS
         if field != "idempotency_key" or not {"after", "unique"} & set(options)]
# AsyncQueue's calls on fewer fields: the naming is one function (_checks.unencodable),
# tried on every field above; here a column's text, the args and the idempotency key.
ASYNC_CASES = [(call, field) for call, field in CASES
               if field in ("task", "args", "idempotency_key")]


def _job(call: str, field: str, parent: int) -> tuple[str, dict[str, Any]]:
    """The method to call and its keywords: task "t", args with text LATIN1 carries,
    then the call's options and the field at fault."""
    method, options = CALLS[call]
    job: dict[str, Any] = {"task": "t", "args": {"price": "5 ¢"}, **options,
                           **FIELDS[field][0]}
    if job.get("after") == "parent":
        job["after"] = [parent]
    return method, job


def _refused(field: str) -> str:
    return (f"^{FIELDS[field][1]} cannot be sent: the connection's client encoding "
            "latin-1 has no '€' \\(U\\+20AC\\); nothing was written")


@pytest.mark.parametrize("via", ["pool", "conn"])
@pytest.mark.parametrize("case", CASES, ids="-".join)
def test_one_job_the_client_encoding_cannot_carry_is_named_and_nothing_is_written(
    queue, dsn, via, case
):
    """LATIN1 (the queue's DSN, or the caller's connection) and a euro sign in any of
    the job's text fields: InvalidArgument naming the field; the job enqueued before it
    in the caller's transaction stays, and the transaction commits."""
    call, field = case
    parent = queue.enqueue("parent")
    latin1_dsn = in_client_encoding(dsn, "LATIN1")
    with (pgbaton.Queue(latin1_dsn, schema=queue.schema) as theirs,
          psycopg.connect(latin1_dsn) as conn):
        assert conn.info.parameter_status("client_encoding") == "LATIN1"
        kept = theirs.enqueue("kept", {"text": "café"}, conn=conn)
        method, job = _job(call, field, parent)
        options = {"conn": conn} if via == "conn" else {}
        with pytest.raises(pgbaton.InvalidArgument, match=_refused(field)):
            getattr(theirs, method)(job.pop("task"), job.pop("args"), **job, **options)
        conn.commit()  # the caller's transaction is still usable
    assert sorted(job.id for job in queue.jobs()) == [parent, kept]


@pytest.mark.parametrize("via", ["pool", "conn"])
@pytest.mark.parametrize("case", ASYNC_CASES, ids="-".join)
async def test_one_async_job_the_client_encoding_cannot_carry_writes_nothing(
    aqueue, dsn, via, case
):
    """AsyncQueue's single-job enqueues refuse such a job as Queue's do."""
    call, field = case
    parent = await aqueue.enqueue("parent")
    latin1_dsn = in_client_encoding(dsn, "LATIN1")
    async with (pgbaton.AsyncQueue(latin1_dsn, schema=aqueue.schema) as theirs,
                await psycopg.AsyncConnection.connect(latin1_dsn) as conn):
        kept = await theirs.enqueue("kept", {"text": "café"}, conn=conn)
        method, job = _job(call, field, parent)
        options = {"conn": conn} if via == "conn" else {}
        with pytest.raises(pgbaton.InvalidArgument, match=_refused(field)):
            await getattr(theirs, method)(job.pop("task"), job.pop("args"), **job,
                                          **options)
        await conn.commit()
    assert sorted(job.id for job in await aqueue.jobs()) == [parent, kept]


def _app_task(dsn: str, schema: str, field: str) -> tuple[pgbaton.App, Any, dict[str, Any]]:
    """An App on `dsn` with one task (named "5 €" when the task is the field at
    fault), and the args and options of an enqueue with the field at fault."""
    app = pgbaton.App(dsn, schema=schema)

    def price(price: str) -> None: ...

    task = app.task(price, name="5 €" if field == "task" else "t")
    fields = {name: value for name, value in FIELDS[field][0].items() if name != "task"}
    return app, task, {"args": {"price": "5 ¢"}, **fields}


@pytest.mark.parametrize("via", ["pool", "conn"])
@pytest.mark.parametrize("field", ["task", "queue", "args"])
def test_a_tasks_enqueue_names_what_the_client_encoding_cannot_carry(
    queue, dsn, via, field
):
    """Task.enqueue and Task.enqueue_once (Queue's, through the App's queue)."""
    latin1_dsn = in_client_encoding(dsn, "LATIN1")
    app, task, job = _app_task(latin1_dsn, queue.schema, field)
    with psycopg.connect(latin1_dsn) as conn:
        kept = queue.enqueue("kept", conn=conn)
        options = {"conn": conn} if via == "conn" else {}
        args = job.pop("args")
        with pytest.raises(pgbaton.InvalidArgument, match=_refused(field)):
            task.enqueue(args, **job, **options)
        with pytest.raises(pgbaton.InvalidArgument, match=_refused(field)):
            task.enqueue_once(args, idempotency_key="once", **job, **options)
        conn.commit()
    app.queue.close()
    assert [job.id for job in queue.jobs()] == [kept]


@pytest.mark.parametrize("via", ["pool", "conn"])
@pytest.mark.parametrize("field", ["task", "queue", "args"])
async def test_a_tasks_async_enqueue_names_what_the_client_encoding_cannot_carry(
    aqueue, dsn, via, field
):
    """Task.enqueue_async and Task.enqueue_once_async (AsyncQueue's)."""
    latin1_dsn = in_client_encoding(dsn, "LATIN1")
    app, task, job = _app_task(latin1_dsn, aqueue.schema, field)
    async with await psycopg.AsyncConnection.connect(latin1_dsn) as conn:
        kept = await aqueue.enqueue("kept", conn=conn)
        options = {"conn": conn} if via == "conn" else {}
        args = job.pop("args")
        with pytest.raises(pgbaton.InvalidArgument, match=_refused(field)):
            await task.enqueue_async(args, **job, **options)
        with pytest.raises(pgbaton.InvalidArgument, match=_refused(field)):
            await task.enqueue_once_async(args, idempotency_key="once", **job, **options)
        await conn.commit()
    await app.async_queue.close()
    assert [job.id for job in await aqueue.jobs()] == [kept]


# -- what a claim reads back in these encodings (reported, not fixed) --------------------


@pytest.mark.xfail(strict=True, reason=(
    "under SQL_ASCII psycopg loads text columns as bytes: a claim's task is b't', and a "
    "worker on such a DSN fails every job with UnknownTask (reported, not fixed)"))
def test_a_claim_in_sql_ascii_reads_its_task_and_queue_as_text(queue, dsn):
    """A queue whose DSN sets client_encoding=SQL_ASCII claims a job: its names are str."""
    with pgbaton.Queue(in_client_encoding(dsn, "SQL_ASCII"), schema=queue.schema) as theirs:
        job_id = theirs.enqueue("t")
        claims = theirs.claim("w")
    assert [(claim.id, claim.task, claim.queue) for claim in claims] == [
        (job_id, "t", "default")]


@pytest.mark.xfail(strict=True, raises=UnicodeDecodeError, reason=(
    "jsonb is decoded as UTF-8 whatever the client encoding (pgbaton's JsonbBinaryLoader "
    "and psycopg's own loaders): under LATIN1 a claim of args beyond ASCII raises after "
    "the claim committed, and the job waits for its lease to run out (reported, not "
    "fixed)"))
def test_a_claim_in_latin1_reads_args_beyond_ascii(queue, dsn):
    """A queue whose DSN sets client_encoding=LATIN1 claims a job with a 'é' in its args."""
    with pgbaton.Queue(in_client_encoding(dsn, "LATIN1"), schema=queue.schema) as theirs:
        job_id = theirs.enqueue("t", {"text": "café"})
        claims = theirs.claim("w")
    assert [(claim.id, claim.args) for claim in claims] == [(job_id, {"text": "café"})]
