"""pgbaton's schema upgraded to version 3, in the same revision as the app's own table."""

from __future__ import annotations

import os

from alembic import op

from pgbaton.integrations import alembic as pgbaton_alembic

revision = "a2"
down_revision = "a1"


def upgrade() -> None:
    schema = os.environ["PGBATON_TEST_SCHEMA"]
    op.execute(f'CREATE TABLE "{schema}".orders (id bigserial PRIMARY KEY, item text)')
    pgbaton_alembic.upgrade(op, 3, schema=schema)
    if os.environ.get("FAIL_AFTER_PGBATON"):
        raise RuntimeError("this revision fails after pgbaton's step, on purpose")
