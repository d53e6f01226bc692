"""`pgbaton lab`: the seed's claim strategies side by side, measured on this machine.

Each strategy gets a fresh schema with the seed's simple `jobs` table and an `effects`
table, the same number of jobs and the same simulated work. W worker processes (spawned,
started together at a barrier) claim and perform jobs until none is left. Everything in
the table is measured: doubles are counted in SQL from the effects rows, lost races are
the claim round trips that came back empty while jobs were pending, and lock waits and
held connections are what pg_stat_activity reports, sampled every few milliseconds.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import multiprocessing
import multiprocessing.synchronize
import queue as stdlib_queue
import threading
import time
import traceback
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click
import psycopg
from psycopg.rows import DictRow

from . import _database, _sql
from ._cli_common import _print_json, dsn_option, json_option, resolve_dsn
from .errors import PgbatonError

SPAWN = multiprocessing.get_context("spawn")

BATCH_SIZE = 10
# A spawned worker imports psycopg afresh; on a busy 2-core machine that takes seconds.
START_TIMEOUT_SECONDS = 60.0
# pg_stat_activity is polled this often; the waits are integrated over the samples.
SAMPLE_INTERVAL_SECONDS = 0.002


@dataclass(frozen=True)
class Strategy:
    number: int
    name: str  # short, for the table and the chart
    description: str


STRATEGIES = (
    Strategy(1, "SELECT+UPDATE",
             "SELECT the oldest pending id, then UPDATE ... WHERE id = $1, unchecked"),
    Strategy(2, "SELECT+guarded UPDATE",
             "the same, the UPDATE guarded by AND status = 'pending', row count checked"),
    Strategy(3, "FOR UPDATE, held",
             "BEGIN; SELECT ... FOR UPDATE; work; UPDATE; COMMIT (the practice question)"),
    Strategy(4, "SKIP LOCKED",
             "the seed's one-statement SKIP LOCKED claim; work; complete with its token"),
    Strategy(5, f"SKIP LOCKED x{BATCH_SIZE}",
             f"the same, claiming and completing {BATCH_SIZE} jobs at a time"),
)


@dataclass(frozen=True)
class _Task:
    """What one worker process runs for one strategy."""

    strategy: int
    dsn: str
    schema: str
    application_name: str
    work_seconds: float
    race_gap_seconds: float
    lease_seconds: float
    timeout_seconds: float


# ---------------------------------------------------------------------------------------
# Worker side (runs in the spawned processes)


@dataclass
class _Session:
    """One worker's connection and its own counts of what it did."""

    conn: psycopg.Connection[DictRow]
    sql: dict[str, str]
    task: _Task
    worker: str
    deadline: float
    round_trips: int = 0
    lost_races: int = 0
    effects: list[tuple[int, float]] = field(default_factory=list)

    def run(self, name: str, **params: Any) -> psycopg.Cursor[DictRow]:
        if time.monotonic() > self.deadline:
            raise TimeoutError(
                f"{self.worker} still working after {self.task.timeout_seconds:.0f} s"
            )
        self.round_trips += 1
        return self.conn.execute(self.sql[name], params)

    def perform(self, job_id: int) -> None:
        """The job's work, then its external effect (an email, say).

        The effect is kept here and written to the effects table after the run: like an
        email it must not roll back with the claim's transaction, and writing it must
        not add a round trip that the strategies would be measured on.
        """
        if self.task.work_seconds:
            time.sleep(self.task.work_seconds)
        self.effects.append((job_id, time.time()))

    def race_gap(self) -> None:
        """The application's time between reading an id and updating its row."""
        if self.task.race_gap_seconds:
            time.sleep(self.task.race_gap_seconds)

    def jobs_left(self) -> bool:
        row = self.run("lab_pending_exists").fetchone()
        return bool(row and row["pending"])


def _select_then_update(session: _Session, *, guarded: bool) -> None:
    update = "lab_guarded_update" if guarded else "lab_naive_update"
    while True:
        row = session.run("lab_naive_select").fetchone()
        if row is None:
            return
        job_id = row["id"]
        session.race_gap()
        if session.run(update, id=job_id, worker=session.worker).rowcount == 0:
            session.lost_races += 1
            continue
        session.perform(job_id)
        session.run("lab_job_finish", id=job_id)


def _naive(session: _Session) -> None:
    _select_then_update(session, guarded=False)


def _guarded(session: _Session) -> None:
    _select_then_update(session, guarded=True)


def _for_update_held(session: _Session) -> None:
    while True:
        with session.conn.transaction():
            session.round_trips += 2  # BEGIN and COMMIT
            row = session.run("lab_locking_select").fetchone()
            if row is not None:
                session.perform(row["id"])
                session.run("lab_job_finish", id=row["id"])
        if row is None:
            if not session.jobs_left():
                return
            session.lost_races += 1


