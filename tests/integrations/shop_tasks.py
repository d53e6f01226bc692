"""The App that the framework tests enqueue into and run in real `pgbaton worker`s."""

from __future__ import annotations

import os

import pgbaton

app = pgbaton.App(schema=os.environ.get("PGBATON_TEST_SCHEMA", "pgbaton"))


@app.task
def send_receipt(order_id: int) -> dict[str, int]:
    return {"receipt_for": order_id}
