"""What the queues hold, read: `pgbaton stats` (per queue), `pgbaton jobs` (a filtered
list, as the dashboard's) and `pgbaton show ID` (one job, its errors, its durable steps
and with --logs what its handler logged)."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import click

from .. import tracebacks
from .._cli_common import (
    WHOLE_NUMBER,
    _print_json,
    _queue,
    _table,
    connection_options,
    format_duration,
    json_option,
    printable,
)
from ..errors import InvalidArgument, PgbatonError
from ..job_filter import filter_of
from ..models import STATES, Job, JobLog, Step


@click.command()
@connection_options
@json_option
def stats(dsn: str | None, schema: str, embedded: bool, as_json: bool) -> None:
    """Per queue: whether it is paused, jobs by state (pending: due; scheduled: not yet),
    oldest pending age, expired leases."""
    with _queue(dsn, schema, embedded) as queue:
        rows = queue.stats()
    if as_json:
        _print_json([dataclasses.asdict(s) for s in rows])
        return
    _table(
        f"pgbaton queues in schema {queue.schema!r}",
        ["queue", "paused", "pending", "scheduled", "running", "waiting", "done", "failed",
         "cancelled", "expired leases", "oldest pending"],
        [
            [s.queue, "paused" if s.paused else "no", s.pending, s.scheduled, s.running,
             s.waiting, s.done, s.failed, s.cancelled, s.expired_leases,
             format_duration(s.oldest_pending_seconds)]
            for s in rows
        ],
    )


@click.command()
@click.option("--status", default=None,
              help=f"One of {', '.join(STATES)} (scheduled: pending, not yet due).")
@click.option("--queue", "queue_name", default=None)
@click.option("--task", default=None)
@click.option("--key", default=None, help="Jobs of this key.")
@click.option("--text", default=None, help="Jobs whose args or errors contain this.")
@click.option("--since", default=None, help="Finished (or created) at or after: 10:00, ISO.")
@click.option("--until", default=None, help="Finished (or created) before.")
@click.option("--limit", type=WHOLE_NUMBER, default=50, show_default=True)
@connection_options
@json_option
def jobs(
    status: str | None, queue_name: str | None, task: str | None, key: str | None,
    text: str | None, since: str | None, until: str | None, limit: int,
    dsn: str | None, schema: str, embedded: bool, as_json: bool,
) -> None:
    """List jobs, newest first, filtered as the dashboard's list and the bulk forms of
    retry and cancel filter."""
    try:
        job_filter = filter_of({"status": status, "queue": queue_name, "task": task,
                                "key": key, "text": text, "since": since, "until": until})
    except InvalidArgument as error:
        raise click.BadParameter(str(error)) from None
    with _queue(dsn, schema, embedded) as queue:
        found = queue.jobs(**dataclasses.asdict(job_filter), limit=limit)
    if as_json:
        _print_json([_job_fields(job) for job in found])
        return
    if status == "running":  # how far each is, as its handler last said
        _table(
            "jobs", ["id", "queue", "task", "attempts", "key", "started_at", "progress"],
            [
                [j.id, j.queue, j.task, f"{j.attempts}/{j.max_attempts}", j.key,
                 j.started_at.isoformat(timespec="seconds") if j.started_at else "",
                 progress_text(j)]
                for j in found
            ],
        )
        return
    _table(
        "jobs", ["id", "queue", "task", "state", "attempts", "key", "run_at", "last error"],
        [
            [j.id, j.queue, j.task, j.state, f"{j.attempts}/{j.max_attempts}", j.key,
             j.run_at.isoformat(timespec="seconds"),
             j.errors[-1].get("message", "") if j.errors else ""]
            for j in found
        ],
    )


@click.command()
@click.argument("job_id", type=WHOLE_NUMBER)
@connection_options
@json_option
@click.option("--logs", "with_logs", is_flag=True,
              help="Also print what its handler logged, run by run.")
def show(job_id: int, dsn: str | None, schema: str, embedded: bool, as_json: bool,
         with_logs: bool) -> None:
    """Show one job, with every attempt's error (and with --logs its log lines)."""
    with _queue(dsn, schema, embedded) as queue:
        job = queue.get(job_id)
        kept = queue.logs(job_id) if with_logs and job is not None else []
        steps = queue.steps(job_id) if job is not None else []
    if job is None:
        raise PgbatonError(f"no job {job_id} in schema {queue.schema!r}")
    if as_json:
        shown = {**_job_fields(job), "steps": [_step_fields(s) for s in steps]}
        if with_logs:
            shown["logs"] = [dataclasses.asdict(k) for k in kept]
        _print_json(shown)
        return
    fields = _job_fields(job)
    if job.progress is not None or job.progress_note is not None:
        fields["progress"] = progress_text(job)  # "40% rows", one line for a person
        del fields["progress_note"]
    errors = fields.pop("errors")
    if fields["worker_id"] is None and errors and errors[-1].get("worker_id"):
        # A failed job's holder is cleared; where its last attempt ran is in its error.
        last = errors[-1]
        fields["worker_id"] = f"none now (attempt {last.get('attempt')} ran on " \
                              f"{last['worker_id']})"
    _table(f"job {job_id}", ["field", "value"],
           [[name, _as_shown(value)] for name, value in fields.items()])
    for error in errors:
        where = f" on {error['worker_id']}" if error.get("worker_id") else ""
        click.echo(printable(
            f"attempt {error.get('attempt')} at {error.get('at')}{where}: "
            f"{error.get('type')}: {error.get('message')}"
        ))
        if error.get("traceback"):
            # printable() shows escape characters escaped; newlines are kept per line.
            for line in tracebacks.folded(str(error["traceback"])).rstrip("\n").split("\n"):
                click.echo("    " + printable(line))
    _show_steps(job, steps)
    if with_logs:
        _print_logs(kept)


