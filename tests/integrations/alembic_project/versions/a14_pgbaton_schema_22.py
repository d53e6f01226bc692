"""pgbaton's schema upgraded to version 22 (no BEFORE row trigger on jobs)."""

from __future__ import annotations

import os

from alembic import op

from pgbaton.integrations import alembic as pgbaton_alembic

revision = "a14"
down_revision = "a13"


def upgrade() -> None:
    pgbaton_alembic.upgrade(op, 22, schema=os.environ["PGBATON_TEST_SCHEMA"])
