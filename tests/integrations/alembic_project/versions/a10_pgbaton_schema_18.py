"""pgbaton's schema upgraded to version 18 (snoozes, progress and job logs, schedules,
the workers table, durable steps)."""

from __future__ import annotations

import os

from alembic import op

from pgbaton.integrations import alembic as pgbaton_alembic

revision = "a10"
down_revision = "a9"


def upgrade() -> None:
    pgbaton_alembic.upgrade(op, 18, schema=os.environ["PGBATON_TEST_SCHEMA"])
