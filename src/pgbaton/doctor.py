"""`pgbaton doctor`: checks a live installation and shows the evidence for each finding.

Every check reads the catalogue, the statistics views or the jobs table, and the claim
is EXPLAINed, never executed: the doctor changes nothing. Each check gives a Finding
(ok, warn or fail) with the lines it was judged on and what to do about it; the exit
status is 1 when any finding fails, so the command fits a monitoring probe.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import click
import psycopg
from psycopg.rows import DictRow

from . import _database, _sql
from ._base import redact_dsn
from ._cli_common import _print_json, dsn_option, json_option, resolve_dsn, schema_option
from .errors import ConnectionFailed

Status = Literal["ok", "warn", "fail"]

# The parameters the claim is EXPLAINed with: a worker filling ten free slots from
# every queue, as AsyncQueue.claim binds them.
CLAIM_PARAMS: dict[str, Any] = {
    "worker_id": "pgbaton-doctor", "limit": 10, "lease": 30.0, "queues": None, "tasks": None,
}
CLAIM_INDEX = "jobs_claimable"
# Below this many pages a seq scan of jobs costs less than walking an index, and the
# planner rightly prefers it; above it, a preferred seq scan means something is off.
SMALL_TABLE_PAGES = 128
# Dead rows below this count are noise whatever their share of a small table.
MIN_DEAD_ROWS = 1000
STATEMENT_TIMEOUT = "10s"
LOCK_TIMEOUT = "3s"
APPLICATION_NAME = "pgbaton doctor"
MAX_LISTED = 10


@dataclass
class Finding:
    """One check's verdict, the evidence it was judged on, and what to do."""

    name: str
    status: Status
    summary: str
    evidence: list[str] = field(default_factory=list)
    advice: str | None = None
    data: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Thresholds:
    max_idle_in_transaction: float = 60.0
    max_transaction_age: float = 300.0
    lease_grace: float = 30.0
    max_lag: float = 300.0
    max_dead_ratio: float = 0.5


def overall(findings: list[Finding]) -> Status:
    statuses = {f.status for f in findings}
    if "fail" in statuses:
        return "fail"
    return "warn" if "warn" in statuses else "ok"


def age(seconds: float | None) -> str:
    """A duration for people: 4.2 s, 3 min 20 s, 2 h 5 min, 3 d 4 h."""
    if seconds is None:
        return "never"
    if seconds < 60:
        return f"{seconds:.1f} s"
    whole = int(seconds)
    if whole < 3600:
        return f"{whole // 60} min {whole % 60} s"
    if whole < 86400:
        return f"{whole // 3600} h {whole % 3600 // 60} min"
    return f"{whole // 86400} d {whole % 86400 // 3600} h"


def _plural(count: int, word: str) -> str:
    return f"{count} {word}" if count == 1 else f"{count} {word}s"


# -- reading a plan -------------------------------------------------------------------


