"""The SQL API (docs/reference/sql.md, "The SQL API"): enqueue and enqueue_many write
the jobs the Python path writes, refuse what it refuses with a message naming the
problem and nothing written, and work from a trigger."""

from __future__ import annotations

import datetime as dt
import json
import re
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.types.json import Jsonb

import pgbaton
from pgbaton import limits

ROOT = Path(__file__).resolve().parents[2]
COLUMNS = ("queue", "task", "args", "status", "priority", "attempts", "max_attempts", "key",
           "idempotency_key", "limit_key", "errors", "result", "meta", "waiting_for")


def call(db: psycopg.Connection[Any], schema: str, query: str, *params: Any) -> Any:
    row = db.execute(query.replace("__schema__", f'"{schema}"'), params).fetchone()
    assert row is not None
    return next(iter(row.values()))


def count(db: psycopg.Connection[Any]) -> int:
    return int(db.execute("SELECT count(*) AS n FROM jobs").fetchone()["n"])  # type: ignore[index]


def row_of(db: psycopg.Connection[Any], job_id: int) -> dict[str, Any]:
    row = db.execute(f"SELECT {', '.join(COLUMNS)} FROM jobs WHERE id = %s", (job_id,))
    return dict(row.fetchone() or {})


def test_a_whole_call_enqueues_the_job_the_python_path_enqueues(queue, schema, db):
    """`SELECT enqueue('send_receipt', '{"order_id": 7}')` returns the id of a job equal,
    column by column, to Queue.enqueue's; so do calls with every option."""
    sql_id = call(db, schema, """SELECT __schema__.enqueue('send_receipt', '{"order_id": 7}')""")
    py_id = queue.enqueue("send_receipt", {"order_id": 7})
    assert sql_id == py_id - 1
    assert row_of(db, sql_id) == row_of(db, py_id)
    options = {"queue": "mail", "priority": -3, "key": "customer-9",
               "idempotency_key": "receipt-7", "max_attempts": 2, "limit_key": "tenant"}
    sql_id = call(db, schema, "SELECT __schema__.enqueue(%s, %s, queue => %s, priority => %s,"
                  " key => %s, idempotency_key => %s, max_attempts => %s, limit_key => %s,"
                  " delay => 60)", "a", Jsonb({"n": [1, "x"]}), *options.values())
    # Another task: the previous release's global index keeps a key to one task.
    py_id = queue.enqueue("b", {"n": [1, "x"]}, delay=60, **{**options,
                                                            "idempotency_key": "receipt-8"})
    assert {**row_of(db, sql_id), "task": "b", "idempotency_key": "receipt-8"} == row_of(
        db, py_id)
    due = db.execute("SELECT id, run_at - created_at AS wait FROM jobs WHERE id IN (%s, %s)",
                     (sql_id, py_id)).fetchall()
    assert [row["wait"] for row in due] == [dt.timedelta(seconds=60)] * 2


def test_nulls_mean_the_defaults(queue, schema, db):
    job_id = call(db, schema, "SELECT __schema__.enqueue('t', NULL, queue => NULL,"
                  " priority => NULL, max_attempts => NULL)")
    assert row_of(db, job_id) == row_of(db, queue.enqueue("t"))


def test_an_idempotency_key_returns_the_existing_job(queue, schema, db):
    first = queue.enqueue("t", idempotency_key="k")
    again = call(db, schema, "SELECT __schema__.enqueue('t', idempotency_key => 'k')")
    assert again == first and count(db) == 1
    ids = call(db, schema, """SELECT __schema__.enqueue_many(
        '[{"task": "t", "idempotency_key": "k"}, {"task": "t", "idempotency_key": "new"},
          {"task": "t", "idempotency_key": "new"}, {"task": "u", "idempotency_key": "new2"}]')""")
    assert ids[0] == first and ids[1] == ids[2] and ids[3] > ids[1] and count(db) == 3


def test_enqueue_many_returns_the_ids_in_input_order_and_writes_what_python_writes(
    queue, schema, db
):
    jobs = [{"task": f"t{n}", "args": {"n": n}, "priority": n % 3} for n in range(50)]
    jobs[7].update(run_at="2030-01-01T09:00:00+00:00")
    jobs[8].update(delay=5.5, key="k", queue="other")
    ids = call(db, schema, "SELECT __schema__.enqueue_many(%s)", Jsonb(jobs))
    assert ids == sorted(ids) and len(ids) == 50
    assert [row_of(db, i)["task"] for i in ids] == [f"t{n}" for n in range(50)]
    py_ids = queue.enqueue_many([
        {**job, "run_at": dt.datetime.fromisoformat(job["run_at"])} if "run_at" in job else job
        for job in jobs])
    assert [row_of(db, i) for i in ids] == [row_of(db, i) for i in py_ids]
    run_at = db.execute("SELECT run_at FROM jobs WHERE id = %s", (ids[7],)).fetchone()
    assert run_at == {"run_at": dt.datetime(2030, 1, 1, 9, tzinfo=dt.UTC)}
    assert call(db, schema, "SELECT __schema__.enqueue_many('[]')") == []


