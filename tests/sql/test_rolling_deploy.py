"""Rolling deploys: a previous release runs against this release's schema, and this
release refuses the previous schema (docs/explanation/guarantees.md, "Rolling deploys").

The statements of previous releases are kept verbatim in previous_release/queries_vN.sql,
N the schema version that release ran on: the oldest kept (3), which proves the long
range, and the schema's just before the newest migration, which proves the newest
migrations. The tests here run each on connections of their own, as that release's
producers and workers did, prepared on its schema before `pgbaton migrate` applies the
later migrations and run again after it, beside this release's queue. Every file found
there is run; a release whose statements take other parameters than the one before it
gets a driver class of its own (Release25, Release27), the others use the newest driver
before them.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import re
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import psycopg
import pytest
from psycopg.rows import DictRow, dict_row

import pgbaton
from pgbaton import _sql
from tests.helpers import job_rows, wait_for_lease_to_pass

PREVIOUS_RELEASES = Path(__file__).parent / "previous_release"
_RELEASE_FILE = re.compile(r"^queries_v(\d+)\.sql$")
# A file holds one or more query files of its release, each below a line naming it (the
# release of schema 3 had one query file, and no such line).
_QUERY_FILE_LINE = re.compile(r"^-- file: .*$", re.MULTILINE)
_HEADER = re.compile(r"^-- (name|fragment|part): (\w+)\s*$", re.MULTILINE)  # as in _sql.py
_PARAMETER = re.compile(r"%\((\w+)\)[sb]")
PREVIOUS_VERSION = 3  # the oldest release kept: the long range


def released_versions() -> list[int]:
    """The schema versions whose release's statements are kept, oldest first."""
    return sorted(int(match[1]) for path in PREVIOUS_RELEASES.iterdir()
                  if (match := _RELEASE_FILE.match(path.name)))


def release_statements(version: int, schema: str) -> dict[str, str]:
    """Every statement of the release of that schema version, by name, as it sent them
    for `schema`: its fragments put in place and its placeholders filled by this
    release's loader (src/pgbaton/_sql.py: fill and bind), which fills them as that
    release's did, placeholders it did not have aside."""
    text = (PREVIOUS_RELEASES / f"queries_v{version}.sql").read_text(encoding="utf-8")
    statements: dict[str, str] = {}
    fragments: dict[str, str] = {}
    for section in _QUERY_FILE_LINE.split(text):
        parts = _HEADER.split(section)
        for kind, name, body in zip(parts[1::3], parts[2::3], parts[3::3], strict=True):
            assert name not in statements and name not in fragments, name
            if kind == "name":
                statements[name] = body.strip()
            else:
                fragments[name] = _sql.as_put(kind, body.strip())
    return {name: _sql.bind(_sql.fill(body, fragments), schema)
            for name, body in statements.items()}


# -- drivers: each release's statements, run with the parameters it gave them ----------

LEASE = 60.0
# A lease the reaper finds expired: waited out on the server's clock
# (wait_for_lease_to_pass), never guessed.
SHORT_LEASE = 0.2
OLD_WORKER, NEW_WORKER = "old-worker", "new-worker"
ERROR = json.dumps({"type": "RuntimeError", "message": "boom"})


def _positions(rows: list[dict[str, Any]]) -> list[int]:
    """The input positions a *_many statement changed, in order."""
    return sorted(row["position"] for row in rows)


