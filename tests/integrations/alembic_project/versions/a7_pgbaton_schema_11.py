"""pgbaton's schema upgraded to version 11 (the history functions dropped: the mover
runs plain statements)."""

from __future__ import annotations

import os

from alembic import op

from pgbaton.integrations import alembic as pgbaton_alembic

revision = "a7"
down_revision = "a6"


def upgrade() -> None:
    pgbaton_alembic.upgrade(op, 11, schema=os.environ["PGBATON_TEST_SCHEMA"])