# SQL that must be refused, and a piece of the message it must give. Each writes nothing.
REFUSED_ENQUEUE = [
    ("enqueue(NULL)", "task must be a non-empty string, got NULL"),
    ("enqueue('')", "task must be a non-empty string"),
    (f"enqueue(repeat('t', {limits.MAX_NAME_BYTES + 1}))", "task is 256 bytes long"),
    ("enqueue('t', '[1, 2]')", "args for task 't' must be a JSON object"),
    ("enqueue('t', '\"text\"')", "got a string"),
    ("enqueue('t', 'null'::jsonb)", "got a null"),
    ("enqueue('t', queue => '')", "queue must be a non-empty string"),
    (f"enqueue('t', queue => repeat('é', {limits.MAX_NAME_BYTES // 2 + 1}))",
     "queue is 256 bytes long"),
    ("enqueue('t', delay => -1)", "delay must be a >= 0 number of seconds"),
    ("enqueue('t', delay => -0.000001)", "delay must be a >= 0"),
    ("enqueue('t', delay => 'NaN')", "got NaN"),
    ("enqueue('t', delay => 'Infinity')", "got Infinity"),
    (f"enqueue('t', delay => {limits.MAX_SECONDS + 1})", "at most ten years"),
    ("enqueue('t', run_at => now(), delay => 1)", "give run_at or delay, not both"),
    ("enqueue('t', run_at => '1969-12-31 23:59:59+00')", "run_at must lie between 1970-01-01"),
    ("enqueue('t', run_at => now() + interval '3653 days')", "ten years from now"),
    ("enqueue('t', run_at => '-infinity')", "got -infinity"),
    ("enqueue('t', key => '')", "key must be a non-empty string or NULL"),
    ("enqueue('t', idempotency_key => '')", "idempotency_key must be a non-empty string"),
    ("enqueue('t', limit_key => '')", "limit_key must be a non-empty string"),
    (f"enqueue('t', key => repeat('k', {limits.MAX_KEY_BYTES + 1}))", "key is 2049 bytes long"),
    ("enqueue('t', max_attempts => 0)", "max_attempts must be a whole number from 1"),
    (f"enqueue('t', jsonb_build_object('a', repeat('x', {limits.MAX_ARGS_BYTES})))",
     "over pgbaton's limit of 16,777,216"),
    (f"enqueue('t', (repeat('[', {limits.MAX_JSON_DEPTH}) || repeat(']', "
     f"{limits.MAX_JSON_DEPTH}))::jsonb)", "must be a JSON object"),
    (f"enqueue('t', ('{{\"a\": ' || repeat('[', {limits.MAX_JSON_DEPTH}) || repeat(']', "
     f"{limits.MAX_JSON_DEPTH}) || '}}')::jsonb)", "nested too deeply (more than 200 levels)"),
    ("enqueue('t', jsonb_build_object('n', ('1' || repeat('0', 4300))::numeric))",
     "more than 4,300 digits"),
    ("enqueue_many(NULL)", "enqueue_many takes a JSON array of jobs, got NULL"),
    ("enqueue_many('{\"task\": \"t\"}')", "takes a JSON array of jobs"),
    ("enqueue_many('[{\"task\": \"t\"}, 3]')", "job 1 must be a JSON object with a \"task\""),
    ("enqueue_many('[{\"args\": {}}]')", "job 0 must be a JSON object with a \"task\""),
    ("enqueue_many('[{\"task\": \"t\", \"dealy\": 5}]')", "job 0 has unknown fields {dealy}"),
    ("enqueue_many('[{\"task\": 5}]')", "job 0: task must be a JSON string or null"),
    ("enqueue_many('[{\"task\": \"t\"}, {\"task\": \"t\", \"args\": [1]}]')",
     "job 1: args for task 't' must be a JSON object"),
    ("enqueue_many('[{\"task\": \"t\", \"delay\": -5}]')", "job 0: delay must be a >= 0"),
    ("enqueue_many('[{\"task\": \"t\", \"delay\": \"5\"}]')", "delay must be a JSON number"),
    ("enqueue_many('[{\"task\": \"t\", \"priority\": 1.5}]')", "priority must be a whole number"),
    ("enqueue_many('[{\"task\": \"t\", \"priority\": 2147483648}]')", "got 2147483648"),
    ("enqueue_many('[{\"task\": \"t\", \"max_attempts\": 0}]')", "job 0: max_attempts must"),
    ("enqueue_many('[{\"task\": \"t\", \"run_at\": \"2030-01-01\"}]')",
     "run_at must be an ISO 8601 time with its UTC offset"),
    ("enqueue_many('[{\"task\": \"t\", \"run_at\": \"2030-01-01T09:00:00\"}]')", "UTC offset"),
    ("enqueue_many('[{\"task\": \"t\", \"run_at\": \"2030-02-30T09:00:00Z\"}]')",
     "run_at is not a time"),
    ("enqueue_many('[{\"task\": \"t\", \"run_at\": \"1960-01-01T09:00:00Z\"}]')",
     "job 0: run_at must lie between 1970-01-01"),
    ("enqueue_many('[{\"task\": \"t\", \"delay\": 1, \"run_at\": \"2030-01-01T09:00Z\"}]')",
     "job 0: give run_at or delay, not both"),
]


