"""The App's tasks as a user calls them: enqueue checks args, defer() is typed and fills
args by name, direct calls run the handler. Each check is proven in the jobs table."""

from __future__ import annotations

import psycopg
import pytest

import pgbaton
from tests.helpers import job_rows


@pytest.fixture
def app(dsn, schema, queue):
    """An App on the test's migrated schema, with the tasks of the README's tour."""
    app = pgbaton.App(dsn, schema=schema)

    @app.task(max_attempts=3, queue="billing", key=lambda customer_id, **_: customer_id)
    def charge(customer_id: int, amount: int, currency: str = "EUR") -> str:
        return f"{customer_id}:{amount}{currency}"

    @app.task(pass_context=True)
    def send_receipt(ctx: pgbaton.JobContext, order_id: int) -> int:
        return order_id

    @app.task
    def anything(**fields: object) -> None:
        return None

    yield app
    app.queue.close()


def test_enqueue_refuses_a_misspelled_argument_and_writes_nothing(app, db):
    """`orderid` for a handler that takes `order_id` fails at enqueue, naming both."""
    with pytest.raises(
        pgbaton.InvalidArgument,
        match=r"missing 'order_id'; unexpected 'orderid' \(its handler takes order_id\)",
    ):
        app.tasks["send_receipt"].enqueue({"orderid": 1})
    with pytest.raises(
        pgbaton.InvalidArgument, match=r"missing 'amount'.*takes customer_id, amount, currency="
    ):
        app.tasks["charge"].enqueue({"customer_id": 1})
    assert job_rows(db, "id") == []


def test_enqueue_accepts_what_the_handler_takes(app, db):
    """Defaults may be left out; a handler with **fields takes any names."""
    app.tasks["charge"].enqueue({"customer_id": 3, "amount": 5})
    app.tasks["anything"].enqueue({"x": 1, "y": [2]})
    assert job_rows(db, "task", "args", "queue", "max_attempts", "key") == [
        ("charge", {"customer_id": 3, "amount": 5}, "billing", 3, "3"),
        ("anything", {"x": 1, "y": [2]}, "default", 5, None),
    ]


def test_defer_fills_args_by_name_and_applies_the_tasks_settings(app, db):
    """defer(3, 5) is the job {customer_id: 3, amount: 5} on the task's queue and key."""
    charge = app.tasks["charge"]
    assert isinstance(charge, pgbaton.TypedTask)
    charge.defer(3, amount=5)
    app.tasks["send_receipt"].defer(order_id=9)
    assert job_rows(db, "task", "args", "queue", "key") == [
        ("charge", {"customer_id": 3, "amount": 5}, "billing", "3"),
        ("send_receipt", {"order_id": 9}, "default", None),
    ]
    with pytest.raises(pgbaton.InvalidArgument, match="unexpected keyword argument 'amonut'"):
        charge.defer(3, amonut=5)  # type: ignore[call-arg]


def test_using_defers_in_the_callers_transaction(app, dsn, db):
    """using(conn=...) writes with the caller's connection: a rollback leaves no job."""
    charge = app.tasks["charge"]
    with psycopg.connect(dsn) as conn:
        charge.using(conn=conn, priority=7).defer(customer_id=1, amount=2)
        conn.rollback()
        charge.using(conn=conn, priority=7, queue="urgent").defer(customer_id=4, amount=2)
        conn.commit()
    assert job_rows(db, "args", "priority", "queue") == [
        ({"customer_id": 4, "amount": 2}, 7, "urgent")
    ]


def test_a_misspelled_enqueue_option_is_named_and_nothing_is_written(app, db):
    """`dealy=3` is refused where it is written, naming the option and the nearest real
    one, by using(), enqueue() and enqueue_async() alike: no job."""
    charge = app.tasks["charge"]
    said = r"charge: 'dealy' is not an enqueue option; did you mean 'delay'\? The options"
    with pytest.raises(pgbaton.InvalidArgument, match=said):
        charge.using(dealy=3)  # type: ignore[call-arg]
    with pytest.raises(pgbaton.InvalidArgument, match=said):
        charge.enqueue({"customer_id": 1, "amount": 2}, dealy=3)  # type: ignore[call-arg]
    refused = r"'colour' is not an enqueue option\. The options are after, "
    with pytest.raises(pgbaton.InvalidArgument, match=refused):
        charge.using(colour="red")  # type: ignore[call-arg]
    assert job_rows(db, "id") == []


async def test_a_misspelled_option_is_refused_on_the_async_path_too(app, db):
    with pytest.raises(pgbaton.InvalidArgument, match="'prority' is not an enqueue option"):
        await app.tasks["charge"].enqueue_async(
            {"customer_id": 1, "amount": 2}, prority=1)  # type: ignore[call-arg]
    await app.async_queue.close()
    assert job_rows(db, "id") == []


async def test_defer_async_goes_through_the_async_queue(app, db):
    """defer_async() enqueues through the App's AsyncQueue, with the same checks."""
    job_id = await app.tasks["charge"].defer_async(2, 10)
    await app.async_queue.close()
    assert job_rows(db, "id", "args") == [(job_id, {"customer_id": 2, "amount": 10})]


def test_direct_calls_run_the_handler_in_process(app):
    """A task called as a function is its handler: no job, the handler's result."""
    assert app.tasks["charge"](1, 2) == "1:2EUR"
    context = object()  # the handler ignores it; a worker passes the real JobContext
    assert app.tasks["send_receipt"](context, order_id=5) == 5


def test_a_context_task_must_take_the_context_first():
    """pass_context=True on a handler without a parameter for it is refused at once."""
    app = pgbaton.App("postgresql:///unused")
    with pytest.raises(pgbaton.ConfigurationError, match="JobContext as its first"):
        @app.task(pass_context=True)
        def broken() -> None: ...
