"""pgbaton's schema upgraded to version 26 (args checked where written)."""

from __future__ import annotations

import os

from alembic import op

from pgbaton.integrations import alembic as pgbaton_alembic

revision = "a18"
down_revision = "a17"


def upgrade() -> None:
    pgbaton_alembic.upgrade(op, 26, schema=os.environ["PGBATON_TEST_SCHEMA"])
