"""pgbaton's schema upgraded to version 7 (the history table), in a revision of its own."""

from __future__ import annotations

import os

from alembic import op

from pgbaton.integrations import alembic as pgbaton_alembic

revision = "a4"
down_revision = "a3"


def upgrade() -> None:
    pgbaton_alembic.upgrade(op, 7, schema=os.environ["PGBATON_TEST_SCHEMA"])