class PreviousRelease:
    """The statements of a previous release, run with its parameters on one connection,
    as its producers and workers ran them. This class runs those of the oldest release
    kept (schema version 3); a later release whose statements take other parameters has a
    subclass (driver_for)."""

    since: ClassVar[int] = 3  # the first schema version whose statements it runs
    # The parts of a job's life that release had, beyond the oldest one's.
    features: ClassVar[frozenset[str]] = frozenset()
    options: ClassVar[str] = ""  # what its pooled connections set (libpq options)

    def __init__(
        self, conn: psycopg.Connection[DictRow], schema: str, version: int = PREVIOUS_VERSION
    ) -> None:
        self.version = version
        self.sql = release_statements(version, schema)
        self.conn = conn
        self.schema = schema

    def has(self, feature: str) -> bool:
        return feature in self.features

    def run(self, statement: str, /, **params: Any) -> list[dict[str, Any]]:
        # prepare=True: a long-lived producer's statements are prepared, as psycopg does
        # after a few executions, and must survive the schema changing under them.
        cursor = self.conn.execute(
            self.sql[statement], params, prepare=True)  # type: ignore[arg-type]
        return cursor.fetchall() if cursor.description else []

    def prepared(self) -> list[str]:
        """The statements prepared on this connection (the server's view)."""
        rows = self.conn.execute(
            "SELECT name FROM pg_prepared_statements ORDER BY name", prepare=False)
        return [row["name"] for row in rows]

    # Producers

    def job_params(self, task: str, **options: Any) -> dict[str, Any]:
        return {
            "queue": "default", "task": task, "args": "{}", "priority": 0, "run_at": None,
            "delay": 0.0, "key": None, "idempotency_key": None, "max_attempts": 5,
            **options,
        }

    def enqueue(self, task: str, **options: Any) -> int:
        params = self.job_params(task, **options)
        name = "job_insert" if params["idempotency_key"] is None else "job_insert_idempotent"
        return int(self.run(name, **params)[0]["id"])

    def enqueue_many(self, jobs: list[dict[str, Any]]) -> list[int | None]:
        [row] = self.run("job_insert_many", jobs=json.dumps(jobs))
        return list(row["ids"])

    # Workers

    def claim(
        self, worker_id: str, limit: int = 10, lease: float = LEASE,
        tasks: list[str] | None = None, starting: int | None = None,
    ) -> list[dict[str, Any]]:
        return self.run(
            "job_claim_many", worker_id=worker_id, limit=limit, lease=lease, queues=None,
            tasks=tasks, after=None,
        )

    def held(self, *claims: dict[str, Any], **extra: list[Any]) -> dict[str, Any]:
        return {"ids": [c["id"] for c in claims], "tokens": [c["claim_token"] for c in claims],
                **extra}

    def heartbeat(self, *claims: dict[str, Any], lease: float = LEASE) -> list[int]:
        rows = self.run("job_heartbeat_many", **self.held(*claims), lease=lease)
        return _positions(rows)

    def complete(self, *claims: dict[str, Any]) -> list[int]:
        rows = self.run("job_complete_many", **self.held(*claims, results=[None] * len(claims)))
        return _positions(rows)

    def fail(self, *claims: dict[str, Any], retry_in: float = 0.0) -> list[str]:
        rows = self.run("job_fail_many", **self.held(
            *claims, errors=[ERROR] * len(claims), retry_in=[retry_in] * len(claims)))
        return [row["status"] for row in rows]

    def release(self, *claims: dict[str, Any]) -> list[int]:
        return _positions(self.run("job_release_many", **self.held(*claims)))

    def reap(self) -> list[int]:
        return sorted(row["id"] for row in self.run("job_reap"))

    # Operators and readers

    def cancel(self, job_id: int) -> bool:
        return bool(self.run("job_cancel", id=job_id))

    def retry(self, job_id: int) -> bool:
        return bool(self.run("job_retry", id=job_id))

    def read(self, job_id: int, task: str) -> None:
        """The listings a producer, an operator and the leader read."""
        assert self.run("job_get", id=job_id)[0]["id"] == job_id
        assert self.run("job_list", status=None, queue=None, task=task, limit=10)
        assert self.run("queue_stats")
        assert self.run("job_prune", retention=3600.0, limit=10) == []


