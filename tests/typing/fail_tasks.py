"""Typed tasks misused: each line marked `# E: <code>` must be an error of that code."""

from __future__ import annotations

import pgbaton

app = pgbaton.App("postgresql:///shop")


@app.task
def resize_image(image_id: int, width: int = 800) -> str:
    return f"{image_id}@{width}"


@app.task(pass_context=True)
def send_receipt(ctx: pgbaton.JobContext, order_id: int) -> None:
    print(ctx, order_id)


resize_image("not an int")  # E: arg-type
resize_image.defer("not an int")  # E: arg-type
resize_image.defer(imageid=7)  # E: call-arg
resize_image.using(delay=5).defer(image_id="7")  # E: arg-type
resize_image.using(dealy=3)  # E: call-arg
resize_image.enqueue({"image_id": 7}, priority="high")  # E: arg-type
send_receipt.defer(orderid=1)  # E: call-arg
send_receipt(order_id=1)  # E: call-arg
size: int = resize_image(7)  # E: assignment
app.task(retry_on=[ValueError])  # E: call-overload
app.task(retry=lambda attempt, error, extra: 1.0)  # E: arg-type


def soon(attempt: int) -> str:
    return "soon"


app.task(retry=soon)  # E: arg-type
app.task(retry=30)  # E: call-overload
