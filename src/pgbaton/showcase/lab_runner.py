"""The lab's own process: runs each strategy on a fresh schema with a pool of spawned
workers, samples pg_stat_activity meanwhile, and counts the outcome in SQL."""

from __future__ import annotations

import contextlib
import multiprocessing
import queue as stdlib_queue
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import click
import psycopg
from psycopg.rows import DictRow

from .. import _database, _sql
from ..errors import PgbatonError
from .lab_workers import (
    BATCH_SIZE,
    SPAWN,
    START_TIMEOUT_SECONDS,
    Strategy,
    WorkerTask,
    worker_main,
)

# pg_stat_activity is polled this often; the waits are integrated over the samples.
SAMPLE_INTERVAL_SECONDS = 0.002


class _Sampler(threading.Thread):
    """Polls pg_stat_activity for one strategy's sessions and integrates over time."""

    def __init__(self, dsn: str, application_name: str) -> None:
        super().__init__(name="pgbaton-lab-sampler", daemon=True)
        self._dsn = dsn
        self._prefix = application_name
        self._stop_requested = threading.Event()
        self.ready = threading.Event()
        self.error: BaseException | None = None
        self.samples = 0
        self.sampled_seconds = 0.0
        self.lock_wait_seconds = 0.0
        self.held_seconds = 0.0
        self.held_peak = 0

    def run(self) -> None:
        try:
            self._sample()
        except BaseException as error:
            self.error = error
        finally:
            self.ready.set()

    def _sample(self) -> None:
        query = _sql.queries("pgbaton")["lab_activity_sample"]
        with _database.connect(
            self._dsn, autocommit=True, application_name="pgbaton-lab-sampler"
        ) as conn:
            previous: DictRow | None = None
            while not self._stop_requested.is_set():
                began = time.monotonic()
                row = conn.execute(query, {"prefix": self._prefix}).fetchone()
                assert row is not None
                if previous is not None:
                    # What one sample saw is taken to last until the next sample, on the
                    # server's clock.
                    seconds = (row["at"] - previous["at"]).total_seconds()
                    self.sampled_seconds += seconds
                    self.lock_wait_seconds += previous["waiting"] * seconds
                    self.held_seconds += previous["held"] * seconds
                self.held_peak = max(self.held_peak, row["held"])
                self.samples += 1
                previous = row
                self.ready.set()
                time.sleep(max(0.0, SAMPLE_INTERVAL_SECONDS - (time.monotonic() - began)))

    def finish(self) -> None:
        self._stop_requested.set()
        self.join()
        if self.error is not None:
            raise self.error


@dataclass(frozen=True)
class Settings:
    workers: int
    jobs: int
    work_ms: float
    race_gap_ms: float

    @property
    def timeout_seconds(self) -> float:
        # Strategies 1 and 3 do the jobs one after another; far more than that is a hang.
        serial = self.jobs * (self.work_ms + self.race_gap_ms + 5.0) / 1000.0
        return 60.0 + 5.0 * serial


class _Pool:
    """The spawned worker processes, reused from one strategy to the next."""

    def __init__(self, count: int) -> None:
        self.start = SPAWN.Barrier(count)
        self.reports: multiprocessing.Queue[dict[str, Any]] = SPAWN.Queue()
        self.inboxes: list[multiprocessing.Queue[WorkerTask | None]] = [
            SPAWN.Queue() for _ in range(count)
        ]
        self.processes = [
            SPAWN.Process(
                target=worker_main, args=(index, self.start, inbox, self.reports),
                name=f"pgbaton-lab-w{index}", daemon=True,
            )
            for index, inbox in enumerate(self.inboxes)
        ]
        for process in self.processes:
            process.start()

    def run(self, task: WorkerTask) -> list[dict[str, Any]]:
        for inbox in self.inboxes:
            inbox.put(task)
        deadline = time.monotonic() + START_TIMEOUT_SECONDS + task.timeout_seconds
        reports: list[dict[str, Any]] = []
        while len(reports) < len(self.processes):
            try:
                report = self.reports.get(timeout=0.5)
            except stdlib_queue.Empty:
                for process in self.processes:
                    if not process.is_alive():
                        raise PgbatonError(
                            f"lab worker {process.name} died (exit code {process.exitcode})"
                        ) from None
                if time.monotonic() > deadline:
                    raise PgbatonError(
                        f"strategy {task.strategy} did not finish in "
                        f"{task.timeout_seconds:.0f} s"
                    ) from None
                continue
            if "error" in report:
                click.echo(report["error"], err=True)
                last_line = report["error"].strip().splitlines()[-1]
                raise PgbatonError(
                    f"lab worker {report['worker']} failed in strategy {task.strategy}: "
                    f"{last_line}"
                )
            reports.append(report)
        return reports

    def close(self) -> None:
        self.start.abort()  # frees any worker still at the start line
        for inbox in self.inboxes:
            inbox.put(None)
        for process in self.processes:
            process.join(timeout=10)
            if process.is_alive():
                process.kill()
                process.join()