class Release25(PreviousRelease):
    """The releases of schema version 25 (commit 21f17f4) on: enqueue by COPY and with
    unique=, meta and limit_key on every job, claims ahead started later, snoozes and
    ends, progress, logs and durable steps, flow control, the workers table; its
    pooled connections plan each statement once (generic plans)."""

    since = 25
    features = frozenset({
        "copy", "unique", "ahead", "snooze", "end", "progress", "logs", "steps", "flow",
        "presence",
    })
    options = "-c plan_cache_mode=force_generic_plan"

    def job_params(self, task: str, **options: Any) -> dict[str, Any]:
        return super().job_params(task, **{"meta": None, "limit_key": None, **options})

    def enqueue_many(self, jobs: list[dict[str, Any]]) -> list[int | None]:
        [row] = self.run("job_insert_many", jobs=json.dumps(jobs), meta=None)
        return list(row["ids"])

    def copy(self, tasks: list[str], args: str = "{}") -> list[int]:
        """A batch by COPY, as enqueue_many wrote one of copy_min_jobs or more: its ids
        reserved first, then one COPY of the rows in job_copy's columns."""
        [reserved] = self.run("job_ids_reserve", count=len(tasks))
        ids = reserved["ids"] or list(range(reserved["first"], reserved["first"] + len(tasks)))
        with self.conn.cursor() as cursor, cursor.copy(self.sql["job_copy"]) as copy:
            for job_id, task in zip(ids, tasks, strict=True):
                # (id, meta, queue, task, args, priority, key, max_attempts, limit_key)
                copy.write_row((job_id, None, "default", task, args, 0, None, 5, None))
        return ids

    def enqueue_unique(self, task: str) -> tuple[int, str]:
        params = self.job_params(
            task, unique_base=f"unique-{task}", unique_period=None,
            unique_states=["pending", "waiting", "running"], conflict="keep",
            unique_delay=None)
        [row] = self.run("job_insert_unique", **params)
        return int(row["id"]), row["outcome"]

    def claim(
        self, worker_id: str, limit: int = 10, lease: float = LEASE,
        tasks: list[str] | None = None, starting: int | None = None,
    ) -> list[dict[str, Any]]:
        return self.run(
            "job_claim_many", worker_id=worker_id, limit=limit, lease=lease, queues=None,
            tasks=tasks, finished=None, starting=limit if starting is None else starting,
            after=None,
        )

    def claim_flow(self, worker_id: str, queues: list[str], tasks: list[str]) -> list[dict]:
        """The claim while some queue is paused or limited (queue_flow_state says so)."""
        [state] = self.run("queue_flow_state")
        assert state["controlled"] > 0
        return self.run(
            "job_claim_flow", worker_id=worker_id, limit=10, lease=LEASE, queues=queues,
            tasks=tasks, finished=None, starting=10, after=None,
        )

    def limit(self, queue: str, concurrency: int) -> None:
        self.run(
            "queue_set_limits", name=queue, channel=_sql.notify_channel(self.schema),
            set_concurrency=True, concurrency=concurrency, set_rate=False, rate_limit=None,
            rate_period=None, set_key_concurrency=False, key_concurrency=None,
            set_key_rate=False, key_rate_limit=None, key_rate_period=None,
        )

    def start(self, *claims: dict[str, Any]) -> list[int]:
        return _positions(self.run("job_start_many", **self.held(*claims)))

    def release(self, *claims: dict[str, Any]) -> list[int]:
        nothing: list[Any] = [None] * len(claims)
        rows = self.run("job_release_many", **self.held(
            *claims, delays=nothing, untils=nothing, snoozes=[False] * len(claims),
            max_snoozes=nothing, errors=nothing))
        return _positions(rows)

    def snooze(self, claim: dict[str, Any], seconds: float) -> str:
        [row] = self.run("job_release_many", **self.held(
            claim, delays=[seconds], untils=[None], snoozes=[True], max_snoozes=[None],
            errors=[None]))
        return str(row["status"])

    def end(self, claim: dict[str, Any], status: str) -> str:
        [row] = self.run("job_end_many", **self.held(claim, statuses=[status], errors=[ERROR]))
        return str(row["status"])

    def progress(self, claim: dict[str, Any], fraction: float, note: str) -> list[int]:
        rows = self.run("job_progress_many", **self.held(claim, fractions=[fraction],
                                                         notes=[note]))
        return _positions(rows)

    def log(self, claim: dict[str, Any], lines: list[dict[str, Any]]) -> list[int]:
        rows = self.run("job_logs_insert_many", **self.held(
            claim, attempts=[claim["attempts"]], lines=[json.dumps(lines)], dropped=[0],
            ended=["done"]))
        return _positions(rows)

    def step(self, claim: dict[str, Any], name: str, result: Any) -> bool:
        text = json.dumps(result)
        return bool(self.run(
            "job_step_store", id=claim["id"], token=claim["claim_token"], seq=1, name=name,
            result=text, seconds=0.01, size=len(text.encode())))

    def beat(self, worker_id: str, *, leave: bool = False) -> None:
        presence = {"worker_id": worker_id, "host": "old-host", "pid": os.getpid(),
                    "version": "0.1.0", "queues": None, "concurrency": 4, "held": 0}
        self.run("worker_leave" if leave else "worker_beat", **presence)

    def retry(self, job_id: int) -> bool:
        return bool(self.run("job_retry", id=job_id, channel=_sql.notify_channel(self.schema)))

    def read(self, job_id: int, task: str) -> None:
        assert self.run("job_get", id=job_id)[0]["id"] == job_id
        assert self.run("job_get_archived", id=job_id) == []
        assert self.run(
            "job_list", status=None, queue=None, task=task, key=None, text=None, since=None,
            until=None, ids=None, limit=10)
        assert self.run("queue_stats")
        assert self.run("job_logs_get", id=job_id) is not None
        assert self.run("job_steps_get", id=job_id) is not None
        assert self.run("job_prune", retention=3600.0, limit=10) == []


