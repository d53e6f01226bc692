"""The shop's tasks, run by `pgbaton worker fastapi_shop.jobs:app` beside the web app."""

from __future__ import annotations

import pgbaton
from sqlalchemy import update

from fastapi_shop.database import DSN, SCHEMA, Order, create_engine

app = pgbaton.App(DSN, schema=SCHEMA if SCHEMA != "public" else "pgbaton")
engine = create_engine()


@app.task(max_attempts=3)
async def send_receipt(order_id: int) -> None:
    async with engine.begin() as conn:
        await conn.execute(update(Order).where(Order.id == order_id).values(receipt_sent=True))
