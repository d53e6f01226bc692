"""The shop's web app: POST /orders creates an order and enqueues its receipt in one
transaction of a SQLAlchemy AsyncSession; `pgbaton worker` sends the receipt.

    SHOP_DATABASE_URL=postgresql://localhost/shop uvicorn fastapi_shop.main:app
    SHOP_DATABASE_URL=postgresql://localhost/shop pgbaton worker fastapi_shop.jobs:app

(both from examples/, with `pip install 'pgbaton[sqlalchemy]' fastapi uvicorn`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Annotated

from fastapi import Depends, FastAPI, HTTPException
from pydantic import BaseModel
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from fastapi_shop.database import Base, Order, create_engine
from fastapi_shop.jobs import app as jobs
from fastapi_shop.jobs import send_receipt

engine = create_engine()
sessions = async_sessionmaker(engine, expire_on_commit=False)


@asynccontextmanager
async def lifespan(_: FastAPI) -> AsyncIterator[None]:
    # An example's shortcut: a deployment runs `pgbaton migrate` and its own migrations.
    await jobs.async_queue.migrate()
    async with engine.begin() as conn:
        await conn.run_sync(Base.metadata.create_all)
    await jobs.async_queue.open()
    yield
    await jobs.async_queue.close()
    await engine.dispose()


app = FastAPI(lifespan=lifespan)


async def session() -> AsyncIterator[AsyncSession]:
    async with sessions() as s:
        yield s


Session = Annotated[AsyncSession, Depends(session)]


class NewOrder(BaseModel):
    item: str


@app.post("/orders", status_code=201)
async def create_order(new: NewOrder, db: Session) -> dict[str, int]:
    async with db.begin():
        order = Order(item=new.item)
        db.add(order)
        await db.flush()
        job_id = await send_receipt.using(conn=db).defer_async(order_id=order.id)
        if new.item == "refused":
            # Anything failing after the enqueue rolls back the order and its job.
            raise HTTPException(422, "refused")
    return {"order": order.id, "job": job_id}


@app.get("/orders/{order_id}")
async def get_order(order_id: int, db: Session) -> dict[str, object]:
    order = await db.get(Order, order_id)
    if order is None:
        raise HTTPException(404, f"no order {order_id}")
    return {"order": order.id, "item": order.item, "receipt_sent": order.receipt_sent}