class Release27(Release25):
    """The releases of schema version 27 (commit b9aa835) on: a job's start, outcome and
    release say how long ago its handler began (`ran`), so that a job claimed ahead gets
    its start recorded by the write that ends it."""

    since = 27

    def held(self, *claims: dict[str, Any], **extra: list[Any]) -> dict[str, Any]:
        return super().held(*claims, **{"ran": [0.0] * len(claims), **extra})


DRIVERS: tuple[type[PreviousRelease], ...] = (PreviousRelease, Release25, Release27)


def driver_for(version: int) -> type[PreviousRelease]:
    """The driver of the newest release at or before that schema version."""
    return max((d for d in DRIVERS if d.since <= version), key=lambda d: d.since)


@contextlib.contextmanager
def connected(dsn: str, schema: str, version: int) -> Iterator[PreviousRelease]:
    """A connection of the release of that schema version, its driver on it."""
    driver = driver_for(version)
    options = {"options": driver.options} if driver.options else {}
    with psycopg.connect(dsn, autocommit=True, row_factory=dict_row, **options) as conn:
        yield driver(conn, schema, version)


def _previous_schema(
    db: psycopg.Connection[DictRow], schema: str, version: int = PREVIOUS_VERSION
) -> None:
    """A schema exactly as the `pgbaton migrate` of the release of that version left it."""
    sql = _sql.queries(schema)
    db.execute(sql["schema_create"])  # type: ignore[arg-type]
    db.execute(sql["schema_version_create"])  # type: ignore[arg-type]
    for migration in _sql.migrations()[:version]:
        db.execute(migration.in_schema(schema))  # type: ignore[arg-type]
        db.execute(
            sql["schema_version_record"],  # type: ignore[arg-type]
            {"version": migration.version, "name": migration.name},
        )


def _migrate(dsn: str, schema: str, version: int) -> pgbaton.Queue:
    queue = pgbaton.Queue(dsn, schema=schema)
    assert queue.migrate() == [m.version for m in _sql.migrations()[version:]]
    return queue


@pytest.fixture(params=released_versions(), ids=lambda version: f"v{version}")
def release(request: pytest.FixtureRequest) -> int:
    """The schema version of a previous release whose statements are kept."""
    return int(request.param)


@pytest.fixture
def previous(dsn: str, schema: str, db) -> Iterator[PreviousRelease]:
    """The oldest kept release's connection on a schema at its version, opened before any
    migration of this release."""
    _previous_schema(db, schema)
    with connected(dsn, schema, PREVIOUS_VERSION) as release:
        yield release


# -- the life of jobs, through a previous release and beside this one ------------------


@dataclass(frozen=True)
class End:
    """What a job's row says once the life is over."""

    status: str
    attempts: int
    ran_by: str | None = None  # the worker that completed it (done jobs)
    errors: int = 0
    holds: int = 0
    snoozes: int = 0


