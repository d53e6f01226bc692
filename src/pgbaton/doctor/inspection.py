"""One doctor's session on the server: the named statements it may run, the claim's
EXPLAIN, and the catalogue of the schema pgbaton expects, to compare with the live one."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg.rows import DictRow

from .. import _sql
from ..errors import ConnectionFailed
from .findings import Finding, Thresholds

# The parameters the claim is EXPLAINed with: a worker filling ten free slots from
# every queue, as AsyncQueue.claim binds them.
CLAIM_PARAMS: dict[str, Any] = {
    "worker_id": "pgbaton-doctor", "limit": 10, "lease": 30.0, "queues": None, "tasks": None,
    "finished": None, "starting": 10, "after": None,
}
STATEMENT_TIMEOUT = "10s"
LOCK_TIMEOUT = "3s"
# The expected schema is built here, in a transaction that is rolled back: temporary
# objects need only the TEMP privilege, and nothing of them outlives the check.
REFERENCE_SCHEMA = _sql.TEMPORARY_SCHEMA


@dataclass(frozen=True)
class Catalogue:
    """A jobs table's indexes and constraints as the server's catalogue states them,
    keyed by name: the parts that do not name the table, so two schemas compare."""

    indexes: dict[str, DictRow]
    constraints: dict[str, DictRow]


class Inspection:
    """The doctor's connection to one schema, with the statements every check shares."""

    def __init__(
        self, conn: psycopg.Connection[DictRow], schema: str, thresholds: Thresholds,
        *, dsn: str | None = None, pooled: str | None = None,
    ) -> None:
        self.conn = conn
        self.schema = schema
        self.thresholds = thresholds
        self.sql = _sql.queries(schema)
        self.jobs_table = f'"{schema}".jobs'
        self.dsn = dsn
        # Why the DSN is a transaction pool (pooling.py), or None.
        self.pooled = pooled
        if pooled is None:
            conn.execute(
                self.sql["doctor_session_setup"],
                {"statement_timeout": STATEMENT_TIMEOUT, "lock_timeout": LOCK_TIMEOUT},
            )
        else:
            # Session settings would stay on a server connection that other clients of
            # the pool use next; and a prepared statement would not follow us there.
            conn.prepare_threshold = None
        self.server = self.one("doctor_server") or {}

    def all(self, name: str, params: dict[str, Any] | None = None) -> list[DictRow]:
        return self.conn.execute(self.sql[name], params).fetchall()

    def one(self, name: str, params: dict[str, Any] | None = None) -> DictRow | None:
        return self.conn.execute(self.sql[name], params).fetchone()

    def guarded(self, name: str, check: Callable[[Inspection], Finding]) -> Finding:
        """A check that cannot run is a failed finding, not a traceback; a lost
        connection ends the whole run with one clear line."""
        try:
            return check(self)
        except psycopg.Error as error:
            if self.conn.broken or self.conn.closed:
                raise ConnectionFailed(
                    f"lost the connection to PostgreSQL during the {name} check: {error}"
                ) from error
            reason = error.diag.message_primary or " ".join(str(error).split())
            return Finding(
                name, "fail", f"the check could not run: {reason}",
                evidence=[f"{type(error).__name__}: {reason}"],
                advice=self._advice_for(error),
            )

    def _advice_for(self, error: psycopg.Error) -> str:
        if isinstance(error, psycopg.errors.LockNotAvailable):
            return (f"another session has held a strong lock on jobs for over {LOCK_TIMEOUT} "
                    "(a migration, VACUUM FULL, ALTER TABLE?): SELECT pid, mode FROM pg_locks "
                    f"WHERE relation = '{self.jobs_table}'::regclass shows which")
        if isinstance(error, psycopg.errors.QueryCanceled):
            return f"the check ran past {STATEMENT_TIMEOUT}: the server is overloaded"
        if isinstance(error, psycopg.errors.InsufficientPrivilege):
            return ("run the doctor as a role that may read pgbaton's schema and create "
                    "temporary tables, with pg_monitor to see every session")
        return "this check's statement failed: see the error above"

    def explain(self, setup: str) -> tuple[dict[str, Any], list[str]]:
        """The claim's plan as JSON (to judge) and as text (to show), planned inside a
        transaction that is rolled back, so the settings die with it. EXPLAIN without
        ANALYZE plans the UPDATE and claims nothing."""
        claim = self.sql["job_claim_many"]
        with self.conn.transaction(force_rollback=True):
            self.conn.execute(self.sql[setup])
            json_row = self.conn.execute(
                "EXPLAIN (FORMAT JSON) " + claim, CLAIM_PARAMS, prepare=False
            ).fetchone()
            text_rows = self.conn.execute(
                "EXPLAIN " + claim, CLAIM_PARAMS, prepare=False
            ).fetchall()
        assert json_row is not None
        plan: dict[str, Any] = json_row["QUERY PLAN"][0]["Plan"]
        return plan, [row["QUERY PLAN"] for row in text_rows]

    def live(self) -> Catalogue:
        """The live jobs table's indexes and constraints."""
        return self._catalogue(self.jobs_table)

    @functools.cached_property
    def reference(self) -> Catalogue:
        """The indexes and constraints this pgbaton creates, read from the catalogue of a
        copy of its schema built in a rolled-back transaction (never parsed from DDL)."""
        with self.conn.transaction(force_rollback=True):
            self.conn.execute(_sql.tables_sql(REFERENCE_SCHEMA))
            return self._catalogue(f"{REFERENCE_SCHEMA}.jobs")

    def _catalogue(self, table: str) -> Catalogue:
        indexes = self.all("doctor_jobs_indexes", {"table": table})
        constraints = self.all("doctor_jobs_constraints", {"table": table})
        return Catalogue({r["name"]: r for r in indexes}, {r["name"]: r for r in constraints})

    def index_create_statement(self, name: str) -> str | None:
        """CREATE INDEX CONCURRENTLY for one of pgbaton's indexes on the live table, from
        the reference catalogue; None when the index is not pgbaton's."""
        index = self.reference.indexes.get(name)
        if index is None:
            return None
        unique = "UNIQUE " if index["is_unique"] else ""
        return f"CREATE {unique}INDEX CONCURRENTLY {name} ON {self.jobs_table} {index['body']}"