def _fetch(conn: psycopg.Connection[DictRow], query: str, **params: Any) -> DictRow:
    row = conn.execute(query, params).fetchone()
    assert row is not None
    return row


def _run_strategy(
    conn: psycopg.Connection[DictRow], pool: _Pool, *, dsn: str, run_id: str,
    strategy: Strategy, settings: Settings,
) -> dict[str, Any]:
    schema = f"pgbaton_lab_{run_id}_{strategy.number}"
    sql = _sql.queries(schema)
    conn.execute(sql["lab_schema_create"])
    for name in ("lab_jobs_create", "lab_jobs_index_create", "lab_effects_create"):
        conn.execute(sql[name])
    conn.execute(sql["lab_jobs_fill"], {"jobs": settings.jobs})
    conn.execute(sql["lab_jobs_analyze"])

    task = WorkerTask(
        strategy=strategy.number, dsn=dsn, schema=schema,
        application_name=f"pgbaton-lab-{run_id}-{strategy.number}-w",
        work_seconds=settings.work_ms / 1000.0,
        race_gap_seconds=settings.race_gap_ms / 1000.0,
        lease_seconds=60.0 + BATCH_SIZE * settings.work_ms / 1000.0 * 3,
        timeout_seconds=settings.timeout_seconds,
    )
    sampler = _Sampler(dsn, task.application_name)
    sampler.start()
    sampler.ready.wait()
    if sampler.error is not None:
        raise sampler.error
    try:
        reports = pool.run(task)
    finally:
        sampler.finish()

    effects = [(job_id, r["worker"], at) for r in reports for job_id, at in r["effects"]]
    conn.execute(sql["lab_effects_insert"], {
        "job_ids": [e[0] for e in effects], "workers": [e[1] for e in effects],
        "ats": [e[2] for e in effects],
    })
    outcome = _fetch(conn, sql["lab_outcome"])
    # From the first worker leaving the start line to the last one finding no job left.
    seconds = max(
        max(r["finished"] for r in reports) - min(r["started"] for r in reports), 1e-6
    )
    finished_jobs = outcome["jobs"] - outcome["unfinished"]
    return {
        "number": strategy.number,
        "strategy": strategy.name,
        "description": strategy.description,
        "schema": schema,
        "jobs": outcome["jobs"],
        "seconds": round(seconds, 3),
        "jobs_per_second": round(finished_jobs / seconds, 1),
        "doubles": outcome["doubles"],
        "performances": outcome["performances"],
        "unfinished": outcome["unfinished"],
        "never_performed": outcome["jobs"] - outcome["performed"],
        "lost_races": sum(r["lost_races"] for r in reports),
        "round_trips": sum(r["round_trips"] for r in reports),
        "lock_wait_seconds": round(sampler.lock_wait_seconds, 3),
        "connections_held_mean": round(sampler.held_seconds / seconds, 2),
        "connections_held_peak": sampler.held_peak,
        "connections_open": settings.workers,
        "samples": sampler.samples,
        "sample_interval_ms": (
            round(1000 * sampler.sampled_seconds / (sampler.samples - 1), 2)
            if sampler.samples > 1 else None
        ),
    }


def _drop_schemas(
    conn: psycopg.Connection[DictRow], run_id: str, strategies: list[Strategy]
) -> None:
    for strategy in strategies:
        schema = f"pgbaton_lab_{run_id}_{strategy.number}"
        conn.execute(_sql.queries(schema)["lab_schema_drop"])


def run_lab(
    dsn: str, settings: Settings, strategies: list[Strategy], *, keep: bool = False,
    progress: Callable[[str], None] = lambda _: None,
) -> dict[str, Any]:
    """Run the chosen strategies one after another and return what was measured."""
    run_id = uuid.uuid4().hex[:8]
    results: list[dict[str, Any]] = []
    with _database.connect(dsn, autocommit=True, application_name="pgbaton-lab") as conn:
        version = _fetch(conn, _sql.queries("pgbaton")["server_version"])
        progress(f"starting {settings.workers} worker processes")
        pool = _Pool(settings.workers)
        try:
            for strategy in strategies:
                progress(f"strategy {strategy.number}: {strategy.name} ...")
                results.append(_run_strategy(
                    conn, pool, dsn=dsn, run_id=run_id, strategy=strategy, settings=settings,
                ))
                progress(f"strategy {strategy.number}: done in {results[-1]['seconds']:.2f} s")
        except BaseException:
            pool.close()
            # Best effort: the error that got us here is the one to report.
            with contextlib.suppress(psycopg.Error):
                _drop_schemas(conn, run_id, strategies)
            raise
        pool.close()
        if not keep:
            _drop_schemas(conn, run_id, strategies)
    if not keep:
        for result in results:
            del result["schema"]
    return {
        "server_version": version["version"],
        "workers": settings.workers,
        "jobs": settings.jobs,
        "work_ms": settings.work_ms,
        "race_gap_ms": settings.race_gap_ms,
        "strategies": results,
    }