@dataclass
class Life:
    """The lives of a set of jobs through a previous release's statements, every one a
    producer, a worker, the leader and an operator of that release run; with `new`
    (this release's queue, on the migrated schema), mixed with this release's: its jobs
    claimed by the old worker and the other way round, its reaper reaping the old
    worker's lease and the other way round. Each step checks what it returns; `ends`
    says how every job must end. The tasks are the round's own, so that each claim
    takes what this round means it to."""

    old: PreviousRelease
    new: pgbaton.Queue | None
    db: psycopg.Connection[DictRow]
    round_: str
    ends: dict[int, End] = field(default_factory=dict)
    plain: int = 0  # the first job, which progressed, logged and ran a step

    def run(self) -> dict[int, End]:
        self.enqueue_and_work()
        if self.old.has("copy"):
            self.copy_unique_snooze_end()
        if self.old.has("flow"):
            self.flow()
        self.leases_run_out()
        self.cancel_and_retry()
        if self.old.has("presence"):
            self.old.beat(OLD_WORKER)
            self.old.beat(OLD_WORKER, leave=True)
        self.old.read(self.plain, self.task("plain"))
        return self.ends

    def task(self, name: str) -> str:
        return f"{self.round_}-{name}"

    def enqueue_and_work(self) -> None:
        """Producers: plain, with an idempotency key (twice), in bulk. A worker claims
        a batch: the first job starts at once, the rest are claimed ahead (a hold
        each) and start later, but one, handed back unstarted; one fails and is
        retried, the others complete."""
        old, new, task = self.old, self.new, self.task
        plain = self.plain = old.enqueue(task("plain"))
        keyed = old.enqueue(task("keyed"), idempotency_key=f"{self.round_}-order")
        assert old.enqueue(task("keyed"), idempotency_key=f"{self.round_}-order") == keyed
        bulk = old.enqueue_many([{"task": task("bulk")},
                                 {"task": task("bulk"), "key": self.round_}])
        assert None not in bulk
        # Args that are not a JSON object are refused, with the name of the constraint
        # that refused them (migration 26 moved that check from the table to the insert
        # trigger).
        with pytest.raises(psycopg.errors.CheckViolation) as refused:
            old.enqueue(task("plain"), args="[]")
        assert refused.value.diag.constraint_name == "jobs_args_is_object"
        to_new = old.enqueue(task("to-new")) if new else None
        from_new = new.enqueue(task("from-new")) if new else None

        claims = old.claim(OLD_WORKER, tasks=[task("plain"), task("keyed"), task("bulk"),
                                              task("from-new")], starting=1)
        assert [c["id"] for c in claims] == [plain, keyed, *bulk,
                                             *([from_new] if from_new else [])]
        by_id = {c["id"]: c for c in claims}
        if old.has("ahead"):
            assert [c["started"] for c in claims] == [True] + [False] * (len(claims) - 1)
            ahead = [c for c in claims[1:] if c["id"] != bulk[1]]
            assert old.start(*ahead) == list(range(1, len(ahead) + 1))
        assert old.heartbeat(*claims) == list(range(1, len(claims) + 1))
        if old.has("progress"):
            assert old.progress(by_id[plain], 0.5, "half way") == [1]
        if old.has("steps"):
            assert old.step(by_id[plain], "charge", {"charged": True})
        if old.has("logs"):
            assert old.log(by_id[plain], [{"message": "charged"}]) == [1]
        done = [by_id[i] for i in (plain, bulk[0], from_new) if i]
        assert old.complete(*done) == list(range(1, len(done) + 1))
        assert old.fail(by_id[keyed]) == ["pending"]  # retried: attempts left
        assert old.release(by_id[bulk[1]]) == [1]
        # The released job (its place in the claim order kept) and the retry, claimed
        # again: attempt 1 (the release gave its attempt back) and 2.
        again = old.claim(OLD_WORKER, tasks=[task("keyed"), task("bulk")])
        assert [(c["id"], c["attempts"]) for c in again] == [(bulk[1], 1), (keyed, 2)]
        assert old.complete(*again) == [1, 2]
        self.ends |= {i: End("done", 1, OLD_WORKER) for i in (plain, bulk[0], bulk[1])}
        self.ends[keyed] = End("done", 2, OLD_WORKER, errors=1)
        if from_new:
            self.ends[from_new] = End("done", 1, OLD_WORKER)
        if new and to_new:
            [claim] = new.claim(NEW_WORKER, tasks=[task("to-new")])
            assert claim.id == to_new and new.complete(claim, {"ok": True})
            self.ends[to_new] = End("done", 1, NEW_WORKER)

    def copy_unique_snooze_end(self) -> None:
        """A batch by COPY (and one refused for its args) and a unique job (kept when
        enqueued again); of the batch one snoozes, one ends failed, one completes."""
        old, task = self.old, self.task
        copied = old.copy([task("copied")] * 3)
        with pytest.raises(psycopg.errors.CheckViolation) as refused:
            old.copy([task("copied")], args="[]")
        assert refused.value.diag.constraint_name == "jobs_args_is_object"
        unique, created = old.enqueue_unique(task("unique"))
        assert created == "created"
        assert old.enqueue_unique(task("unique")) == (unique, "kept")
        claims = old.claim(OLD_WORKER, tasks=[task("copied"), task("unique")])
        assert [c["id"] for c in claims] == [*copied, unique]
        assert old.snooze(claims[0], 3600.0) == "pending"
        assert old.end(claims[1], "failed") == "failed"
        assert old.complete(*claims[2:]) == [1, 2]
        self.ends[copied[0]] = End("pending", 0, snoozes=1)
        self.ends[copied[1]] = End("failed", 1, errors=1)
        self.ends |= {i: End("done", 1, OLD_WORKER) for i in (copied[2], unique)}

    def flow(self) -> None:
        """A job of a limited queue, claimed by the flow claim."""
        flowing = self.old.enqueue(self.task("flow"), queue="limited")
        [claim] = self.old.claim_flow(OLD_WORKER, ["limited"], [self.task("flow")])
        assert claim["id"] == flowing and self.old.complete(claim) == [1]
        self.ends[flowing] = End("done", 1, OLD_WORKER)

    def leases_run_out(self) -> None:
        """The old worker's leases run out, reaped by this release's reaper (by the old
        one before the migration): a job it claimed ahead and never started gets its
        attempt back and keeps its hold. Then this release's worker's, reaped by the old
        reaper."""
        old, new, task, db = self.old, self.new, self.task, self.db
        reaped = old.enqueue(task("reaped"))
        never_started = old.enqueue(task("reaped"))
        claims = old.claim(OLD_WORKER, lease=SHORT_LEASE, tasks=[task("reaped")], starting=1)
        assert [c["id"] for c in claims] == [reaped, never_started]
        for job_id in (reaped, never_started):
            wait_for_lease_to_pass(db, job_id)
        lost = None
        if new:
            assert new.reap() == 2
            lost = new.enqueue(task("reaped-new"))
            [claim] = new.claim(NEW_WORKER, lease=SHORT_LEASE, tasks=[task("reaped-new")])
            assert claim.id == lost
            wait_for_lease_to_pass(db, lost)
            assert old.reap() == [lost]
        else:
            assert old.reap() == [reaped, never_started]
        # Claimed again: the attempt a started job spent stays spent.
        attempts = 1 if old.has("ahead") else 2
        claims = old.claim(OLD_WORKER, tasks=[task("reaped"), task("reaped-new")])
        assert [(c["id"], c["attempts"]) for c in claims] == [
            (reaped, 2), (never_started, attempts), *([(lost, 2)] if lost else [])]
        assert old.complete(*claims) == list(range(1, len(claims) + 1))
        self.ends[reaped] = End("done", 2, OLD_WORKER, errors=1)
        self.ends[never_started] = End("done", attempts, OLD_WORKER, errors=1,
                                       holds=1 if old.has("ahead") else 0)
        if lost:
            self.ends[lost] = End("done", 2, OLD_WORKER, errors=1)

    def cancel_and_retry(self) -> None:
        """An operator of the old release cancels a pending job, and a running one (this
        release's worker's, after the migration): the holder learns it at its
        heartbeat, lets go, and the retried job runs again."""
        old, new, task = self.old, self.new, self.task
        cancelled = old.enqueue(task("cancelled"))
        assert old.cancel(cancelled) and not old.cancel(cancelled)
        self.ends[cancelled] = End("cancelled", 0)
        running = old.enqueue(task("running"))
        if new:
            [held] = new.claim(NEW_WORKER, tasks=[task("running")])
            assert old.cancel(running)
            assert new.heartbeat(held) == [False]
            assert new.release(held) is False  # lost; its hold on the job is let go
        else:
            [holder] = old.claim(OLD_WORKER, tasks=[task("running")])
            assert old.cancel(running)
            assert old.heartbeat(holder) == []
            assert old.release(holder) == []
        assert job_rows(self.db, "claim_token", "lease_until")[-1] == (None, None)
        assert old.retry(running)
        [claim] = old.claim(OLD_WORKER, tasks=[task("running")])
        assert claim["id"] == running and claim["attempts"] == 1
        assert old.complete(claim) == [1]
        self.ends[running] = End("done", 1, OLD_WORKER)


