"""The shop's database: one SQLAlchemy async engine on psycopg 3, and the orders table.

SHOP_DATABASE_URL is a libpq DSN (postgresql://user@host:port/dbname); SHOP_SCHEMA,
when set, holds the orders and pgbaton's jobs (the tests give each run a fresh one).
"""

from __future__ import annotations

import os

import psycopg
from sqlalchemy.engine import URL
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

DSN = os.environ.get("SHOP_DATABASE_URL", "postgresql:///shop")
SCHEMA = os.environ.get("SHOP_SCHEMA", "public")


class Base(DeclarativeBase):
    pass


class Order(Base):
    __tablename__ = "orders"
    __table_args__ = {"schema": SCHEMA}  # noqa: RUF012 (SQLAlchemy's own convention)

    id: Mapped[int] = mapped_column(primary_key=True)
    item: Mapped[str]
    receipt_sent: Mapped[bool] = mapped_column(default=False)


def create_engine() -> AsyncEngine:
    # psycopg 3 (postgresql+psycopg): the driver pgbaton can write through, so jobs
    # join the session's transaction.
    params = {k: str(v) for k, v in psycopg.conninfo.conninfo_to_dict(DSN).items()}
    return create_async_engine(URL.create("postgresql+psycopg", query=params))