@pytest.mark.parametrize(("sql", "message"), REFUSED_ENQUEUE,
                         ids=[sql[:60] for sql, _ in REFUSED_ENQUEUE])
def test_bad_input_is_refused_by_name_and_writes_nothing(queue, schema, db, sql, message):
    with pytest.raises(psycopg.errors.InvalidParameterValue) as refused:
        call(db, schema, f"SELECT __schema__.{sql}")
    assert message in str(refused.value).splitlines()[0]
    assert count(db) == 0


def test_one_bad_job_of_many_writes_none_of_them(queue, schema, db):
    jobs = [{"task": "t", "args": {"n": n}} for n in range(100)] + [{"task": "t", "delay": -1}]
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="job 100: delay"):
        call(db, schema, "SELECT __schema__.enqueue_many(%s)", Jsonb(jobs))
    assert count(db) == 0


def test_values_at_the_limits_are_accepted(queue, schema, db):
    """Each limit is limits.py's: the value at it passes where one past it is refused."""
    deep = "[" * (limits.MAX_JSON_DEPTH - 1) + "]" * (limits.MAX_JSON_DEPTH - 1)
    job_id = call(db, schema, "SELECT __schema__.enqueue(repeat('t', %s), %s::jsonb,"
                  " queue => repeat('q', %s), key => repeat('k', %s), delay => %s,"
                  " max_attempts => 1, priority => %s)",
                  limits.MAX_NAME_BYTES, '{"a": ' + deep + ', "n": ' + "9" * 4300 + "}",
                  limits.MAX_NAME_BYTES, limits.MAX_KEY_BYTES, limits.MAX_SECONDS,
                  limits.INT4_MIN)
    assert count(db) == 1
    assert queue.get(job_id).args["a"] == json.loads(deep)  # type: ignore[union-attr]


def test_hostile_strings_are_stored_as_they_are(queue, schema, db):
    hostile = "'); DROP TABLE jobs; -- <script>alert(1)</script> %s %(x)s \\"
    job_id = call(db, schema, "SELECT __schema__.enqueue(%s, %s, queue => %s, key => %s)",
                  hostile, Jsonb({hostile: hostile}), hostile, hostile)
    job = queue.get(job_id)
    assert job is not None
    assert (job.task, job.queue, job.key, job.args) == (hostile, hostile, hostile,
                                                       {hostile: hostile})


def test_an_unknown_task_waits_unclaimed_by_workers_that_do_not_know_it(queue, schema, db):
    """The database knows no tasks: the job is written, and a claim for the tasks a
    worker knows passes it by with no attempt spent (docs/reference/sql.md)."""
    job_id = call(db, schema, "SELECT __schema__.enqueue('nobody_knows_me')")
    assert queue.claim("w", limit=10, tasks=["known"]) == []
    assert row_of(db, job_id)["status"] == "pending"
    assert row_of(db, job_id)["attempts"] == 0


def _trigger_example(schema: str) -> str:
    """The trigger example of docs/reference/sql.md, in the test's schema."""
    page = (ROOT / "docs" / "reference" / "sql.md").read_text()
    block = re.search(r"<!-- trigger example: begin -->\n```sql\n(.*?)```", page, re.DOTALL)
    assert block is not None
    return block[1].replace("pgbaton.enqueue", f'"{schema}".enqueue')


def test_the_documented_trigger_enqueues_with_the_order_and_never_without(
    dsn, queue, schema, db, listener_conn
):
    db.execute(_trigger_example(schema))
    with psycopg.connect(dsn) as conn:
        conn.execute(f'SET search_path TO "{schema}"')  # type: ignore[arg-type]
        conn.commit()
        conn.execute("INSERT INTO orders VALUES (1, 'ann'), (2, 'bob')")
        conn.rollback()
        assert count(db) == 0
        conn.execute("INSERT INTO orders VALUES (3, 'cy')")
        assert list(listener_conn.notifies(timeout=0.2)) == []
        conn.commit()
    assert [n.payload for n in listener_conn.notifies(timeout=5, stop_after=1)] == ["mail"]
    rows = db.execute("SELECT task, args, queue FROM jobs").fetchall()
    assert rows == [{"task": "send_receipt", "args": {"order_id": 3}, "queue": "mail"}]
    assert db.execute("SELECT count(*) AS n FROM orders").fetchone() == {"n": 1}


def test_a_refused_enqueue_fails_the_insert_that_asked_for_it(dsn, queue, schema, db):
    db.execute(_trigger_example(schema).replace("'mail'", "''"))
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="queue must be a non-empty"):
        db.execute("INSERT INTO orders VALUES (1, 'ann')")
    assert count(db) == 0
    assert db.execute("SELECT count(*) AS n FROM orders").fetchone() == {"n": 0}


@pytest.fixture
def listener_conn(dsn: str, queue: pgbaton.Queue):
    conn = psycopg.connect(dsn, autocommit=True)
    conn.execute(f'LISTEN "{queue.channel}"')  # type: ignore[arg-type]
    yield conn
    conn.close()