def _skip_locked(session: _Session, batch: int) -> None:
    while True:
        claimed = session.run(
            "lab_skip_locked_claim", limit=batch, lease=session.task.lease_seconds,
            worker=session.worker,
        ).fetchall()
        if not claimed:
            if not session.jobs_left():
                return
            session.lost_races += 1
            continue
        for row in claimed:
            session.perform(row["id"])
        session.run(
            "lab_skip_locked_complete",
            ids=[row["id"] for row in claimed], tokens=[row["claim_token"] for row in claimed],
        )


def _skip_locked_one(session: _Session) -> None:
    _skip_locked(session, 1)


def _skip_locked_batch(session: _Session) -> None:
    _skip_locked(session, BATCH_SIZE)


_LOOPS: dict[int, Callable[[_Session], None]] = {
    1: _naive, 2: _guarded, 3: _for_update_held, 4: _skip_locked_one, 5: _skip_locked_batch,
}


def _run_task(
    index: int, start: multiprocessing.synchronize.Barrier, task: _Task
) -> dict[str, Any]:
    worker = f"w{index}"
    with _database.connect(
        task.dsn, autocommit=True, application_name=f"{task.application_name}{index}"
    ) as conn:
        session = _Session(
            conn, _sql.queries(task.schema), task, worker,
            deadline=time.monotonic() + START_TIMEOUT_SECONDS + task.timeout_seconds,
        )
        start.wait(timeout=START_TIMEOUT_SECONDS)
        started = time.time()
        _LOOPS[task.strategy](session)
        finished = time.time()
    return {
        "worker": worker, "started": started, "finished": finished,
        "round_trips": session.round_trips, "lost_races": session.lost_races,
        "effects": session.effects,
    }


def _worker_main(
    index: int,
    start: multiprocessing.synchronize.Barrier,
    tasks: multiprocessing.Queue[_Task | None],
    reports: multiprocessing.Queue[dict[str, Any]],
) -> None:
    """A lab worker process: runs one task per strategy until it is sent None."""
    while True:
        try:
            task = tasks.get()
        except KeyboardInterrupt:
            return  # the lab process cleans up
        if task is None:
            return
        try:
            reports.put(_run_task(index, start, task))
        except KeyboardInterrupt:
            return
        except BaseException:
            # Release the others from the start line at once instead of at its timeout.
            start.abort()
            reports.put({"worker": f"w{index}", "error": traceback.format_exc()})
            return


