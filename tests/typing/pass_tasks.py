"""Typed tasks as a user writes them: mypy --strict must accept every line."""

from __future__ import annotations

import psycopg

import pgbaton

app = pgbaton.App("postgresql:///shop")


@app.task(max_attempts=3)
def resize_image(image_id: int, width: int = 800) -> str:
    return f"{image_id}@{width}"


@app.task
async def charge(customer_id: int, amount: int) -> None:
    return None


@app.task(pass_context=True)
def send_receipt(ctx: pgbaton.JobContext, order_id: int) -> None:
    print(ctx.idempotency_key, order_id)


def by_error(attempt: int, error: BaseException) -> float | None:
    return 5.0 if isinstance(error, TimeoutError) and attempt < 3 else None


@app.task(retry=by_error, retry_on=(TimeoutError, ConnectionError), max_snoozes=50)
def call_the_bank(payment_id: int) -> None:
    if payment_id < 0:
        raise pgbaton.Discard("no such payment")
    if payment_id == 0:
        raise pgbaton.Cancel("refunded by hand")
    raise pgbaton.Snooze(60, note="the bank is closed")


@app.task(retry=lambda attempt, error: 1.0)
def two_argument_lambda() -> None: ...


@app.task(retry=lambda attempt: None)
def one_argument_lambda() -> None: ...


def use(conn: psycopg.Connection[object], ctx: pgbaton.JobContext) -> None:
    size: str = resize_image(7, width=100)
    print(size)
    job_id: int = resize_image.defer(7)
    job_id = resize_image.defer(image_id=7, width=1024)
    job_id = resize_image.using(conn=conn, delay=10, queue="images").defer(7)
    job_id = send_receipt.defer(order_id=job_id)
    send_receipt(ctx, order_id=3)
    job_id = resize_image.enqueue({"image_id": 7})  # the untyped form stays


async def use_async() -> None:
    await charge(customer_id=1, amount=100)
    job_id: int = await charge.defer_async(customer_id=1, amount=100)
    job_id = await charge.using(priority=5).defer_async(1, 100)
    print(job_id)


# retry= takes what the worker accepts (docs/howto/retries.md): a Backoff, or any
# callable of the attempt returning seconds, or None for the default backoff.
@app.task(retry=pgbaton.Backoff(base=2.0, cap=600.0))
def with_backoff() -> None:
    return None


def after_three(attempt: int) -> float | None:
    return None if attempt < 3 else 60.0


@app.task(retry=after_three)
def with_policy() -> None:
    return None
