"""pgbaton's schema upgraded to version 23 (one index of the jobs that hold a lease)."""

from __future__ import annotations

import os

from alembic import op

from pgbaton.integrations import alembic as pgbaton_alembic

revision = "a15"
down_revision = "a14"


def upgrade() -> None:
    pgbaton_alembic.upgrade(op, 23, schema=os.environ["PGBATON_TEST_SCHEMA"])
