"""drain() and inline() report a job's progress and its log lines as the real worker
keeps them (docs/howto/progress-and-logs.md)."""

from __future__ import annotations

import logging

import pytest

import pgbaton
from pgbaton.testing import drain, inline

log = logging.getLogger("tests.testing.progress")
log.setLevel(logging.INFO)  # the root logger stays at WARNING in the test process


def define(app: pgbaton.App) -> tuple[pgbaton.Task, pgbaton.Task]:
    @app.task(pass_context=True)
    def export(context: pgbaton.JobContext, rows: int) -> int:
        for row in range(rows):
            log.info("row %d", row)
        log.debug("not kept: below INFO")
        context.progress(1.0, note=f"{rows} rows")
        return rows

    @app.task(pass_context=True, job_logs=False)
    async def quiet(context: pgbaton.JobContext) -> None:
        log.warning("not kept: logs are off for this task")
        context.progress(0.5)

    return export, quiet


def test_inline_reports_progress_and_lines() -> None:
    """The real Executor's capture, at INFO, off for a task that says so."""
    app = pgbaton.App("postgresql://nobody@127.0.0.1:1/none")
    export, quiet = define(app)
    with inline(app) as jobs:
        export.defer(rows=3)
        quiet.defer()
    [exported, quieted] = jobs
    assert exported.log_messages == ["row 0", "row 1", "row 2"]
    assert [(k.attempt, k.dropped) for k in exported.logs] == [(1, 0)]
    assert (exported.progress, exported.progress_note) == (1.0, "3 rows")
    assert quieted.logs == [] and quieted.progress == 0.5


def test_inline_refuses_bad_progress_as_the_worker_does() -> None:
    """NaN is refused in the handler, which fails the attempt; nothing is recorded."""
    app = pgbaton.App("postgresql://nobody@127.0.0.1:1/none")

    @app.task(pass_context=True)
    def bad(context: pgbaton.JobContext) -> None:
        context.progress(float("nan"))

    with inline(app) as jobs, pytest.raises(pgbaton.InvalidArgument, match="between 0 and 1"):
        bad.defer()
    [failed] = jobs
    assert failed.status == "failed" and failed.progress is None


def test_drain_reports_the_same(queue, dsn, schema) -> None:
    """drain() reads back from the database what inline() reports from the Executor."""
    app = pgbaton.App(dsn, schema=schema)
    export, quiet = define(app)
    export.defer(rows=3)
    quiet.defer()
    [exported, quieted] = drain(app)
    assert exported.log_messages == ["row 0", "row 1", "row 2"]
    assert [(k.attempt, k.dropped) for k in exported.logs] == [(1, 0)]
    assert (exported.progress, exported.progress_note) == (1.0, "3 rows")
    assert quieted.logs == [] and quieted.progress == 0.5
