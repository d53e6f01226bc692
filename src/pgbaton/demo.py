"""`pgbaton demo`: the seed's whole story on a real PostgreSQL, then the proof, in SQL.

Eight worker processes drain a few thousand jobs. One is killed with SIGKILL mid-job and
its jobs come back after their lease; one stalls past its lease and its late completion
is refused by the claim token; a poison job ends `failed`; one customer's orders run
strictly in order while the others run in parallel; a job enqueued in a rolled-back
transaction never appears. The report is computed from the database, not from counters
kept here, and the command exits non-zero if any invariant failed.
"""

from __future__ import annotations

import itertools
import json
import os
import random
import re
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

from . import demo_app
from .queue import Queue

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

    def sql(self, query: str, *params: Any) -> list[dict[str, Any]]:
        with psycopg.connect(self.dsn, autocommit=True, row_factory=dict_row) as conn:
            conn.execute(f'SET search_path TO "{self.schema}"')
            cursor = conn.execute(query, params)
            return cursor.fetchall() if cursor.description else []

    def event(self, text: str) -> None:
        self.events.append(f"[dim]{time.monotonic() - self.started:5.1f}s[/] {text}")

    def start_worker(self, name: str, role: str, queues: str, *options: str) -> WorkerProc:
        log = self.workdir / f"{name}.log"
        env = {**os.environ, "PGBATON_DEMO_SCHEMA": self.schema, "PGBATON_DSN": self.dsn}
        with log.open("wb") as out:
            process = subprocess.Popen(
                [sys.executable, "-m", "pgbaton", "worker", "pgbaton.demo_app:app",
                 "--schema", self.schema, "--queues", queues, "--lease", str(LEASE),
                 "--concurrency", "8", "--poll-interval", "0.5", *options],
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
        counts = {r["status"]: r["n"] for r in self.sql(
            "SELECT status, count(*) AS n FROM jobs GROUP BY status")}
        done_by = {r["pid"]: r["n"] for r in self.sql(
            "SELECT split_part(worker_id, ':', 2)::int AS pid, count(*) AS n FROM jobs"
            " WHERE status = 'done' AND worker_id IS NOT NULL GROUP BY 1")}
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

    def run(self) -> list[Check]:
        with Queue(self.dsn, schema=self.schema) as queue:
            queue.migrate()
            self.sql(demo_app.EFFECTS_DDL.format(schema=self.schema))
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
        self.wait(live, lambda: self.sql(
            "SELECT count(*) AS n FROM demo_effects WHERE what = 'start'")[0]["n"]
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
        self.wait(live, lambda: self.sql(
            "SELECT count(*) AS n FROM jobs WHERE status IN ('pending', 'running')")[0]["n"]
            == 0, "every job to finish", timeout=120)
        self.event("all jobs finished; stopping the workers with SIGTERM")
        for worker in self.workers:
            if worker.process.poll() is None:
                worker.process.send_signal(signal.SIGTERM)
        for worker in self.workers:
            worker.process.wait(30)
        live.update(self.view())

    def staller_woke(self, staller: WorkerProc) -> bool:
        woke = self.sql("SELECT count(*) AS n FROM demo_effects WHERE what = 'woke'")[0]["n"]
        if woke and staller.state == "stalled":
            staller.state = "running"
            self.event("w7 wakes up and tries to complete slow_report")
        return bool(woke)

    def done(self, task: str) -> int:
        return int(self.sql(
            "SELECT count(*) AS n FROM jobs WHERE task = %s AND status = 'done'", task)[0]["n"])

    # -- the proof --------------------------------------------------------------------

    def report(self) -> list[Check]:
        checks: list[Check] = []
        total = CUSTOMERS * ORDERS_PER_CUSTOMER + IN_ORDER_ORDERS
        orders = self.sql(
            "SELECT count(*) FILTER (WHERE status = 'done') AS done,"
            " count(*) FILTER (WHERE attempts > 1) AS rerun FROM jobs"
            " WHERE task = 'process_order'")[0]
        checks.append(Check("every order done", orders["done"] == total,
                            f"{orders['done']} of {total} done; {orders['rerun']} needed a "
                            "second attempt (held by the killed or stalled worker)"))
        shared = self.sql(
            "SELECT count(*) AS n FROM (SELECT job_id, attempt FROM demo_effects"
            " WHERE what = 'start' GROUP BY 1, 2 HAVING count(DISTINCT worker_pid) > 1) s")
        beyond = self.sql(
            "SELECT count(*) AS n FROM demo_effects e JOIN jobs j ON j.id = e.job_id"
            " WHERE e.attempt > j.attempts")
        checks.append(Check(
            "no job handed to two live claims", shared[0]["n"] == 0 and beyond[0]["n"] == 0,
            f"{shared[0]['n']} (job, attempt) pairs started by two workers; every run "
            "belongs to its own claim"))
        doomed = next(w for w in self.workers if w.name == "w6")
        long_jobs = self.sql(
            "SELECT status, attempts, count(*) AS n FROM jobs WHERE task = 'long_job'"
            " GROUP BY 1, 2")
        checks.append(Check(
            "the killed worker's jobs came back after their lease",
            long_jobs == [{"status": "done", "attempts": 2, "n": LONG_JOBS}],
            f"long jobs held by w6 (pid {doomed.pid}): {long_jobs}"))
        staller = next(w for w in self.workers if w.name == "w7")
        stats = _final_stats(staller.log)
        refused = stats.get("outcomes_refused", 0) + stats.get("results_discarded", 0)
        report = self.sql(
            "SELECT j.status, j.attempts, j.result,"
            " (SELECT max(at) FROM demo_effects WHERE job_id = j.id AND what = 'woke') AS woke,"
            " (SELECT max(at) FROM demo_effects WHERE job_id = j.id AND attempt = 2"
            "  AND what = 'end') AS finished_by_other"
            " FROM jobs j WHERE task = 'slow_report'")[0]
        checks.append(Check(
            "the stalled worker's late completion was refused",
            report["status"] == "done" and report["attempts"] == 2 and refused >= 1
            and report["woke"] is not None and report["finished_by_other"] < report["woke"],
            f"slow_report: {report['result']!r}; w7 woke after another worker had finished "
            f"it, and its completion was refused ({refused} refused in w7's own count)"))
        poison = self.sql("SELECT status, attempts, errors FROM jobs WHERE task = 'poison'")[0]
        checks.append(Check(
            "the poison job ended failed with its errors kept",
            poison["status"] == "failed" and len(poison["errors"]) == 3,
            f"{poison['status']} after {poison['attempts']} attempts: "
            + "; ".join(e["message"] for e in poison["errors"][:1]) + " (x3)"))
        in_order = self.sql(
            "SELECT j.id, min(e.at) FILTER (WHERE e.what = 'start') AS started,"
            " max(e.at) FILTER (WHERE e.what = 'end') AS ended"
            " FROM jobs j JOIN demo_effects e ON e.job_id = j.id AND e.attempt = j.attempts"
            " WHERE j.key = %s GROUP BY j.id ORDER BY j.id", IN_ORDER_CUSTOMER)
        ordered = all(a["ended"] <= b["started"] for a, b in itertools.pairwise(in_order))
        # Sampled every 20th job: how many customers had a job running when it started.
        peak = self.sql(
            "SELECT max((SELECT count(DISTINCT b.key) FROM jobs b"
            "  WHERE b.task = 'process_order' AND b.started_at <= a.started_at"
            "  AND b.finished_at > a.started_at)) AS n"
            " FROM jobs a WHERE a.task = 'process_order' AND a.id %% 20 = 0")[0]["n"]
        checks.append(Check(
            f"'{IN_ORDER_CUSTOMER}' orders ran one at a time, in order; others in parallel",
            len(in_order) == IN_ORDER_ORDERS and ordered and (peak or 0) > 1,
            f"{len(in_order)} orders, each started after the previous one ended: {ordered}; "
            f"up to {peak} customers had an order running at the same moment"))
        ghosts = self.sql(
            "SELECT count(*) AS n FROM jobs WHERE args->>'customer' = 'ghost'")[0]["n"]
        checks.append(Check("the rolled-back job never appeared", ghosts == 0,
                            f"{ghosts} jobs from the rolled-back transaction"))
        span = self.sql(
            "SELECT extract(epoch FROM max(finished_at) - min(started_at)) AS s FROM jobs"
            " WHERE task = 'process_order'")[0]["s"]
        checks.append(Check("throughput", True,
                            f"{total} orders in {span:.1f}s: {total / span:,.0f} jobs/s "
                            "(8 processes, 5 ms of simulated I/O each)"))
        return checks


def _final_stats(log: Path) -> dict[str, int]:
    match = re.search(r"stopped: (\{.*\})", log.read_text(errors="replace"))
    return dict(json.loads(match.group(1))) if match else {}


def run(dsn: str, console: Console | None = None) -> int:
    """Run the demo against dsn in a schema of its own; returns the exit status."""
    console = console or Console()
    schema = f"pgbaton_demo_{uuid.uuid4().hex[:8]}"
    with tempfile.TemporaryDirectory(prefix="pgbaton-demo-") as workdir:
        demo = Demo(dsn, schema, console, Path(workdir))
        try:
            checks = demo.run()
        finally:
            for worker in demo.workers:
                if worker.process.poll() is None:
                    worker.process.kill()
                    worker.process.wait()
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    table = Table("", "invariant (from SQL)", "evidence", title="pgbaton demo: the report")
    for check in checks:
        table.add_row("[green]PASS[/]" if check.passed else "[red]FAIL[/]", check.name,
                      check.evidence)
    console.print(table)
    return 0 if all(c.passed for c in checks) else 1