def _check_ends(db: psycopg.Connection[DictRow], ends: dict[int, End]) -> None:
    """Every job as its life left it, in SQL: status, attempts, errors, holds and
    snoozes as expected; no token, lease or holder left behind; the done ones started,
    finished, by the worker that ran them."""
    rows = db.execute(
        "SELECT id, status, attempts, holds, snoozes, jsonb_array_length(errors) AS errors,"
        " claim_token, lease_until, worker_id, started_at, finished_at FROM jobs ORDER BY id"
    ).fetchall()
    assert {row["id"]: End(
        row["status"], row["attempts"], row["worker_id"] if row["status"] == "done" else None,
        row["errors"], row["holds"], row["snoozes"]) for row in rows} == ends
    assert [row["id"] for row in rows if row["claim_token"] or row["lease_until"]] == []
    assert [row["id"] for row in rows if row["status"] != "done" and row["worker_id"]] == []
    assert [row["id"] for row in rows if row["status"] == "done" and not (
        row["started_at"] and row["finished_at"])] == []


def test_a_previous_release_runs_whole_job_lives_across_the_migration(release, dsn, schema, db):
    """A previous release's producer, worker, leader and operator, connected before
    `pgbaton migrate` applies the later migrations, run whole job lives on its schema,
    then again on the migrated one with the very statements they prepared before (no
    statement is prepared anew), mixed with this release's queue and worker; every job
    ends as it must."""
    _previous_schema(db, schema, release)
    with connected(dsn, schema, release) as old:
        if old.has("flow"):
            old.limit("limited", 1)
        ends = Life(old, None, db, "before").run()
        prepared = old.prepared()
        with _migrate(dsn, schema, release) as new:
            ends |= Life(old, new, db, "after").run()
        assert old.prepared() == prepared  # every statement was one it had prepared
    _check_ends(db, ends)
    if old.has("logs"):
        assert db.execute(
            "SELECT count(*) AS runs FROM job_logs WHERE run = 1 AND lines <> '[]'"
        ).fetchone() == {"runs": 2}
    if old.has("progress"):
        assert db.execute(
            "SELECT count(*) AS jobs FROM jobs WHERE progress = 0.5"
        ).fetchone() == {"jobs": 2}


