"""The doctor's checks, as data: each is a function of an Inspection that returns a
Finding, listed in CHECKS in the order they run and report.

The checks of the jobs table run only when the schema holds one. The claim's plan and
the sessions have modules of their own (plans.py, sessions.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from psycopg.rows import DictRow

from .. import _database, _sql
from ..pooling import proxy_hint
from .findings import MAX_LISTED, Finding, age, plural
from .inspection import Inspection
from .plans import claim_plan
from .sessions import idle_in_transaction, old_transactions

# Dead rows below this count are noise whatever their share of a small table.
MIN_DEAD_ROWS = 1000


@dataclass(frozen=True)
class Check:
    name: str
    run: Callable[[Inspection], Finding]
    needs_jobs_table: bool
    # Probes the DSN itself: runs only where the inspection was given one (the command).
    needs_dsn: bool = False


def schema_version(inspection: Inspection) -> Finding:
    found = _database.schema_version(inspection.conn, inspection.schema)
    wanted = _sql.schema_version()
    data = {"found": found, "wanted": wanted}
    evidence = [f"schema {inspection.schema!r}: version {found}; this pgbaton: version {wanted}"]
    if found == wanted:
        return Finding("schema_version", "ok",
                       f"schema {inspection.schema!r} is at version {wanted}, as this pgbaton "
                       "expects", evidence, data=data)
    if found == 0:
        evidence.append("the checks of the jobs table were skipped: there is none")
        return Finding(
            "schema_version", "fail",
            f"schema {inspection.schema!r} holds no pgbaton tables", evidence,
            f"run `pgbaton migrate --schema {inspection.schema}` (or Queue.migrate()), or pass "
            "the --schema your workers use", data,
        )
    if found < wanted:
        return Finding(
            "schema_version", "fail",
            f"schema {inspection.schema!r} is at version {found}, older than this pgbaton's "
            f"{wanted}", evidence,
            f"run `pgbaton migrate --schema {inspection.schema}` (or Queue.migrate())", data,
        )
    return Finding(
        "schema_version", "fail",
        f"schema {inspection.schema!r} is at version {found}, newer than this pgbaton's "
        f"{wanted}", evidence,
        "upgrade pgbaton here: a newer pgbaton migrated this schema", data,
    )


def schema_objects(inspection: Inspection) -> Finding:
    """The live jobs table's indexes and constraints against those this pgbaton creates,
    both read from the catalogue; indexes a team added of its own are listed, not judged."""
    live, wanted = inspection.live(), inspection.reference
    table = inspection.jobs_table
    problems: list[str] = []
    evidence: list[str] = []
    advice: list[str] = []
    for name, index in wanted.indexes.items():
        found = live.indexes.get(name)
        create = inspection.index_create_statement(name)
        if found is None:
            problems.append(f"index {name} is missing")
            advice.append(f"{create}")
        elif (found["body"], found["is_unique"]) != (index["body"], index["is_unique"]):
            problems.append(f"index {name} differs")
            evidence.append(f"index {name}: {found['body']}; expected {index['body']}")
            advice.append(f'DROP INDEX CONCURRENTLY "{inspection.schema}".{name}; {create}')
        elif not found["valid"]:
            problems.append(f"index {name} is invalid")
            advice.append(f'REINDEX INDEX CONCURRENTLY "{inspection.schema}".{name}')
    for name, constraint in wanted.constraints.items():
        found = live.constraints.get(name)
        add = f"ALTER TABLE {table} ADD CONSTRAINT {name} {constraint['definition']}"
        if found is None:
            problems.append(f"constraint {name} is missing")
            advice.append(add)
        elif found["definition"] != constraint["definition"]:
            problems.append(f"constraint {name} differs")
            evidence.append(f"constraint {name}: {found['definition']}; expected "
                            f"{constraint['definition']}")
            advice.append(f"ALTER TABLE {table} DROP CONSTRAINT {name}; {add}")
    evidence.insert(0, f"compared with the catalogue of this pgbaton's schema: "
                       f"{plural(len(wanted.indexes), 'index')} (as {', '.join(wanted.indexes)}) "
                       f"and {plural(len(wanted.constraints), 'constraint')}")
    own = sorted(set(live.indexes) - set(wanted.indexes))
    if own:
        evidence.append(f"also on jobs, not pgbaton's: {', '.join(own)}")
    data = {"problems": problems, "other_indexes": own}
    if problems:
        return Finding("schema_objects", "fail",
                       f"the jobs table is not as this pgbaton made it: {'; '.join(problems)}",
                       evidence, "; ".join(advice), data)
    return Finding("schema_objects", "ok",
                   "the jobs table's indexes and constraints are as this pgbaton made them",
                   evidence, data=data)


def _leader(inspection: Inspection) -> tuple[str, DictRow | None]:
    leader = inspection.one("doctor_maintenance_leader", {"schema": inspection.schema})
    if leader is None:
        return ("maintenance leader: none (no session holds the advisory lock "
                f"pgbaton.leader.{inspection.schema})", None)
    return (f"maintenance leader: pid {leader['pid']} "
            f"({leader['application_name'] or 'no application_name'}, "
            f"{leader['client_addr'] or 'local'}), "
            f"connected {age(leader['connected_seconds'])}", leader)

def expired_leases(inspection: Inspection) -> Finding:
    grace = inspection.thresholds.lease_grace
    rows = inspection.all("doctor_expired_leases", {"grace": grace, "limit": MAX_LISTED})
    leader_line, leader = _leader(inspection)
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
    summary = (f"{plural(total, 'running job')} past {'its' if total == 1 else 'their'} "
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


def queue_lag(inspection: Inspection) -> Finding:
    limit = inspection.thresholds.max_lag
    rows = inspection.all("doctor_queue_lag")
    evidence = [
        f"queue {r['queue']}{' (paused)' if r['paused'] else ''}: {r['due']} due, "
        f"{r['scheduled']} scheduled, {r['running']} running"
        + (f"; the oldest due job has waited {age(r['lag_seconds'])}"
           if r["lag_seconds"] is not None else "")
        for r in rows
    ]
    data = {"max_lag_seconds": limit,
            "queues": {r["queue"]: {"paused": r["paused"], "due": r["due"],
                                    "scheduled": r["scheduled"],
                                    "running": r["running"], "lag_seconds": r["lag_seconds"]}
                       for r in rows}}
    lagging = [r for r in rows if r["lag_seconds"] is not None and r["lag_seconds"] > limit]
    paused = [r for r in lagging if r["paused"]]
    lagging = [r for r in lagging if not r["paused"]]
    if paused and not lagging:
        names = ", ".join(r["queue"] for r in paused)
        return Finding(
            "queue_lag", "warn",
            f"due jobs wait in {names} because {'it is' if len(paused) == 1 else 'they are'}"
            " paused", evidence,
            f"resume with `pgbaton queue resume {paused[0]['queue']}` when the pause is over",
            data,
        )
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


def jobs_table_vacuum(inspection: Inspection) -> Finding:
    row = inspection.one("doctor_jobs_vacuum", {"table": inspection.jobs_table})
    if row is None:
        return Finding("jobs_table_vacuum", "fail",
                       f"schema {inspection.schema!r} has no jobs table", [],
                       f"run `pgbaton migrate --schema {inspection.schema}`")
    live, dead = int(row["live_rows"]), int(row["dead_rows"])
    ratio = dead / (live + dead) if live + dead else 0.0
    schema_jobs = f'"{inspection.schema}".jobs'
    evidence = [
        f"live rows {live}, dead rows {dead} ({ratio:.0%}); autovacuum starts at about "
        f"{row['autovacuum_trigger']:.0f} dead rows",
        f"last autovacuum: {_when(row['last_autovacuum'])}; "
        f"last manual vacuum: {_when(row['last_vacuum'])}; "
        f"{row['autovacuum_count']} autovacuums, {row['vacuum_count']} manual",
        f"last autoanalyze: {_when(row['last_autoanalyze'])}; "
        f"last manual analyze: {_when(row['last_analyze'])}; "
        f"{row['modified_since_analyze']} rows changed since",
        f"table with indexes: {row['total_bytes']} bytes",
    ]
    history = inspection.one("doctor_history_size",
                             {"table": f'"{inspection.schema}".jobs_history'}) or {}
    if history.get("partitions"):
        evidence.append(f"jobs_history (the history retention mode): "
                        f"{history['partitions']} partitions, {history['bytes']} bytes")
    data = {"live_rows": live, "dead_rows": dead, "dead_ratio": round(ratio, 4),
            "history_partitions": int(history.get("partitions") or 0),
            "history_bytes": int(history.get("bytes") or 0),
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
    if dead >= MIN_DEAD_ROWS and ratio > inspection.thresholds.max_dead_ratio:
        problems.append(f"{ratio:.0%} of the row versions in jobs are dead "
                        f"(more than {inspection.thresholds.max_dead_ratio:.0%})")
        advice.append("look at old_transactions (an open transaction keeps dead rows "
                      f"alive), then VACUUM (VERBOSE) {schema_jobs}; a busy queue wants "
                      f"ALTER TABLE {schema_jobs} SET (autovacuum_vacuum_scale_factor = "
                      "0.01)")
    if problems:
        return Finding("jobs_table_vacuum", "warn", "; ".join(problems), evidence,
                       "; ".join(advice), data)
    return Finding("jobs_table_vacuum", "ok",
                   f"autovacuum keeps up with jobs ({ratio:.0%} dead)", evidence, data=data)

def connection_pooling(inspection: Inspection) -> Finding:
    """Whether the DSN gives each client a session of its own (pooling.py probes it)."""
    server = inspection.one("server_backend") or {}
    assert inspection.dsn is not None
    hint = proxy_hint(inspection.dsn, server.get("port"))
    evidence = [line for line in (inspection.pooled, hint) if line]
    data = {"transaction_pool": inspection.pooled is not None, "server_port": server.get("port")}
    if inspection.pooled is None:
        return Finding("connection_pooling", "ok",
                       "each connection of this DSN has a server session of its own "
                       "(LISTEN and the leader's lock work)", evidence, data=data)
    evidence.append("the doctor set no statement or lock timeout: on a transaction pool "
                    "they would stay on a server connection that other clients use next")
    return Finding(
        "connection_pooling", "warn",
        "this DSN goes through a transaction pool (PgBouncer): enqueues, claims and the "
        "dashboard work through it; LISTEN and the maintenance leader's advisory lock "
        "do not", evidence,
        "run workers on it with --listen-dsn set to a direct connection to PostgreSQL "
        "(without one they poll and must run with --no-maintenance); client code that "
        "repeats statements needs PgBouncer 1.21+ with max_prepared_statements, or "
        "prepare_threshold=None (docs/howto/pgbouncer.md)", data,
    )


def _when(value: Any) -> str:
    return "never" if value is None else value.isoformat(timespec="seconds")


CHECKS: tuple[Check, ...] = (
    Check("schema_version", schema_version, needs_jobs_table=False),
    Check("schema_objects", schema_objects, needs_jobs_table=True),
    Check("claim_plan", claim_plan, needs_jobs_table=True),
    Check("expired_leases", expired_leases, needs_jobs_table=True),
    Check("queue_lag", queue_lag, needs_jobs_table=True),
    Check("jobs_table_vacuum", jobs_table_vacuum, needs_jobs_table=True),
    Check("idle_in_transaction", idle_in_transaction, needs_jobs_table=False),
    Check("old_transactions", old_transactions, needs_jobs_table=False),
    Check("connection_pooling", connection_pooling, needs_jobs_table=False, needs_dsn=True),
)


def run_checks(inspection: Inspection) -> list[Finding]:
    """Every check, in order; without a jobs table, only those that need none."""
    findings: list[Finding] = []
    has_jobs_table = True
    for check in CHECKS:
        if (check.needs_jobs_table and not has_jobs_table) or (
            check.needs_dsn and inspection.dsn is None
        ):
            continue
        finding = inspection.guarded(check.name, check.run)
        if check.name == "schema_version":
            has_jobs_table = finding.data.get("found") != 0
        findings.append(finding)
    return findings
