"""Rows of the worker's hot statements made into objects cheaply: a claim from a binary
tuple row, jsonb without json.loads' checks for input that PostgreSQL wrote itself.

A draining worker decodes thousands of claims a second; a dict per row, the text format
and json.loads' encoding detection were a third of its decoding work (issue 16).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from operator import itemgetter
from typing import Any

from psycopg.adapt import Buffer, Loader
from psycopg.errors import DataError
from psycopg.pq import Format

from .models import Claim

# The claim statements' column for each field of Claim, in the order of its fields.
CLAIM_COLUMNS = (
    "id", "claim_token", "attempts", "max_attempts", "task", "args", "key", "queue",
    "priority", "lease_until", "created_at", "idempotency_key", "run_at", "meta", "started",
)

_raw_decode = json.JSONDecoder().raw_decode


class JsonbBinaryLoader(Loader):
    """jsonb in binary: a version byte (1), then the text PostgreSQL prints, which has no
    leading space and one value: raw_decode reads it with none of json.loads' checks
    (encoding detection, surrounding whitespace), to the same Python value."""

    format = Format.BINARY

    def load(self, data: Buffer) -> Any:
        view = memoryview(data)
        if view[0] != 1:
            raise DataError(f"unknown jsonb binary format version {view[0]}")
        return _raw_decode(str(view[1:], "utf-8"))[0]


def claim_reader(columns: Sequence[str]) -> Callable[[tuple[Any, ...]], Claim]:
    """Builds a Claim from a row of a claim statement whose columns are named so."""
    pick = itemgetter(*[columns.index(column) for column in CLAIM_COLUMNS])

    def read(row: tuple[Any, ...]) -> Claim:
        return Claim(*pick(row))

    return read