# -- every statement, parsed before the migration and after -----------------------------


def _numbered(statement: str) -> str:
    """A statement with psycopg's named placeholders as the server's $1, $2..."""
    numbers: dict[str, int] = {}
    return _PARAMETER.sub(
        lambda m: f"${numbers.setdefault(m[1], len(numbers) + 1)}", statement
    ).replace("%%", "%")


def _described(conn: psycopg.Connection[Any], name: str) -> tuple[list[int], list[int]]:
    """A prepared statement's parameter types and result column types."""
    result = conn.pgconn.describe_prepared(name.encode())
    if result.error_message:
        raise AssertionError(f"{name}: {result.error_message.decode().strip()}")
    return ([result.param_type(number) for number in range(result.nparams)],
            [result.ftype(column) for column in range(result.nfields)])


def test_every_statement_of_a_previous_release_still_parses_with_its_types(
    release, dsn, schema, db
):
    """Every statement of a previous release, prepared on its schema on a connection
    opened before the migration, still describes after it (PostgreSQL analyses it
    again: "cached plan must not change result type" and a missing column fail here),
    and prepared anew with the parameter types it had, takes and returns the same
    types. Only the history's DDL templates cannot be prepared ({partition} is put in
    by the client)."""
    _previous_schema(db, schema, release)
    with connected(dsn, schema, release) as old:
        types = {}
        unprepared = []
        for name, statement in old.sql.items():
            prepared = old.conn.pgconn.prepare(name.encode(), _numbered(statement).encode())
            if prepared.error_message:
                unprepared.append(name)
            else:
                types[name] = _described(old.conn, name)
        assert all(name.endswith("_ddl") for name in unprepared), unprepared
        _migrate(dsn, schema, release).close()
        broken = {}
        for name, (parameters, columns) in types.items():
            try:
                assert _described(old.conn, name) == (parameters, columns), name
                again = old.conn.pgconn.prepare(
                    f"{name}_again".encode(), _numbered(old.sql[name]).encode(), parameters)
                if again.error_message:
                    raise AssertionError(again.error_message.decode().strip())
                assert _described(old.conn, f"{name}_again") == (parameters, columns)
            except AssertionError as error:
                broken[name] = str(error)
        assert broken == {}


# -- the rest: refusals, other schemas, the oldest release's idempotency keys -----------


