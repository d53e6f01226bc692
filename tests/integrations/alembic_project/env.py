"""The Alembic environment of the test project: online mode, on the URL the test sets."""

from __future__ import annotations

import os

import sqlalchemy as sa
from alembic import context

engine = sa.create_engine(
    context.config.get_main_option("sqlalchemy.url") or "",
    connect_args={"options": f"-c search_path={os.environ['PGBATON_TEST_SCHEMA']}"},
)
with engine.connect() as connection:
    context.configure(connection=connection, transaction_per_migration=True)
    with context.begin_transaction():
        context.run_migrations()
engine.dispose()
