"""assert_enqueued() and refute_enqueued(): what a test's code left waiting in the queue."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..app import App, Task
from ..errors import InvalidArgument
from ..limits import INT4_MAX
from ..models import Job
from ..queue import Queue

SHOWN_IN_FAILURE = 5


def enqueued_jobs(
    task: Task | str,
    *,
    args: Mapping[str, Any] | None = None,
    queue: str | None = None,
    app: App | Queue | None = None,
) -> list[Job]:
    """The pending jobs of `task` (oldest first) whose args hold every item of `args`,
    in `queue` when given, as the App's connection provider's transaction sees them
    when it gives one. A task given by name needs app= (an App or a Queue)."""
    source = _queue_of(task, app, queue)
    name = task.name if isinstance(task, Task) else task
    # Seen from the transaction the code under test enqueued in, when the App has a
    # connection provider (Django's TestCase holds its jobs in the test's transaction).
    provided = source.connection_provider() if source.connection_provider else None
    jobs = source.jobs(status="pending", task=name, queue=queue, limit=INT4_MAX,
                       conn=provided)
    wanted = dict(args or {})
    return sorted(
        (j for j in jobs if all(k in j.args and j.args[k] == v for k, v in wanted.items())),
        key=lambda j: j.id,
    )


def assert_enqueued(
    task: Task | str,
    *,
    args: Mapping[str, Any] | None = None,
    queue: str | None = None,
    count: int | None = None,
    app: App | Queue | None = None,
) -> list[Job]:
    """Fail unless `task` has pending jobs matching args (a subset of each job's args)
    and queue: at least one, or exactly `count`. Returns the matching jobs."""
    if count is not None and (isinstance(count, bool) or not isinstance(count, int)
                              or count < 0):
        raise InvalidArgument(f"count must be a whole number >= 0, got {count!r}")
    found = enqueued_jobs(task, args=args, queue=queue, app=app)
    if (count is None and not found) or (count is not None and len(found) != count):
        wanted = "at least one job" if count is None else f"{count} job(s)"
        raise AssertionError(
            f"expected {wanted} of task {_name(task)!r}{_where(args, queue)} pending, "
            f"found {len(found)}; {_pending_of(task, app)}"
        )
    return found


def refute_enqueued(
    task: Task | str,
    *,
    args: Mapping[str, Any] | None = None,
    queue: str | None = None,
    app: App | Queue | None = None,
) -> None:
    """Fail if `task` has any pending job matching args and queue."""
    found = enqueued_jobs(task, args=args, queue=queue, app=app)
    if found:
        shown = ", ".join(f"#{j.id} {j.args}" for j in found[:SHOWN_IN_FAILURE])
        raise AssertionError(
            f"expected no job of task {_name(task)!r}{_where(args, queue)} pending, "
            f"found {len(found)}: {shown}"
        )


def _queue_of(task: Task | str, app: App | Queue | None, queue: str | None) -> Queue:
    """Where the jobs are: the Queue given, else the database the App routes the queue
    (given, else the task's) to."""
    if isinstance(app, Queue):
        return app
    if queue is None and isinstance(task, Task):
        queue = task.queue
    if isinstance(app, App):
        return app.queue if queue is None else app.queue_for(queue)
    if isinstance(task, Task):
        return task.app.queue_for(queue or task.queue)
    raise InvalidArgument(
        f"task {task!r} is given by name: pass app= (the App or a Queue) to look it up"
    )


def _name(task: Task | str) -> str:
    return task.name if isinstance(task, Task) else task


def _where(args: Mapping[str, Any] | None, queue: str | None) -> str:
    parts = [f" with args {dict(args)}" if args else "", f" in queue {queue!r}" if queue else ""]
    return "".join(parts)


def _pending_of(task: Task | str, app: App | Queue | None) -> str:
    pending = enqueued_jobs(task, app=app)
    if not pending:
        return "no job of this task is pending"
    shown = "; ".join(f"#{j.id} queue {j.queue!r} args {j.args}"
                      for j in pending[:SHOWN_IN_FAILURE])
    more = f" (and {len(pending) - SHOWN_IN_FAILURE} more)" if len(pending) > SHOWN_IN_FAILURE \
        else ""
    return f"pending jobs of this task: {shown}{more}"