def test_the_oldest_release_keeps_enqueuing_and_working_across_the_migration(
    previous, dsn, schema, db
):
    """A producer and a worker of the oldest release kept, connected before `pgbaton migrate`
    applies this release's migrations, enqueue (plain, with an idempotency key, in bulk),
    claim, heartbeat, complete, fail, release, reap, cancel and retry as before, and
    their idempotency keys still deduplicate against this release's producers (its
    global index is kept: docs/reference/compat.md)."""
    before = previous.enqueue("charge_card", idempotency_key="order-1")
    previous.claim("old-worker")  # every statement prepared before the migration
    with pgbaton.Queue(dsn, schema=schema) as queue:
        assert queue.migrate() == [m.version for m in _sql.migrations()[PREVIOUS_VERSION:]]

        # Producers of both releases, one key space per task.
        assert previous.enqueue("charge_card", idempotency_key="order-1") == before
        mixed = previous.enqueue("charge_card", idempotency_key="order-2")
        assert queue.enqueue_once("charge_card", idempotency_key="order-2") == (
            pgbaton.Enqueued(id=mixed, created=False)
        )
        fresh = queue.enqueue_once("charge_card", idempotency_key="order-3")
        assert previous.enqueue("charge_card", idempotency_key="order-3") == fresh.id
        plain = previous.enqueue("send_receipt", key="customer-1")
        [row] = previous.run(
            "job_insert_many",
            jobs=json.dumps([{"task": "bulk", "idempotency_key": "order-1"}, {"task": "bulk"}]),
        )
        assert row["ids"][0] is None and row["ids"][1] is not None  # the global index

        # The previous release's worker on the new schema, with the very statement it
        # prepared before the migration (the same parameter types: an int lease would
        # prepare another): a change of what a row or a result holds fails it with
        # "cached plan must not change result type" (migration 26's first form did).
        claims = previous.claim("old-worker")
        by_task = {c["task"]: c for c in claims}
        assert set(by_task) == {"charge_card", "send_receipt", "bulk"}
        assert len(previous.run("job_heartbeat_many", **previous.held(*claims), lease=60.0)) == len(
            claims
        )
        assert previous.run(
            "job_complete_many", **previous.held(by_task["send_receipt"], results=[None])
        )
        assert previous.run(
            "job_fail_many",
            **previous.held(by_task["bulk"], errors=['{"message": "boom"}'], retry_in=[0.0]),
        )
        others = [c for c in claims if c["task"] == "charge_card"]
        assert len(previous.run("job_release_many", **previous.held(*others))) == len(others)

        # An operator of the previous release cancels and retries jobs this one runs.
        [held] = queue.claim("new-worker", lease=0.5, tasks=["charge_card"])
        assert previous.run("job_cancel", id=held.id)
        assert previous.run("job_retry", id=held.id)
        cancelled_by_new = queue.enqueue("charge_card", key="customer-2")
        [running] = queue.claim("new-worker", lease=0.5, tasks=["charge_card"])
        while running.id != cancelled_by_new:
            assert queue.complete(running) is True
            [running] = queue.claim("new-worker", lease=0.5, tasks=["charge_card"])
        assert queue.cancel(running.id) is True
        assert previous.run("job_retry", id=running.id)  # leaves the holder's lease behind
        wait_for_lease_to_pass(db, running.id)
        assert previous.run("job_reap") == []
        assert queue.reap() == 0
        assert job_rows(db, "claim_token", "lease_until")[-1] == (None, None)

        for name in ("job_get", "job_list", "queue_stats", "job_prune"):
            params = {"id": plain, "status": None, "queue": None, "task": None, "limit": 10,
                      "retention": 3600.0}
            previous.run(name, **params)
    keyed = db.execute(
        "SELECT task, idempotency_key FROM jobs WHERE idempotency_key IS NOT NULL ORDER BY id"
    ).fetchall()
    assert [(r["task"], r["idempotency_key"]) for r in keyed] == [
        ("charge_card", "order-1"), ("charge_card", "order-2"), ("charge_card", "order-3"),
    ]


def test_this_release_refuses_a_previous_schema_and_writes_nothing(release, dsn, schema, db):
    """A producer of this release pointed at a schema a previous release migrated is
    refused with SchemaOutOfDate naming both versions and `pgbaton migrate`, before it
    writes anything; so is its worker."""
    _previous_schema(db, schema, release)
    ours = pgbaton.schema_version()
    with pgbaton.Queue(dsn, schema=schema) as queue:
        with pytest.raises(pgbaton.SchemaOutOfDate) as raised:
            queue.enqueue_once("charge_card", idempotency_key="order-1")
        message = str(raised.value)
        assert f"version {release}" in message and f"version {ours}" in message
        assert "pgbaton migrate" in message and "\n" not in message
        with pytest.raises(pgbaton.SchemaOutOfDate):
            queue.claim("new-worker", tasks=["charge_card"])
    assert db.execute("SELECT count(*) AS n FROM jobs").fetchone() == {"n": 0}


def test_a_previous_release_runs_on_a_schema_built_from_schema_sql(release, dsn, schema, db):
    """A team that applies `pgbaton schema --sql` with its own tool gets a schema the
    previous releases' producers and workers can still use, on connections opened
    after it was built."""
    db.execute(_sql.schema_sql(schema))  # type: ignore[arg-type]
    with connected(dsn, schema, release) as old:
        first = old.enqueue(
            "charge_card", idempotency_key=f"k-{uuid.uuid4().hex}",
            run_at=dt.datetime.now(dt.UTC),
        )
        [claim] = old.claim("old-worker")
        assert claim["id"] == first and old.complete(claim) == [1]


def test_the_newest_migration_has_the_statements_of_the_version_before_it():
    """The rule that keeps this file honest (docs/explanation/guarantees.md, "Rolling
    deploys"): a change that adds migration N+1 copies the statements of schema version
    N into previous_release/queries_vN.sql, so that the newest migration always runs
    under the statements it must not break."""
    newest = pgbaton.schema_version()
    assert released_versions()[-1] == newest - 1, (
        f"migration {newest} came without previous_release/queries_v{newest - 1}.sql: "
        f"copy the statements of schema version {newest - 1} there "
        "(docs/explanation/guarantees.md, 'Rolling deploys')"
    )
