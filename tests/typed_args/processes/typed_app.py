"""The App the typed and encrypted args worker test runs (test_typed_encrypted_worker.py):
handlers return what they were given, as type names, so the test reads it from SQL."""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import os

import pydantic

import pgbaton

app = pgbaton.App(schema=os.environ.get("PGBATON_TEST_SCHEMA", "pgbaton"))


class Order(pydantic.BaseModel):
    id: int
    lines: list[str]


@dataclasses.dataclass
class Point:
    x: int
    y: int


@app.task(max_attempts=5)
def ship(order: Order, at: dt.datetime, point: Point) -> list[str]:
    return [type(order).__name__, type(at).__name__, type(point).__name__,
            str(order.id + point.x)]


@app.task(encrypt=True, max_attempts=5)
def charge(card: str, cents: int) -> str:
    # A digest, never the card: the result column must not hold the secret either.
    return hashlib.sha256(f"{card}:{cents + 1}".encode()).hexdigest()


@app.task(encrypt=True)
def settle(card: str, batch: dict[str, int]) -> list[object]:
    # A batch callback of an encrypted task: its sealed args, and the batch's counts
    # that the database put beside them.
    return [hashlib.sha256(card.encode()).hexdigest(), batch["done"]]
