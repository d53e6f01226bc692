"""pgbaton's schema upgraded to version 9 (the flow claim's jobs claimed ahead)."""

from __future__ import annotations

import os

from alembic import op

from pgbaton.integrations import alembic as pgbaton_alembic

revision = "a5"
down_revision = "a4"


def upgrade() -> None:
    pgbaton_alembic.upgrade(op, 9, schema=os.environ["PGBATON_TEST_SCHEMA"])