# ---------------------------------------------------------------------------------------
# Lab side (the `pgbaton lab` process)


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
        self.inboxes: list[multiprocessing.Queue[_Task | None]] = [
            SPAWN.Queue() for _ in range(count)
        ]
        self.processes = [
            SPAWN.Process(
                target=_worker_main, args=(index, self.start, inbox, self.reports),
                name=f"pgbaton-lab-w{index}", daemon=True,
            )
            for index, inbox in enumerate(self.inboxes)
        ]
        for process in self.processes:
            process.start()

    def run(self, task: _Task) -> list[dict[str, Any]]:
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

    task = _Task(
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


# ---------------------------------------------------------------------------------------
# Output


def _print_table(report: dict[str, Any]) -> None:
    from rich import box
    from rich.console import Console
    from rich.table import Table

    rows = report["strategies"]
    intervals = [r["sample_interval_ms"] for r in rows if r["sample_interval_ms"]]
    every = f"~{sum(intervals) / len(intervals):.0f} ms" if intervals else "few ms"
    table = Table(
        box=box.SIMPLE_HEAD,
        pad_edge=False,
        collapse_padding=True,
        title=(
            f"pgbaton lab: {report['workers']} workers, {report['jobs']} jobs of "
            f"{report['work_ms']:g} ms work, {report['race_gap_ms']:g} ms between SELECT "
            f"and UPDATE, PostgreSQL {report['server_version']}"
        ),
    )
    for header in ("#", "strategy", "jobs/s", "doubles", "lost\nraces", "lock\nwait s",
                   "conns\nheld", "peak\nheld", "round\ntrips"):
        table.add_column(header, justify="left" if header == "strategy" else "right",
                         no_wrap=header == "strategy")
    for r in rows:
        table.add_row(
            str(r["number"]), r["strategy"], f"{r['jobs_per_second']:.0f}",
            str(r["doubles"]), str(r["lost_races"]), f"{r['lock_wait_seconds']:.2f}",
            f"{r['connections_held_mean']:.2f}", str(r["connections_held_peak"]),
            str(r["round_trips"]),
        )
    console = Console()
    console.print(table)
    for r in rows:
        console.print(f"{r['number']}  {r['description']}", highlight=False)
    console.print(
        "\ndoubles: jobs performed by more than one worker, counted in the effects table.\n"
        "lost races: claims that came back without a job while jobs were still pending.\n"
        "lock wait: seconds the workers' sessions spent waiting for a lock; conns held: "
        "sessions inside a transaction or a statement (mean over the run, and peak); both "
        f"from pg_stat_activity, sampled every {every}. Every worker keeps one connection "
        "open throughout.",
        highlight=False,
    )


_COLOURS = ("#c0392b", "#e67e22", "#8e44ad", "#27ae60", "#2980b9")


def _plot(report: dict[str, Any], path: Path) -> None:
    # Imported by name: matplotlib is optional, and this keeps the type check independent
    # of whether it is installed.
    matplotlib = importlib.import_module("matplotlib")
    matplotlib.use("Agg")
    pyplot = importlib.import_module("matplotlib.pyplot")

    rows = report["strategies"]
    numbers = [str(r["number"]) for r in rows]
    panels = [
        ("jobs per second", [r["jobs_per_second"] for r in rows]),
        ("doubles: jobs performed by two workers or more", [r["doubles"] for r in rows]),
        ("lost races", [r["lost_races"] for r in rows]),
        ("seconds waiting for locks", [r["lock_wait_seconds"] for r in rows]),
        ("connections held (mean)", [r["connections_held_mean"] for r in rows]),
        ("round trips", [r["round_trips"] for r in rows]),
    ]
    colours = [_COLOURS[(r["number"] - 1) % len(_COLOURS)] for r in rows]
    figure, axes = pyplot.subplots(2, 3, figsize=(14, 8), layout="constrained")
    for axis, (title, values) in zip(axes.flat, panels, strict=True):
        bars = axis.bar(numbers, values, color=colours)
        axis.bar_label(bars, fmt="%g", fontsize=8)
        axis.set_title(title, fontsize=10)
        axis.set_xlabel("strategy", fontsize=8)
        axis.margins(y=0.15)
    figure.legend(
        bars, [f"{r['number']}  {r['strategy']}" for r in rows],
        loc="outside lower center", ncol=len(rows), frameon=False,
    )
    figure.suptitle(
        f"pgbaton lab: {report['workers']} workers, {report['jobs']} jobs of "
        f"{report['work_ms']:g} ms, PostgreSQL {report['server_version']}"
    )
    figure.savefig(path, dpi=100)
    pyplot.close(figure)


def _strategy_list(
    ctx: click.Context, param: click.Parameter, value: str
) -> list[Strategy]:
    by_number = {str(s.number): s for s in STRATEGIES}
    chosen = [part.strip() for part in value.split(",") if part.strip()]
    unknown = [part for part in chosen if part not in by_number]
    if unknown or not chosen:
        raise click.BadParameter(
            f"{value!r}: give numbers from 1 to {len(STRATEGIES)}, comma-separated"
        )
    return [by_number[part] for part in sorted(set(chosen), key=int)]


@click.command()
@click.option("--workers", type=click.IntRange(1, 64), default=4, show_default=True,
              help="Worker processes, each with one connection.")
@click.option("--jobs", type=click.IntRange(1, 1_000_000), default=200, show_default=True,
              help="Jobs per strategy.")
@click.option("--work-ms", type=click.FloatRange(0, 60_000), default=5.0, show_default=True,
              help="Simulated work per job, in milliseconds.")
@click.option("--race-gap", "race_gap_ms", type=click.FloatRange(0, 60_000), default=1.0,
              show_default=True,
              help="Milliseconds between SELECT and UPDATE in strategies 1 and 2 (the "
                   "application's own time and the network's).")
@click.option("--strategies", "chosen", default="1,2,3,4,5", show_default=True,
              callback=_strategy_list, help="Which strategies to run, comma-separated.")
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False, path_type=Path),
              default=None, help="Also draw the comparison into this PNG (needs matplotlib).")
@click.option("--keep", is_flag=True,
              help="Keep each strategy's schema (jobs and effects tables) to inspect.")
@dsn_option
@json_option
def lab(
    *, workers: int, jobs: int, work_ms: float, race_gap_ms: float, chosen: list[Strategy],
    plot_path: Path | None, keep: bool, dsn: str | None, as_json: bool,
) -> None:
    """Run the seed's claim strategies side by side and measure them.

    Every strategy gets the same jobs, workers and work time in a schema of its own:
    1 SELECT then UPDATE; 2 the same with the UPDATE guarded by status = 'pending';
    3 SELECT ... FOR UPDATE in one transaction held for the whole job; 4 the seed's
    FOR UPDATE SKIP LOCKED claim, committed before the work; 5 the same in batches of 10.
    """
    if plot_path is not None:
        if importlib.util.find_spec("matplotlib") is None:
            raise PgbatonError(
                "--plot needs matplotlib, which is not installed: pip install matplotlib"
            )
        if not plot_path.parent.is_dir():
            raise click.BadParameter(
                f"folder {str(plot_path.parent)!r} does not exist", param_hint="--plot"
            )
    settings = Settings(workers=workers, jobs=jobs, work_ms=work_ms, race_gap_ms=race_gap_ms)
    report = run_lab(
        resolve_dsn(dsn), settings, chosen, keep=keep,
        progress=lambda line: click.echo(f"lab: {line}", err=True),
    )
    if plot_path is not None:
        _plot(report, plot_path)
    if as_json:
        _print_json(report)
        return
    _print_table(report)
    if plot_path is not None:
        click.echo(f"chart written to {plot_path}")
    if keep:
        schemas = ", ".join(r["schema"] for r in report["strategies"])
        click.echo(f"kept schemas: {schemas}")