def _nodes(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield plan
    for child in plan.get("Plans", []):
        yield from _nodes(child)


@dataclass
class PlanVerdict:
    """What a JSON plan of job_claim_many says about how it reads jobs."""

    uses_index: bool
    sorts: bool
    problems: list[str]

    @property
    def good(self) -> bool:
        return self.uses_index and not self.problems


def judge_plan(plan: dict[str, Any]) -> PlanVerdict:
    """The candidate CTE (which picks the ids to claim) must read jobs
    through jobs_claimable, and no node may read the whole of jobs: on a big table either
    mistake makes every claim walk the done rows."""
    problems = []
    ctes = [n for n in _nodes(plan) if n.get("Subplan Name") == "CTE candidate"]
    cte_nodes = list(_nodes(ctes[0])) if ctes else []
    uses_index = any(n.get("Index Name") == CLAIM_INDEX for n in cte_nodes)
    sorts = any(n["Node Type"] in ("Sort", "Incremental Sort") for n in cte_nodes)
    if not ctes:
        problems.append("no CTE candidate (is this the claim statement?)")
    elif not uses_index:
        problems.append(f"no scan of {CLAIM_INDEX} in the candidate CTE")
    for node in _nodes(plan):
        if node.get("Relation Name") == "jobs" and node["Node Type"] == "Seq Scan":
            problems.append(f"a Seq Scan on jobs (as {node.get('Alias', 'jobs')})")
    return PlanVerdict(uses_index, sorts, problems)


# -- the checks -----------------------------------------------------------------------


class Doctor:
    def __init__(
        self, conn: psycopg.Connection[DictRow], schema: str, thresholds: Thresholds
    ) -> None:
        self.conn = conn
        self.schema = schema
        self.thresholds = thresholds
        self.sql = _sql.queries(schema)
        self.jobs_table = f'"{schema}".jobs'
        conn.execute(
            self.sql["doctor_session_setup"],
            {"statement_timeout": STATEMENT_TIMEOUT, "lock_timeout": LOCK_TIMEOUT},
        )
        self.server = self._one("doctor_server") or {}

    def _all(self, name: str, params: dict[str, Any] | None = None) -> list[DictRow]:
        return self.conn.execute(self.sql[name], params).fetchall()

    def _one(self, name: str, params: dict[str, Any] | None = None) -> DictRow | None:
        return self.conn.execute(self.sql[name], params).fetchone()

    def run(self) -> list[Finding]:
        schema_finding = self._guarded("schema_version", self.schema_version)
        findings = [schema_finding]
        if schema_finding.data.get("found") != 0:
            findings += [
                self._guarded("claim_plan", self.claim_plan),
                self._guarded("expired_leases", self.expired_leases),
                self._guarded("queue_lag", self.queue_lag),
                self._guarded("jobs_table_vacuum", self.jobs_table_vacuum),
            ]
        findings += [
            self._guarded("idle_in_transaction", self.idle_in_transaction),
            self._guarded("old_transactions", self.old_transactions),
        ]
        return findings

    def _guarded(self, name: str, check: Callable[[], Finding]) -> Finding:
        """A check that cannot run is a failed finding, not a traceback; a lost
        connection ends the whole run with one clear line."""
        try:
            return check()
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
            return ("run the doctor as a role that may read pgbaton's schema, with "
                    "pg_monitor to see every session")
        return "this check's statement failed: see the error above"

    # schema version ---------------------------------------------------------------

    def schema_version(self) -> Finding:
        found = _database.schema_version(self.conn, self.schema)
        wanted = _sql.schema_version()
        data = {"found": found, "wanted": wanted}
        evidence = [f"schema {self.schema!r}: version {found}; this pgbaton: version {wanted}"]
        if found == wanted:
            return Finding("schema_version", "ok",
                           f"schema {self.schema!r} is at version {wanted}, as this pgbaton "
                           "expects", evidence, data=data)
        if found == 0:
            evidence.append("the checks of the jobs table were skipped: there is none")
            return Finding(
                "schema_version", "fail",
                f"schema {self.schema!r} holds no pgbaton tables", evidence,
                f"run `pgbaton migrate --schema {self.schema}` (or Queue.migrate()), or pass "
                "the --schema your workers use", data,
            )
        if found < wanted:
            return Finding(
                "schema_version", "fail",
                f"schema {self.schema!r} is at version {found}, older than this pgbaton's "
                f"{wanted}", evidence,
                f"run `pgbaton migrate --schema {self.schema}` (or Queue.migrate())", data,
            )
        return Finding(
            "schema_version", "fail",
            f"schema {self.schema!r} is at version {found}, newer than this pgbaton's "
            f"{wanted}", evidence,
            "upgrade pgbaton here: a newer pgbaton migrated this schema", data,
        )

    # the claim's plan -------------------------------------------------------------

    def _explain(self, setup: str) -> tuple[dict[str, Any], list[str]]:
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

    def _create_index_advice(self) -> str:
        match = re.search(rf"CREATE INDEX {CLAIM_INDEX} ON .*?;", _sql.schema_sql(self.schema),
                          re.DOTALL)
        statement = (
            " ".join(match[0].split()).replace("CREATE INDEX", "CREATE INDEX CONCURRENTLY", 1)
            if match else f"CREATE INDEX CONCURRENTLY {CLAIM_INDEX} ... (see `pgbaton schema "
            "--sql`)"
        )
        return f"recreate the claim's partial index: {statement}"

    def claim_plan(self) -> Finding:
        index = self._one("doctor_index_state", {"index": f'"{self.schema}".{CLAIM_INDEX}'})
        size = self._one("doctor_table_size", {"table": self.jobs_table})
        pages = int(size["pages"]) if size else 0
        evidence = []
        if index is None:
            evidence.append(f"index {CLAIM_INDEX}: does not exist in schema {self.schema!r}")
        else:
            state = "valid" if index["valid"] else "INVALID (a failed CREATE INDEX CONCURRENTLY?)"
            evidence.append(f"index {CLAIM_INDEX}: {state}, {index['bytes']} bytes: "
                            f"{index['definition']}")
        if size:
            evidence.append(f"table jobs: {_plural(pages, 'page')}; planner's estimate "
                            f"{max(size['rows_estimated'], 0):.0f} rows")
        data: dict[str, Any] = {"index_exists": index is not None,
                                "index_valid": bool(index and index["valid"]),
                                "table_pages": pages}

        natural, natural_text = self._explain("doctor_plan_natural")
        verdict = judge_plan(natural)
        evidence.append("EXPLAIN job_claim_many (limit 10, all queues), as the planner "
                        "chooses:")
        evidence += ["  " + line for line in natural_text]
        data["natural_plan"] = {"uses_index": verdict.uses_index, "problems": verdict.problems}

        if index is not None and index["valid"] and verdict.good and not verdict.sorts:
            return Finding("claim_plan", "ok",
                           f"the claim reads jobs through {CLAIM_INDEX}, in claim order",
                           evidence, data=data)
        return self._claim_plan_without_seqscan(index, pages, evidence, data)

    def _claim_plan_without_seqscan(
        self, index: DictRow | None, pages: int, evidence: list[str], data: dict[str, Any]
    ) -> Finding:
        """The natural plan does not read the index: ask whether the claim can at all."""
        forced, forced_text = self._explain("doctor_plan_without_seqscan")
        forced_verdict = judge_plan(forced)
        evidence.append("EXPLAIN with enable_seqscan = off (can the claim use the index at "
                        "all?):")
        evidence += ["  " + line for line in forced_text]
        data["plan_without_seqscan"] = {"uses_index": forced_verdict.uses_index,
                                        "problems": forced_verdict.problems}
        if index is None:
            return Finding(
                "claim_plan", "fail",
                f"the index {CLAIM_INDEX} is missing: even with seq scans priced out, the "
                "claim's plan has " + "; ".join(forced_verdict.problems),
                evidence, self._create_index_advice(), data,
            )
        if not index["valid"]:
            return Finding(
                "claim_plan", "fail",
                f"the claim cannot use {CLAIM_INDEX}: the index is invalid", evidence,
                f"rebuild it: REINDEX INDEX CONCURRENTLY \"{self.schema}\".{CLAIM_INDEX}", data,
            )
        if not forced_verdict.good:
            return Finding(
                "claim_plan", "fail",
                "even with seq scans priced out, the claim's plan has "
                + "; ".join(forced_verdict.problems), evidence,
                "compare the indexes of jobs with `pgbaton schema --sql` and recreate what "
                "differs; " + self._create_index_advice(), data,
            )
        if forced_verdict.sorts:
            return Finding(
                "claim_plan", "warn",
                f"the claim reads {CLAIM_INDEX} but sorts what it reads: the index's order "
                "does not match the claim's", evidence,
                self._create_index_advice() + " (after dropping the one that differs)", data,
            )
        if pages < SMALL_TABLE_PAGES:
            return Finding(
                "claim_plan", "ok",
                f"the claim can read jobs through {CLAIM_INDEX}; on a table this small "
                f"({_plural(pages, 'page')}) the planner rightly prefers a seq scan",
                evidence, data=data,
            )
        return Finding(
            "claim_plan", "warn",
            f"the planner prefers a seq scan of a {pages}-page jobs table over "
            f"{CLAIM_INDEX}", evidence,
            f"refresh the statistics: ANALYZE \"{self.schema}\".jobs; if the plan stays, "
            "check random_page_cost and effective_cache_size", data,
        )

    # leases -----------------------------------------------------------------------

    def _leader(self) -> tuple[str, DictRow | None]:
        leader = self._one("doctor_maintenance_leader", {"schema": self.schema})
        if leader is None:
            return ("maintenance leader: none (no session holds the advisory lock "
                    f"pgbaton.leader.{self.schema})", None)
        return (f"maintenance leader: pid {leader['pid']} "
                f"({leader['application_name'] or 'no application_name'}, "
                f"{leader['client_addr'] or 'local'}), "
                f"connected {age(leader['connected_seconds'])}", leader)

    def expired_leases(self) -> Finding:
        grace = self.thresholds.lease_grace
        rows = self._all("doctor_expired_leases", {"grace": grace, "limit": MAX_LISTED})
        leader_line, leader = self._leader()
        total = int(rows[0]["total"]) if rows else 0
        data: dict[str, Any] = {
            "expired": total, "grace_seconds": grace,
            "leader_pid": leader["pid"] if leader else None,
            "jobs": [{"id": r["id"], "task": r["task"], "queue": r["queue"],
                      "worker_id": r["worker_id"], "expired_seconds": r["expired_seconds"]}
                     for r in rows],
        }
        if not total:
            return Finding("expired_leases", "ok",
                           f"no running job is past its lease by more than {age(grace)}",
                           [leader_line], data=data)
        evidence = [
            f"job {r['id']} ({r['task']}, queue {r['queue']}), worker {r['worker_id']}, "
            f"attempt {r['attempts']}/{r['max_attempts']}: lease expired "
            f"{age(r['expired_seconds'])} ago"
            for r in rows
        ]
        if total > len(rows):
            evidence.append(f"... and {total - len(rows)} more")
        evidence.append(leader_line)
        summary = (f"{_plural(total, 'running job')} past {'its' if total == 1 else 'their'} "
                   f"lease by more than {age(grace)}")
        if leader is None:
            return Finding(
                "expired_leases", "fail", f"{summary}: the reaper is not running", evidence,
                "the reaper is not running: start a worker with maintenance (`pgbaton worker "
                "MODULE:APP` without --no-maintenance), or run Queue.reap()", data,
            )
        return Finding(
            "expired_leases", "fail",
            f"{summary}: the maintenance leader (pid {leader['pid']}) is not reaping them",
            evidence,
            f"look for 'reaper failed' in the log of the worker whose session is pid "
            f"{leader['pid']}, and restart it; Queue.reap() clears the backlog now", data,
        )

    # lag --------------------------------------------------------------------------

    def queue_lag(self) -> Finding:
        limit = self.thresholds.max_lag
        rows = self._all("doctor_queue_lag")
        evidence = [
            f"queue {r['queue']}: {r['due']} due, {r['scheduled']} scheduled, "
            f"{r['running']} running"
            + (f"; the oldest due job has waited {age(r['lag_seconds'])}"
               if r["lag_seconds"] is not None else "")
            for r in rows
        ]
        data = {"max_lag_seconds": limit,
                "queues": {r["queue"]: {"due": r["due"], "scheduled": r["scheduled"],
                                        "running": r["running"], "lag_seconds": r["lag_seconds"]}
                           for r in rows}}
        lagging = [r for r in rows if r["lag_seconds"] is not None and r["lag_seconds"] > limit]
        if lagging:
            names = ", ".join(r["queue"] for r in lagging)
            worst = max(r["lag_seconds"] for r in lagging)
            return Finding(
                "queue_lag", "fail",
                f"jobs wait longer than {age(limit)} to start in {names} (up to {age(worst)})",
                evidence,
                "no worker takes jobs from these queues, or too few do: start workers "
                "(`pgbaton worker MODULE:APP --queues ...`), raise --concurrency, or look for "
                "stalled ones (`pgbaton jobs --status running`)", data,
            )
        if not evidence:
            evidence = ["no pending or running jobs"]
        return Finding("queue_lag", "ok", f"no due job has waited longer than {age(limit)}",
                       evidence, data=data)

    # vacuum -----------------------------------------------------------------------

    def jobs_table_vacuum(self) -> Finding:
        row = self._one("doctor_jobs_vacuum", {"table": self.jobs_table})
        if row is None:
            return Finding("jobs_table_vacuum", "fail",
                           f"schema {self.schema!r} has no jobs table", [],
                           f"run `pgbaton migrate --schema {self.schema}`")
        live, dead = int(row["live_rows"]), int(row["dead_rows"])
        ratio = dead / (live + dead) if live + dead else 0.0
        schema_jobs = f'"{self.schema}".jobs'
        evidence = [
            f"live rows {live}, dead rows {dead} ({ratio:.0%}); autovacuum starts at about "
            f"{row['autovacuum_trigger']:.0f} dead rows",
            f"last autovacuum: {self._when(row['last_autovacuum'])}; "
            f"last manual vacuum: {self._when(row['last_vacuum'])}; "
            f"{row['autovacuum_count']} autovacuums, {row['vacuum_count']} manual",
            f"last autoanalyze: {self._when(row['last_autoanalyze'])}; "
            f"last manual analyze: {self._when(row['last_analyze'])}; "
            f"{row['modified_since_analyze']} rows changed since",
            f"table with indexes: {row['total_bytes']} bytes",
        ]
        data = {"live_rows": live, "dead_rows": dead, "dead_ratio": round(ratio, 4),
                "seconds_since_vacuum": row["seconds_since_vacuum"],
                "last_autovacuum": row["last_autovacuum"], "last_vacuum": row["last_vacuum"],
                "autovacuum_on": row["autovacuum_on"] and row["table_autovacuum_on"]}
        problems: list[str] = []
        advice: list[str] = []
        if not row["track_counts_on"]:
            problems.append("track_counts is off: the server keeps no row counts, and "
                            "autovacuum cannot tell when to run")
            advice.append("set track_counts = on")
        if not row["autovacuum_on"]:
            problems.append("autovacuum is off on this server")
            advice.append("turn it on (ALTER SYSTEM SET autovacuum = on; SELECT "
                          f"pg_reload_conf()), or run VACUUM (ANALYZE) {schema_jobs} on a "
                          "schedule: every claim and completion leaves a dead row version")
        if not row["table_autovacuum_on"]:
            problems.append("autovacuum is disabled on the jobs table")
            advice.append(f"ALTER TABLE {schema_jobs} RESET (autovacuum_enabled)")
        if dead >= MIN_DEAD_ROWS and ratio > self.thresholds.max_dead_ratio:
            problems.append(f"{ratio:.0%} of the row versions in jobs are dead "
                            f"(more than {self.thresholds.max_dead_ratio:.0%})")
            advice.append("look at old_transactions (an open transaction keeps dead rows "
                          f"alive), then VACUUM (VERBOSE) {schema_jobs}; a busy queue wants "
                          f"ALTER TABLE {schema_jobs} SET (autovacuum_vacuum_scale_factor = "
                          "0.01)")
        if problems:
            return Finding("jobs_table_vacuum", "warn", "; ".join(problems), evidence,
                           "; ".join(advice), data)
        return Finding("jobs_table_vacuum", "ok",
                       f"autovacuum keeps up with jobs ({ratio:.0%} dead)", evidence, data=data)

    @staticmethod
    def _when(value: Any) -> str:
        return "never" if value is None else value.isoformat(timespec="seconds")

    # sessions ---------------------------------------------------------------------

    def idle_in_transaction(self) -> Finding:
        limit = self.thresholds.max_idle_in_transaction
        rows = self._all("doctor_idle_in_transaction")
        hidden_row = self._one("doctor_hidden_sessions")
        hidden = int(hidden_row["hidden"]) if hidden_row else 0
        over = [r for r in rows if r["idle_seconds"] > limit]
        evidence = [self._idle_line(r) for r in rows[:MAX_LISTED]]
        if len(rows) > MAX_LISTED:
            evidence.append(f"... and {len(rows) - MAX_LISTED} more")
        if hidden:
            evidence.append(f"{_plural(hidden, 'session')} of other roles cannot be seen by "
                            f"{self.server.get('user')!r}")
        data = {"max_idle_seconds": limit, "hidden_sessions": hidden,
                "sessions": [{"pid": r["pid"], "application_name": r["application_name"],
                              "state": r["state"], "idle_seconds": r["idle_seconds"],
                              "transaction_seconds": r["transaction_seconds"],
                              "over_limit": r["idle_seconds"] > limit} for r in rows]}
        if over:
            pids = ", ".join(str(r["pid"]) for r in over)
            return Finding(
                "idle_in_transaction", "fail",
                f"{_plural(len(over), 'session')} idle in transaction for longer than "
                f"{age(limit)} (pid {pids})", evidence,
                "these sessions hold their locks and keep a transaction open: fix the code "
                "that waits between BEGIN and COMMIT, end them now with SELECT "
                "pg_terminate_backend(pid), and set idle_in_transaction_session_timeout so "
                "the server ends such sessions itself", data,
            )
        if hidden:
            return Finding(
                "idle_in_transaction", "warn",
                f"no visible session is idle in transaction for longer than {age(limit)}, but "
                f"{_plural(hidden, 'session')} cannot be seen", evidence,
                f"grant pg_monitor (or pg_read_all_stats) to {self.server.get('user')!r} so "
                "the doctor can see every session", data,
            )
        return Finding("idle_in_transaction", "ok",
                       f"no session is idle in transaction for longer than {age(limit)}",
                       evidence, data=data)

    @staticmethod
    def _idle_line(row: DictRow) -> str:
        line = (f"pid {row['pid']} {row['user']}@{row['client_addr'] or 'local'} "
                f"application {row['application_name']!r}: {row['state']} for "
                f"{age(row['idle_seconds'])}, transaction open {age(row['transaction_seconds'])}")
        if row["has_written"]:
            line += ", has written"
        if row["xmin_age"] is not None:
            line += f", holds a snapshot {row['xmin_age']} xids old"
        return line + f"; last statement: {row['last_query']}"

    def old_transactions(self) -> Finding:
        limit = self.thresholds.max_transaction_age
        sessions = self._all("doctor_old_snapshots")
        prepared = self._all("doctor_prepared_transactions")
        slots = self._all("doctor_replication_slots")
        old_sessions = [r for r in sessions if r["transaction_seconds"] > limit]
        old_prepared = [r for r in prepared if r["prepared_seconds"] > limit]
        idle_slots = [r for r in slots if not r["active"]]
        evidence = [
            f"pid {r['pid']} ({r['backend_type']}, application {r['application_name']!r}, "
            f"{r['state']}): transaction open {age(r['transaction_seconds'])}"
            + (f", snapshot {r['xmin_age']} xids old" if r["xmin_age"] is not None else "")
            + (f", wrote {r['xid_age']} xids ago" if r["xid_age"] is not None else "")
            + f"; last statement: {r['last_query']}"
            for r in (old_sessions or sessions[:1])
        ][:MAX_LISTED]
        evidence += [f"prepared transaction {r['gid']!r} of {r['owner']}: prepared "
                     f"{age(r['prepared_seconds'])} ago, {r['xid_age']} xids old"
                     for r in prepared[:MAX_LISTED]]
        evidence += [f"replication slot {r['slot_name']} ({r['slot_type']}, "
                     f"{'active' if r['active'] else 'inactive'}) holds xmin "
                     f"{r['xmin_age']} xids old" for r in slots[:MAX_LISTED]]
        if sessions and not old_sessions:
            evidence[0] = "oldest snapshot: " + evidence[0]
        data = {"max_transaction_seconds": limit,
                "sessions": [{"pid": r["pid"], "application_name": r["application_name"],
                              "transaction_seconds": r["transaction_seconds"],
                              "xmin_age": r["xmin_age"]} for r in old_sessions],
                "prepared": [r["gid"] for r in old_prepared],
                "inactive_slots": [r["slot_name"] for r in idle_slots]}
        if old_sessions or old_prepared:
            holders = [f"pid {r['pid']}" for r in old_sessions]
            holders += [f"prepared {r['gid']!r}" for r in old_prepared]
            return Finding(
                "old_transactions", "fail",
                f"{_plural(len(holders), 'transaction')} older than {age(limit)} "
                f"{'holds' if len(holders) == 1 else 'hold'} back vacuum "
                f"({', '.join(holders)})", evidence,
                "while they are open VACUUM cannot remove the dead job rows that every claim "
                "and completion leaves: commit or end them (SELECT pg_terminate_backend(pid); "
                "COMMIT PREPARED or ROLLBACK PREPARED 'gid'), and keep transactions short",
                data,
            )
        if idle_slots:
            return Finding(
                "old_transactions", "warn",
                "an inactive replication slot holds back vacuum: "
                + ", ".join(r["slot_name"] for r in idle_slots), evidence,
                "reconnect its consumer, or drop the slot if nothing uses it: SELECT "
                "pg_drop_replication_slot('name')", data,
            )
        if not evidence:
            evidence = ["no open transaction holds a snapshot or a transaction id"]
        return Finding("old_transactions", "ok",
                       f"no transaction older than {age(limit)} holds back vacuum",
                       evidence, data=data)


# -- the command ----------------------------------------------------------------------

_STYLES = {"ok": ("OK", "green"), "warn": ("WARN", "yellow"), "fail": ("FAIL", "bold red")}


def _render(findings: list[Finding], header: str) -> None:
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    console = Console()
    if not console.is_terminal:
        # Written to a file or a log: plan lines stay whole rather than wrap at 80.
        console = Console(width=160)
    table = Table("", "check", "finding, evidence and what to do", title=header,
                  show_lines=True, title_justify="left")
    table.columns[0].no_wrap = True
    table.columns[1].no_wrap = True
    table.columns[2].overflow = "fold"
    for finding in findings:
        label, style = _STYLES[finding.status]
        # Text, not markup: plan lines and queries hold brackets that rich would eat.
        cell = Text(finding.summary, style="bold")
        for line in finding.evidence:
            cell.append("\n" + line, style="dim")
        if finding.advice:
            cell.append("\n→ " + finding.advice, style="cyan")
        table.add_row(Text(label, style=style), finding.name, cell)
    console.print(table)
    failed = sum(f.status == "fail" for f in findings)
    warned = sum(f.status == "warn" for f in findings)
    if failed:
        verdict = Text(f"{_plural(failed, 'problem')}, {_plural(warned, 'warning')}",
                       style="bold red")
    elif warned:
        verdict = Text(f"healthy, with {_plural(warned, 'warning')}", style="yellow")
    else:
        verdict = Text("healthy", style="green")
    console.print(verdict)


@click.command()
@dsn_option
@schema_option
@json_option
@click.option("--max-idle-in-transaction", type=click.FloatRange(min=0), default=60.0,
              show_default=True, metavar="SECONDS",
              help="A session idle in transaction longer than this is a problem.")
@click.option("--max-transaction-age", type=click.FloatRange(min=0), default=300.0,
              show_default=True, metavar="SECONDS",
              help="A transaction holding a snapshot longer than this is a problem.")
@click.option("--lease-grace", type=click.FloatRange(min=0), default=30.0,
              show_default=True, metavar="SECONDS",
              help="A running job this long past its lease means nobody reaps.")
@click.option("--max-lag", type=click.FloatRange(min=0), default=300.0,
              show_default=True, metavar="SECONDS",
              help="A due job waiting longer than this to start is a problem.")
@click.option("--max-dead-ratio", type=click.FloatRange(min=0, max=1), default=0.5,
              show_default=True, metavar="FRACTION",
              help="A larger share of dead row versions in jobs is a warning.")
def doctor(
    *, dsn: str | None, schema: str, as_json: bool, max_idle_in_transaction: float,
    max_transaction_age: float, lease_grace: float, max_lag: float, max_dead_ratio: float,
) -> None:
    """Check a live installation and show the evidence; exit 1 when something is wrong.

    Checks the claim's plan (it must read the partial index jobs_claimable), running
    jobs past their lease (nobody reaps), queue lag, the jobs table's dead rows and
    autovacuum, sessions idle in transaction, old transactions that hold back vacuum,
    and the schema version. Nothing is changed.
    """
    _sql.check_schema_name(schema)
    thresholds = Thresholds(
        max_idle_in_transaction=max_idle_in_transaction,
        max_transaction_age=max_transaction_age, lease_grace=lease_grace,
        max_lag=max_lag, max_dead_ratio=max_dead_ratio,
    )
    dsn = resolve_dsn(dsn)
    with _database.connect(dsn, autocommit=True, application_name=APPLICATION_NAME) as conn:
        _database.check_server(conn)
        checker = Doctor(conn, schema, thresholds)
        findings = checker.run()
    status = overall(findings)
    server = checker.server
    if as_json:
        _print_json({
            "status": status,
            "schema": schema,
            "database": server.get("database"),
            "server_version": server.get("version"),
            "library_schema_version": _sql.schema_version(),
            "thresholds": asdict(thresholds),
            "findings": [asdict(f) for f in findings],
        })
    else:
        _render(findings, f"pgbaton doctor: schema {schema!r} in database "
                          f"{server.get('database')!r} at {redact_dsn(dsn)} "
                          f"(PostgreSQL {server.get('version')})")
    if status == "fail":
        sys.exit(1)
