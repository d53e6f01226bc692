"""`pgbaton demo`: the crash-and-stall story on a real PostgreSQL, then the proof, in SQL.

Eight worker processes drain a few thousand jobs. One is killed with SIGKILL mid-job and
its jobs come back after their lease; one stalls past its lease and its late completion
is refused by the claim token; a poison job ends `failed`; one customer's orders run
strictly in order while the others run in parallel; a job enqueued in a rolled-back
transaction never appears. The report is computed from the database, not from counters
kept here (every statement is named in sql/demo.sql), and the command exits non-zero if
any invariant failed. The throughput line is a measurement shown beside the report, not
an invariant: no threshold on a shared machine would be honest.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
from psycopg.rows import dict_row
from rich.console import Console, Group
from rich.live import Live
from rich.table import Table

from .. import _sql
from ..queue import Queue
from . import demo_app, watch

LEASE = 2.0
STALL = 60.0  # at most; the stall ends once another worker has done the job
CUSTOMERS = 200
ORDERS_PER_CUSTOMER = 10
IN_ORDER_CUSTOMER = "acme"
IN_ORDER_ORDERS = 40
LONG_JOBS = 4


@dataclass
class WorkerProc:
    name: str
    role: str
    queues: str
    process: subprocess.Popen[bytes]
    log: Path
    state: str = "running"

    @property
    def pid(self) -> int:
        return self.process.pid


@dataclass
class Check:
    name: str
    passed: bool
    evidence: str


@dataclass
class Demo:
    dsn: str
    schema: str
    console: Console
    workdir: Path
    workers: list[WorkerProc] = field(default_factory=list)
    events: deque[str] = field(default_factory=lambda: deque(maxlen=9))
    started: float = field(default_factory=time.monotonic)

    # -- plumbing ---------------------------------------------------------------------

    def sql(self, name: str, **params: Any) -> list[dict[str, Any]]:
        """Runs the named statement of sql/demo.sql in the demo's schema."""
        with psycopg.connect(self.dsn, autocommit=True, row_factory=dict_row) as conn:
            cursor = conn.execute(_sql.queries(self.schema)[name], params)
            return cursor.fetchall() if cursor.description else []

    def count(self, name: str, **params: Any) -> int:
        return int(self.sql(name, **params)[0]["n"])

    def event(self, text: str) -> None:
        self.events.append(f"[dim]{time.monotonic() - self.started:5.1f}s[/] {text}")

    def start_worker(self, name: str, role: str, queues: str, *options: str) -> WorkerProc:
        log = self.workdir / f"{name}.log"
        env = {**os.environ, "PGBATON_DEMO_SCHEMA": self.schema, "PGBATON_DSN": self.dsn}
        with log.open("wb") as out:
            process = subprocess.Popen(
                [sys.executable, "-m", "pgbaton", "worker", "pgbaton.showcase.demo_app:app",
                 "--schema", self.schema, "--queues", queues, "--lease", str(LEASE),
                 "--concurrency", "8", "--poll-interval", "0.5",
                 "--stats-file", str(log.with_suffix(".stats.json")), *options],
                stdout=out, stderr=subprocess.STDOUT, env=env,
            )
        worker = WorkerProc(name, role, queues, process, log)
        self.workers.append(worker)
        self.event(f"{name} started (pid {process.pid}, queues {queues}) {role}")
        return worker

    def wait(self, live: Live, until: Callable[[], bool], what: str, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while not until():
            if time.monotonic() > deadline:
                raise RuntimeError(f"the demo timed out waiting for {what}")
            live.update(self.view())
            time.sleep(0.1)
        live.update(self.view())

    # -- the live view ----------------------------------------------------------------

    def view(self) -> Group:
        counts = {r["status"]: r["n"] for r in self.sql("demo_jobs_by_status")}
        done_by = {r["pid"]: r["n"] for r in self.sql("demo_jobs_done_by_pid")}
        workers = Table("worker", "pid", "queues", "state", "jobs done", title="workers")
        for w in self.workers:
            if w.state == "running" and w.process.poll() is not None:
                w.state = f"exited ({w.process.returncode})"
            style = {"killed": "red", "stalled": "yellow"}.get(w.state, "")
            workers.add_row(w.name + (f" ({w.role})" if w.role else ""), str(w.pid), w.queues,
                            f"[{style}]{w.state}[/]" if style else w.state,
                            str(done_by.get(w.pid, 0)))
        queue = Table(*("pending", "running", "done", "failed"), title="jobs")
        queue.add_row(*(str(counts.get(s, 0)) for s in ("pending", "running", "done", "failed")))
        return Group(workers, queue, "\n".join(self.events))

    # -- the story --------------------------------------------------------------------

    def run(self) -> tuple[list[Check], str]:
        with Queue(self.dsn, schema=self.schema) as queue:
            queue.migrate()
            self.sql("demo_effects_create")
            with Live(self.view(), console=self.console, refresh_per_second=8) as live:
                self.tell_story(queue, live)
        return self.report()

    def tell_story(self, queue: Queue, live: Live) -> None:
        with psycopg.connect(self.dsn) as conn:
            queue.enqueue("process_order", {"customer": "ghost", "order": 0}, conn=conn)
            conn.rollback()
        self.event("enqueued a job inside a transaction, then rolled it back")

        # Two workers first, so that the doomed ones hold the long and the stalling job.
        doomed = self.start_worker("w6", "to be killed", "default,long", "--no-maintenance")
        staller = self.start_worker("w7", "will stall", "default,stall", "--no-maintenance")
        queue.enqueue_many([{"task": "long_job", "args": {"seconds": 0.5},
                             "queue": "long"} for _ in range(LONG_JOBS)])
        queue.enqueue("slow_report", {"stall_seconds": STALL}, queue="stall")
        self.wait(live, lambda: self.count("demo_effects_count", what="start")
                  == LONG_JOBS + 1, "the long jobs and the stalling job to start")
        staller.state = "stalled"
        self.event(f"w7 runs slow_report and blocks its event loop past its {LEASE:g}s "
                   "lease: no heartbeats")

        self.start_worker("w0", "maintenance leader", "default,long,stall")
        for n in range(1, 6):
            self.start_worker(f"w{n}", "", "default,long,stall", "--no-maintenance")
        orders = [
            {"task": "process_order", "args": {"customer": f"c{c}", "order": o}, "key": f"c{c}"}
            for o in range(ORDERS_PER_CUSTOMER) for c in range(CUSTOMERS)
        ]
        orders += [
            {"task": "process_order", "args": {"customer": IN_ORDER_CUSTOMER, "order": o},
             "key": IN_ORDER_CUSTOMER}
            for o in range(IN_ORDER_ORDERS)
        ]
        random.shuffle(orders[: CUSTOMERS * ORDERS_PER_CUSTOMER])
        queue.enqueue_many(orders)
        queue.enqueue("poison", {"order": 666}, max_attempts=demo_app.poison.max_attempts)
        self.event(f"enqueued {len(orders)} orders ({IN_ORDER_ORDERS} of them for "
                   f"'{IN_ORDER_CUSTOMER}', to run in order) and one poison job")

        self.wait(live, lambda: self.done("process_order") > len(orders) // 5,
                  "a fifth of the orders to finish")
        os.kill(doomed.pid, signal.SIGKILL)
        doomed.process.wait()
        doomed.state = "killed"
        self.event("[red]SIGKILL w6[/] while it runs the long jobs")

        self.wait(live, lambda: self.staller_woke(staller), "w7 to wake", timeout=60)
        self.wait(live, lambda: self.count("demo_jobs_unfinished") == 0,
                  "every job to finish", timeout=120)
        self.event("all jobs finished; stopping the workers with SIGTERM")
        for worker in self.workers:
            if worker.process.poll() is None:
                worker.process.send_signal(signal.SIGTERM)
        for worker in self.workers:
            worker.process.wait(30)
        live.update(self.view())

    def staller_woke(self, staller: WorkerProc) -> bool:
        woke = self.count("demo_effects_count", what="woke")
        if woke and staller.state == "stalled":
            staller.state = "running"
            self.event("w7 wakes up and tries to complete slow_report")
        return bool(woke)

    def done(self, task: str) -> int:
        return self.count("demo_jobs_done_of_task", task=task)

    # -- the proof --------------------------------------------------------------------

    def report(self) -> tuple[list[Check], str]:
        """The invariants, each judged from SQL, and the measured throughput."""
        checks: list[Check] = []
        total = CUSTOMERS * ORDERS_PER_CUSTOMER + IN_ORDER_ORDERS
        orders = self.sql("demo_orders_outcome")[0]
        checks.append(Check("every order done", orders["done"] == total,
                            f"{orders['done']} of {total} done; {orders['rerun']} needed a "
                            "second attempt (held by the killed or stalled worker)"))
        shared = self.count("demo_runs_shared")
        unclaimed = self.count("demo_runs_without_claim")
        checks.append(Check(
            "no job handed to two live claims", shared == 0 and unclaimed == 0,
            f"{shared} (job, attempt) pairs started by two workers; {unclaimed} runs "
            "under an attempt the job never reached"))
        doomed = next(w for w in self.workers if w.name == "w6")
        long_jobs = self.sql("demo_long_jobs")
        checks.append(Check(
            "the killed worker's jobs came back after their lease",
            long_jobs == [{"status": "done", "attempts": 2, "n": LONG_JOBS}],
            f"long jobs held by w6 (pid {doomed.pid}): {long_jobs}"))
        staller = next(w for w in self.workers if w.name == "w7")
        stats = _final_stats(staller.log)
        refused = stats.get("outcomes_refused", 0) + stats.get("results_discarded", 0)
        report = self.sql("demo_slow_report")[0]
        checks.append(Check(
            "the stalled worker's late completion was refused",
            report["status"] == "done" and report["attempts"] == 2 and refused >= 1
            and report["woke"] is not None and report["finished_by_other"] < report["woke"],
            f"slow_report: {report['result']!r}; w7 woke after another worker had finished "
            f"it, and its completion was refused ({refused} refused in w7's own count)"))
        poison = self.sql("demo_poison")[0]
        checks.append(Check(
            "the poison job ended failed with its errors kept",
            poison["status"] == "failed" and len(poison["errors"]) == 3,
            f"{poison['status']} after {poison['attempts']} attempts: "
            + "; ".join(e["message"] for e in poison["errors"][:1]) + " (x3)"))
        in_order = self.sql("demo_key_runs", key=IN_ORDER_CUSTOMER)
        ordered = all(a["ended"] <= b["started"] for a, b in itertools.pairwise(in_order))
        peak = self.sql("demo_customers_in_parallel")[0]["n"]
        checks.append(Check(
            f"'{IN_ORDER_CUSTOMER}' orders ran one at a time, in order; others in parallel",
            len(in_order) == IN_ORDER_ORDERS and ordered and (peak or 0) > 1,
            f"{len(in_order)} orders, each started after the previous one ended: {ordered}; "
            f"up to {peak} customers had an order running at the same moment"))
        ghosts = self.count("demo_jobs_of_customer", customer="ghost")
        checks.append(Check("the rolled-back job never appeared", ghosts == 0,
                            f"{ghosts} jobs from the rolled-back transaction"))
        span = self.sql("demo_orders_span")[0]["seconds"]
        throughput = (f"measured, not judged: {total} orders in {span:.1f} s, "
                      f"{total / span:,.0f} jobs/s (8 processes, 5 ms of simulated I/O each, "
                      "a killed and a stalled worker among them)")
        return checks, throughput


def _final_stats(log: Path) -> dict[str, int]:
    """The counters the worker wrote as it stopped (`pgbaton worker --stats-file`)."""
    path = log.with_suffix(".stats.json")
    return dict(json.loads(path.read_text())["stats"]) if path.exists() else {}


def run(dsn: str, console: Console | None = None, *, keep: bool = False,
        dashboard_port: int | None = None) -> int:
    """Run the demo against dsn in a schema of its own; returns the exit status. With
    dashboard_port, the dashboard serves that schema on 127.0.0.1 from the start; with
    it or keep, the schema (and this process) stays after the report until Ctrl-C."""
    console = console or Console()
    schema = f"pgbaton_demo_{uuid.uuid4().hex[:8]}"
    dashboard: watch.DashboardThread | None = None
    with tempfile.TemporaryDirectory(prefix="pgbaton-demo-") as workdir:
        demo = Demo(dsn, schema, console, Path(workdir))
        try:
            if dashboard_port is not None:
                with Queue(dsn, schema=schema) as queue:
                    queue.migrate()  # before the first page asks for it
                dashboard = watch.DashboardThread(dsn, schema, dashboard_port)
                dashboard.start()
                console.print(f"Watch it live in the dashboard: {dashboard.url}")
            elif keep:
                console.print(f"Watch it: {watch.dashboard_command(dsn, schema)}")
            checks, throughput = demo.run()
            _stop_workers(demo)
            _print_report(console, checks, throughput)
            if keep or dashboard is not None:
                watch.until_interrupted(console, schema)
        except BaseException:
            # What went wrong is the error to show: a database that cannot be reached
            # for the drop below must not bury it (one line, exit 1, not a traceback).
            _stop_workers(demo)
            if dashboard is not None:
                dashboard.stop()
            with contextlib.suppress(psycopg.Error, OSError):
                _drop_schema(dsn, schema)
            raise
        _stop_workers(demo)
        if dashboard is not None:
            dashboard.stop()
        _drop_schema(dsn, schema)
    return 0 if all(c.passed for c in checks) else 1


def _drop_schema(dsn: str, schema: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(_sql.queries(schema)["demo_schema_drop"])


def _stop_workers(demo: Demo) -> None:
    for worker in demo.workers:
        if worker.process.poll() is None:
            worker.process.kill()
            worker.process.wait()


def _print_report(console: Console, checks: list[Check], throughput: str) -> None:
    table = Table("", "invariant (from SQL)", "evidence", title="pgbaton demo: the report")
    for check in checks:
        table.add_row("[green]PASS[/]" if check.passed else "[red]FAIL[/]", check.name,
                      check.evidence)
    console.print(table)
    console.print(throughput)