def _step_fields(step: Step) -> dict[str, Any]:
    """A durable step as `show --json` gives it: its row, its state and duration."""
    return {**dataclasses.asdict(step), "state": step.state, "duration": step.duration}


def _show_steps(job: Job, steps: list[Step]) -> None:
    """The job's durable steps (docs/howto/durable-steps.md), and what a suspended job
    sleeps until or waits for."""
    if not steps:
        return
    _table(f"steps of job {job.id}", ["seq", "name", "kind", "state", "seconds", "bytes"],
           [[s.seq, s.name, s.kind, s.state,
             "" if s.duration is None else f"{s.duration:.3f}", s.size or ""]
            for s in steps])
    last = steps[-1]
    if job.status == "pending" and last.finished_at is None:
        if last.kind == "sleep":
            click.echo(f"sleeping until {job.run_at.isoformat(timespec='seconds')}")
        else:
            deadline = ("no timeout" if last.until is None
                        else f"until {last.until.isoformat(timespec='seconds')}")
            click.echo(printable(f"waiting for event {last.name!r} ({deadline})"))


def _print_logs(kept: list[JobLog]) -> None:
    """Each run's lines under its label ("attempt 1, run 2 (snoozed)"), in the order
    the runs ran; printable() shows escapes escaped."""
    if not kept:
        click.echo("no log lines kept for this job")
    for attempt_log in kept:
        click.echo(f"logs of {attempt_log.label}:")
        for entry in attempt_log.lines:
            head, *rest = str(entry.get("message", "")).split("\n")
            click.echo(printable(
                f"  {entry.get('at')} {entry.get('level')} {entry.get('logger')}: {head}"))
            for line in rest:
                click.echo("      " + printable(line))
        if (marker := attempt_log.marker()) is not None:
            click.echo(f"  {marker}")


def progress_text(job: Job) -> str:
    """A job's progress in a few words: "40% exporting rows", "(earlier attempt) 40%"."""
    if job.progress is None and job.progress_note is None:
        return ""
    words = [] if job.progress is None else [f"{job.progress * 100:.0f}%"]
    if job.progress_note is not None:
        words.append(printable(job.progress_note))
    return ("(earlier attempt) " if job.progress_stale else "") + " ".join(words)


def _job_fields(job: Job) -> dict[str, Any]:
    """A job's fields with its state as shown (scheduled: pending, not yet due) after
    its stored status."""
    fields: dict[str, Any] = {}
    for name, value in dataclasses.asdict(job).items():
        fields[name] = value
        if name == "status":
            fields["state"] = job.state
    return fields


def _as_shown(value: Any) -> Any:
    """Args, results and headers as JSON (what `enqueue --args` takes back), not a
    Python repr."""
    if isinstance(value, (dict, list)):
        return json.dumps(value, ensure_ascii=False, default=str)
    return value
