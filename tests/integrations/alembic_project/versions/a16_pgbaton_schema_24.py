"""pgbaton's schema upgraded to version 24 (the flow claim past a mark)."""

from __future__ import annotations

import os

from alembic import op

from pgbaton.integrations import alembic as pgbaton_alembic

revision = "a16"
down_revision = "a15"


def upgrade() -> None:
    pgbaton_alembic.upgrade(op, 24, schema=os.environ["PGBATON_TEST_SCHEMA"])
