"""Enqueue without conn= inside transaction.atomic(): the job joins Django's transaction."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.db import connections


def atomic_connection(alias: str) -> Callable[[], Any]:
    """A connection provider for App.provide_connection: Django's connection `alias`
    while this thread is inside transaction.atomic() on it, else None (pgbaton's own
    pool, committed at once, as a Django query in autocommit mode would be)."""

    def inside_atomic() -> Any:
        # connections[alias] is this thread's (or this async context's) connection, so a
        # worker thread's enqueue never joins a request's transaction.
        connection = connections[alias]
        return connection if connection.in_atomic_block else None

    return inside_atomic
