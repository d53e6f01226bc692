"""The application under test: a shop's jobs, and the code that enqueues them."""

import pgbaton
from pgbaton.middleware import CallNext

app = pgbaton.App()  # the tests point it at their own schema (the pgbaton_app fixture)
seen_by_middleware: list[str] = []


@app.middleware
async def record(context: pgbaton.JobContext, call_next: CallNext) -> object:
    seen_by_middleware.append(context.claim.task)
    return await call_next()


@app.task(max_attempts=3, retry=lambda attempt: 0)  # retries at once: drain() runs them
def charge(customer_id: int, amount: int) -> dict[str, int]:
    if amount <= 0:
        raise ValueError(f"cannot charge {amount}")
    return {"charged": amount}


@app.task(pass_context=True)
def send_receipt(ctx: pgbaton.JobContext, order_id: int) -> str:
    if ctx.should_stop:
        return "stopped"
    return f"receipt {order_id} sent with key {ctx.idempotency_key}"


def place_order(customer_id: int, amount: int) -> int:
    """The code under test: takes the order, enqueues its charge and its receipt."""
    order_id = 1000 + customer_id
    charge.defer(customer_id, amount)
    send_receipt.defer(order_id=order_id)
    return order_id
