"""Enqueue in the transaction of Django's own connection (PGBATON["DATABASE"])."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ParamSpec

from django.db import connections

from ...app import Deferrable, Deferral, Task
from .settings import pgbaton_settings

P = ParamSpec("P")


def enqueue(
    task: Task, args: Mapping[str, Any] | None = None, *, using: str | None = None,
    **options: Any,
) -> int:
    """task.enqueue(args, **options) on Django's connection `using` (PGBATON["DATABASE"]
    unless given): inside `transaction.atomic()` the job commits or rolls back with it."""
    return task.enqueue(args, conn=_connection(using), **options)


def deferral(
    task: Deferrable[P], *, using: str | None = None, **options: Any
) -> Deferral[P]:
    """task.using(conn=<Django's connection>, **options), for a typed
    `deferral(send_receipt).defer(order_id=order.id)`."""
    return task.using(conn=_connection(using), **options)


def _connection(using: str | None) -> Any:
    return connections[using or pgbaton_settings().database]
