"""App: the registry of an application's tasks, where their jobs live (its queues and
routes), and the calls made by task name (enqueue_many, wait, send_event, run_worker).

Task and its typed forms live in task.py and are re-exported here, so
`pgbaton.app.Task` and the other names still import from this module."""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import difflib
import hashlib
import importlib
import json
import logging
import os
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Concatenate, Literal, overload

from . import _sql, waiting
from ._checks import check_int4, check_name, job_params
from .context import JobContext
from .cron import DEFAULT_CATCH_UP_LIMIT, Cron, check_catch_up
from .dependencies import CALLBACK_ARG, Callback
from .dsn import resolve_dsn, resolve_schema, with_application_name
from .errors import ConfigurationError, InvalidArgument, UnknownTask
from .events import Events, Subscriber
from .flow import Rate, check_concurrency, parse_rate
from .integrations.connections import (
    AsyncCallerConnection,
    AsyncConnectionProvider,
    CallerConnection,
    ConnectionProvider,
)
from .limits import DEFAULT_MAX_SNOOZES
from .middleware import Middleware
from .queue import Queue
from .queue_async import AsyncQueue
from .routes import Routes
from .schedules import Schedules, check_schedule_name, refuse_sealed_schedule_args, tick_key
from .task import (
    ContextTask,
    Deferrable,
    Deferral,
    EnqueueOptions,
    KeyFunction,
    P,
    R,
    RetryOn,
    RetryPolicy,
    Task,
    TypedTask,
    check_enqueue_options,
)
from .unique import Unique

if TYPE_CHECKING:
    from .dependencies import Batch
    from .worker import WorkerConfig

# Task and its typed forms live in task.py; they are imported from here by users and by
# the rest of pgbaton, so they stay names of this module.
__all__ = [
    "App",
    "ContextTask",
    "Deferrable",
    "Deferral",
    "EnqueueOptions",
    "KeyFunction",
    "Periodic",
    "RetryOn",
    "RetryPolicy",
    "Task",
    "TypedTask",
    "WorkerRunner",
    "check_enqueue_options",
    "load_app",
    "register_worker_runner",
]

# pgbaton.worker registers its run_worker here when it is imported (pgbaton's own
# __init__ imports it), so that App.run_worker can start a worker while the App never
# imports the worker: the worker depends on the App, not the other way round.
WorkerRunner = Callable[..., int]
_worker_runner: WorkerRunner | None = None


def register_worker_runner(runner: WorkerRunner) -> None:
    global _worker_runner  # noqa: PLW0603 (set once, by pgbaton.worker)
    _worker_runner = runner


@dataclass(frozen=True)
class Periodic:
    """One schedule in code: a task enqueued by the maintenance leader at each tick of a
    cron expression, with fixed args. One task may have several schedules. A worker
    writes it to the schedules table as it starts (docs/explanation/schedules.md)."""

    task: Task
    cron: str
    args: Mapping[str, Any] | None = None
    schedule: str | None = None
    timezone: str = "UTC"
    catch_up: str = "skip"
    catch_up_limit: int = 100

    @property
    def schedule_id(self) -> str:
        """Tells this schedule from the task's others (cron and args, and the zone when
        not UTC), for its default name and so its keys."""
        shown: list[Any] = [self.cron, self.args or {}]
        if self.timezone != "UTC":
            shown.append(self.timezone)
        text = json.dumps(shown, sort_keys=True, default=repr)
        return hashlib.sha256(text.encode()).hexdigest()[:12]

    @property
    def name(self) -> str:
        """The schedule's name in the table: schedule=, else TASK:ID."""
        return self.schedule or f"{self.task.name}:{self.schedule_id}"

    def idempotency_key(self, tick: dt.datetime) -> str:
        return tick_key(self.name, tick)


class App:
    """The tasks of one application, and where their jobs live.

    app = pgbaton.App(dsn=None, schema=None): each is the argument if given, else
    PGBATON_DSN or DATABASE_URL (PGBATON_SCHEMA, else "pgbaton" for the schema); the
    DSN is resolved when first needed. The command line's --dsn and --schema win over
    both (pgbaton.dsn has the whole order).
    """

    def __init__(self, dsn: str | None = None, *, schema: str | None = None) -> None:
        self._dsn = dsn
        self._schema = None if schema is None else _sql.check_schema_name(schema)
        self.tasks: dict[str, Task] = {}
        self.periodics: list[Periodic] = []
        self.middlewares: list[Middleware] = []
        # Queue limits declared in code, written by each worker when it starts.
        self.queue_limits: dict[str, tuple[int | None, Rate | None]] = {}
        # Every event of this App's workers, and of its queues' data plane.
        self.events = Events()
        # The level at which a worker logs a failed attempt's traceback (logger
        # "pgbaton.jobs.traceback"); the one-line failure is logged at WARNING or ERROR.
        self.traceback_log_level = logging.INFO
        self._queue: Queue | None = None
        self._async_queue: AsyncQueue | None = None
        self._connection_provider: ConnectionProvider | None = None
        self._async_connection_provider: AsyncConnectionProvider | None = None
        self._routes = Routes()

    def __repr__(self) -> str:
        return f"<App schema={self.schema!r} tasks={sorted(self.tasks)}>"

    @property
    def dsn(self) -> str:
        return resolve_dsn(None, app_dsn=self._dsn)

    @property
    def dsn_in_code(self) -> str | None:
        """The DSN given to App() or configure(), if any (not the environment's)."""
        return self._dsn

    @property
    def schema(self) -> str:
        return resolve_schema(None, app_schema=self._schema)

    @property
    def schema_in_code(self) -> str | None:
        """The schema given to App() or configure(), if any (not the environment's)."""
        return self._schema

    def configure(self, *, dsn: str | None = None, schema: str | None = None) -> None:
        """Point the app elsewhere (the command line's --dsn and --schema)."""
        if dsn is not None:
            self._dsn = dsn
        if schema is not None:
            self._schema = _sql.check_schema_name(schema)
        self._queue = self._async_queue = None
        self._routes.forget_queues()

    @property
    def queue(self) -> Queue:
        """The App's Queue; its connections are named `pgbaton` in pg_stat_activity
        unless the DSN names them (or the worker named them after itself)."""
        if self._queue is None:
            self._queue = Queue(with_application_name(self.dsn, None), schema=self.schema,
                                events=self.events,
                                connection_provider=self._connection_provider)
        return self._queue

    @property
    def async_queue(self) -> AsyncQueue:
        if self._async_queue is None:
            self._async_queue = AsyncQueue(
                with_application_name(self.dsn, None), schema=self.schema, events=self.events,
                connection_provider=self._async_connection_provider,
            )
        return self._async_queue

    def route(self, queue: str, dsn: str) -> None:
        """Keep the jobs of `queue` in another database (same schema name): its tasks
        enqueue there, and a worker whose --queues are all routed there works it. A
        caller's conn= still wins. docs/explanation/scaling.md says what routing keeps."""
        own = None
        with contextlib.suppress(ConfigurationError):  # no DSN yet: checked at use
            own = self.dsn
        self._routes.add(queue, dsn, own)

    def route_of(self, queue: str) -> str | None:
        """The DSN `queue` is routed to, or None for the App's own database."""
        return self._routes.dsn_of(queue)

    def routed_dsns(self) -> list[str]:
        """Every database a queue is routed to, once each (not the App's own)."""
        return self._routes.dsns()

    def database_of(self, queues: Iterable[str] | None) -> str | None:
        """The route these queues share (None: the App's own database, as for no queues
        at all); ConfigurationError when they live in two databases, naming them."""
        return self._routes.shared_by(queues)

    def queue_for(self, queue: str) -> Queue:
        """The Queue of the database `queue` is routed to (App.queue when not routed)."""
        dsn = self._routes.dsn_of(queue)
        if dsn is None or not isinstance(self._queue, Queue | None):
            # Not routed, or a stand-in (pgbaton.testing.inline) takes every job.
            return self.queue
        return self._routes.queue(dsn, self.schema, self.events)

    def async_queue_for(self, queue: str) -> AsyncQueue:
        """queue_for() for asyncio."""
        dsn = self._routes.dsn_of(queue)
        if dsn is None or not isinstance(self._async_queue, AsyncQueue | None):
            return self.async_queue
        return self._routes.async_queue(dsn, self.schema, self.events)

    def enqueue_many(
        self, jobs: Iterable[Mapping[str, Any]], *, conn: CallerConnection | None = None,
        batch: Batch | None = None,
    ) -> list[int]:
        """Queue.enqueue_many in the database the jobs' queues (and the batch's
        callbacks') are routed to; jobs of two databases are refused before anything
        is written (InvalidArgument), as one statement cannot write to both, and so is
        a job or callback of a task this App does not register (UnknownTask) or args
        its handler cannot take. A job or callback that gives no queue, max_attempts
        or key gets its task's, as task.enqueue() would."""
        jobs, batch = self.with_task_defaults(jobs, batch)
        route = self._routes.queue_of_many(jobs, batch)
        self.check_callback_args(batch)
        return self.queue_for(route).enqueue_many(jobs, conn=conn,
                                                  batch=self.sealed_callbacks(batch))

    async def enqueue_many_async(
        self, jobs: Iterable[Mapping[str, Any]], *,
        conn: AsyncCallerConnection | None = None, batch: Batch | None = None,
    ) -> list[int]:
        """enqueue_many() through the AsyncQueue of the jobs' database."""
        jobs, batch = self.with_task_defaults(jobs, batch)
        route = self._routes.queue_of_many(jobs, batch)
        self.check_callback_args(batch)
        return await self.async_queue_for(route).enqueue_many(
            jobs, conn=conn, batch=self.sealed_callbacks(batch))

    def with_task_defaults(
        self, jobs: Iterable[Mapping[str, Any]], batch: Batch | None
    ) -> tuple[list[Mapping[str, Any]], Batch | None]:
        """The jobs and batch of one enqueue_many call, checked against this App's
        tasks (check_tasks_known, then each job's args) and with each task's queue,
        max_attempts and key where the caller gave none."""
        jobs = list(jobs)
        self.check_tasks_known(jobs, batch)
        filled: list[Mapping[str, Any]] = []
        for position, job in enumerate(jobs):
            name = job.get("task") if isinstance(job, Mapping) else None
            task = self.tasks.get(name) if isinstance(name, str) else None
            args = job.get("args") if task is not None else None
            if task is None or not isinstance(args, Mapping | None):
                filled.append(job)  # enqueue_many's own checks name what is wrong
                continue
            if "queue" in job:
                check_name("queue", job["queue"])  # named before the args' own problems
            try:
                task.check_args(args)
                options = {name: value for name, value in job.items()
                           if name not in ("task", "args")}
                options = task.job_options(args, options)
                stored = task.stored_args(args)
            except InvalidArgument as error:
                raise type(error)(f"job {position}: {error}") from None
            filled.append({"task": task.name, "args": stored, **options})
        if batch is not None:
            batch = dataclasses.replace(
                batch, **{which: self._callback_defaults(getattr(batch, which))
                          for which in ("on_finish", "on_success")})
        return filled, batch

    def check_callback_args(self, batch: Batch | None) -> None:
        """InvalidArgument for a batch callback whose handler could not take its args
        with the `batch` it is given: checked now, not when its batch ends, maybe
        hours later. Args holding `batch`, or not a mapping, are Callback's to refuse."""
        for which in ("on_finish", "on_success"):
            callback = getattr(batch, which, None)
            if (not isinstance(callback, Callback) or callback.task not in self.tasks
                    or not isinstance(callback.args, Mapping | None)
                    or CALLBACK_ARG in (callback.args or {})):
                continue
            try:
                self.tasks[callback.task].check_args(
                    {**(callback.args or {}), CALLBACK_ARG: {}})
            except InvalidArgument as error:
                raise InvalidArgument(
                    f"the batch's {which} callback: {error}; nothing was written"
                ) from None

    def sealed_callbacks(self, batch: Batch | None) -> Batch | None:
        """The batch with each callback's args as its task stores them (typed, sealed
        for an encrypted task), once check_callback_args has judged them as given."""
        if batch is None:
            return None
        changes: dict[str, Any] = {}
        for which in ("on_finish", "on_success"):
            callback = getattr(batch, which)
            task = self.tasks.get(callback.task) if isinstance(callback, Callback) else None
            if task is not None and isinstance(callback.args, Mapping | None):
                changes[which] = dataclasses.replace(
                    callback, args=task.stored_args(callback.args))
        return dataclasses.replace(batch, **changes) if changes else batch

    def _callback_defaults(self, callback: Any) -> Any:
        if not isinstance(callback, Callback) or callback.task not in self.tasks:
            return callback  # Batch.params and check_tasks_known name what is wrong
        task = self.tasks[callback.task]
        return dataclasses.replace(
            callback,
            queue=task.queue if callback.queue is None else callback.queue,
            max_attempts=(task.max_attempts if callback.max_attempts is None
                          else callback.max_attempts),
        )

    def check_tasks_known(
        self, jobs: Iterable[object], batch: Batch | None = None
    ) -> None:
        """UnknownTask when a job or a batch callback names a task this App does not
        register: no worker of the App would ever claim it, and a batch whose callback
        it is would wait for it forever. Each such task is named once, with where it
        first appears, and the App's tasks. A job without a task name is left to
        enqueue_many's own checks."""
        places: dict[str, str] = {}
        for position, job in enumerate(jobs):
            task = job.get("task") if isinstance(job, Mapping) else None
            if isinstance(task, str) and task not in self.tasks:
                places.setdefault(task, f"job {position}")
        for which in ("on_finish", "on_success"):
            task = getattr(getattr(batch, which, None), "task", None)
            if isinstance(task, str) and task not in self.tasks:
                places.setdefault(task, f"the batch's {which}")
        if not places:
            return
        shown = [f"{task!r} ({where})" for task, where in list(places.items())[:5]]
        more = f" and {len(places) - 5:,} more" if len(places) > 5 else ""
        many = len(places) > 1
        raise UnknownTask(
            f"no task{'s' if many else ''} named {', '.join(shown)}{more} "
            f"{'are' if many else 'is'} registered in this App (it has: "
            f"{', '.join(sorted(self.tasks)) or 'none'}); nothing was written"
        )

    def wait(self, job_id: int, *, timeout: float | None = None,
             queue: str | None = None) -> Any:
        """The job's result once it is done, from any process or host: woken by the
        NOTIFY of its end (one LISTEN connection per process and database, shared by
        every waiter), with a poll each second only as a fallback. Raises JobFailed
        (with its errors) or JobCancelled when it ends so, JobNotFound when there is
        no such job, TimeoutError after `timeout` seconds (None: no limit). A job moved
        to the history returns its result at once. `queue`: the job's queue, when it
        is routed to another database (App.route). docs/howto/waiting.md."""
        target = self.queue if queue is None else self.queue_for(queue)
        return waiting.wait(target, job_id, timeout)

    async def wait_async(self, job_id: int, *, timeout: float | None = None,
                         queue: str | None = None) -> Any:
        """wait() for asyncio."""
        target = self.async_queue if queue is None else self.async_queue_for(queue)
        return await waiting.wait_async(target, job_id, timeout)

    def send_event(self, job_id: int, event: str, payload: Any = None, *,
                   queue: str | None = None) -> bool:
        """Send `event` to a job: its ctx.wait_for(event) gets `payload` (JSON); a job
        suspended on that wait is due now (True: it was woken), and an event sent before
        the job waits is kept for it. JobNotFound for an unknown job. `queue`: the
        job's queue, when it is routed to another database. docs/howto/durable-steps.md."""
        target = self.queue if queue is None else self.queue_for(queue)
        return target.send_event(job_id, event, payload)

    async def send_event_async(self, job_id: int, event: str, payload: Any = None, *,
                               queue: str | None = None) -> bool:
        """send_event() for asyncio."""
        target = self.async_queue if queue is None else self.async_queue_for(queue)
        return await target.send_event(job_id, event, payload)

    def send_event_by_key(self, key: str, event: str, payload: Any = None, *,
                          queue: str | None = None) -> list[int]:
        """send_event() to every unfinished job of `key`; returns their ids
        (JobNotFound when the key has none)."""
        target = self.queue if queue is None else self.queue_for(queue)
        return target.send_event_by_key(key, event, payload)

    async def send_event_by_key_async(self, key: str, event: str, payload: Any = None, *,
                                      queue: str | None = None) -> list[int]:
        """send_event_by_key() for asyncio."""
        target = self.async_queue if queue is None else self.async_queue_for(queue)
        return await target.send_event_by_key(key, event, payload)

    def provide_connection(self, provider: ConnectionProvider | None) -> None:
        """Sync enqueues of this App without conn= ask provider() first: what it returns
        (anything conn= takes) is the transaction the job joins; None means the App's
        own pool, committed at once. pgbaton.contrib.django gives Django's connection
        inside transaction.atomic(); None removes the provider."""
        _check_provider("provide_connection", provider)
        self._connection_provider = provider
        if self._queue is not None:
            self._queue.connection_provider = provider

    def provide_async_connection(self, provider: AsyncConnectionProvider | None) -> None:
        """provide_connection() for the async enqueues (an AsyncSession, say)."""
        _check_provider("provide_async_connection", provider)
        self._async_connection_provider = provider
        if self._async_queue is not None:
            self._async_queue.connection_provider = provider

    @overload
    def task(self, func: Callable[P, R]) -> TypedTask[P, R]: ...

    @overload
    def task(
        self,
        func: None = None,
        *,
        name: str | None = None,
        queue: str = "default",
        max_attempts: int = 5,
        retry: RetryPolicy | None = None,
        key: str | KeyFunction | None = None,
        timeout: float | None = None,
        lease: float | None = None,
        pass_context: Literal[False] = False,
        unique: Unique | None = None,
        retry_on: RetryOn | None = None,
        max_snoozes: int = DEFAULT_MAX_SNOOZES,
        encrypt: bool = False,
        job_logs: bool = True,
    ) -> Callable[[Callable[P, R]], TypedTask[P, R]]: ...

    @overload
    def task(
        self,
        func: None = None,
        *,
        name: str | None = None,
        queue: str = "default",
        max_attempts: int = 5,
        retry: RetryPolicy | None = None,
        key: str | KeyFunction | None = None,
        timeout: float | None = None,
        lease: float | None = None,
        pass_context: Literal[True],
        unique: Unique | None = None,
        retry_on: RetryOn | None = None,
        max_snoozes: int = DEFAULT_MAX_SNOOZES,
        encrypt: bool = False,
        job_logs: bool = True,
    ) -> Callable[[Callable[Concatenate[JobContext, P], R]], ContextTask[P, R]]: ...

    def task(
        self,
        func: Callable[..., Any] | None = None,
        *,
        name: str | None = None,
        queue: str = "default",
        max_attempts: int = 5,
        retry: RetryPolicy | None = None,
        key: str | KeyFunction | None = None,
        timeout: float | None = None,
        lease: float | None = None,
        pass_context: bool = False,
        unique: Unique | None = None,
        retry_on: RetryOn | None = None,
        max_snoozes: int = DEFAULT_MAX_SNOOZES,
        encrypt: bool = False,
        job_logs: bool = True,
    ) -> Task | Callable[[Callable[..., Any]], Task]:
        """Register a handler, async def or plain def. Its job's args are its keyword
        arguments; with pass_context=True a JobContext comes first. A job that raises is
        tried again after retry(attempt) seconds (default: pgbaton.Backoff()) until it
        has had max_attempts tries (docs/howto/retries.md); retry_on: the only errors
        retried (any other fails the job at once). A handler may raise pgbaton.Snooze,
        Cancel or Discard; a job that snoozes more than max_snoozes times fails. unique:
        what makes two of its jobs the same (docs/howto/unique.md). encrypt=True: its args
        are stored sealed with PGBATON_ENCRYPTION_KEYS's first key
        (docs/howto/encryption.md). Annotated parameters are validated at enqueue and
        converted at run when pydantic is installed (docs/howto/typed-args.md).
        job_logs=False: what its handler logs is not kept with the job
        (docs/howto/progress-and-logs.md)."""

        def register(func: Callable[..., Any]) -> Task:
            task_name = name or func.__name__
            if task_name in self.tasks:
                raise ConfigurationError(f"a task named {task_name!r} is already registered")
            check_int4("max_attempts", max_attempts, minimum=1)
            kind: type[Task] = ContextTask if pass_context else TypedTask
            task = kind(
                self, func, name=task_name, queue=queue, max_attempts=max_attempts,
                retry=retry, key=key, timeout=timeout, lease=lease, pass_context=pass_context,
                unique=unique, retry_on=retry_on, max_snoozes=max_snoozes,
                encrypt=encrypt,
            )
            if not isinstance(job_logs, bool):
                raise InvalidArgument(f"job_logs must be True or False, got {job_logs!r}")
            task.job_logs = job_logs
            self.tasks[task_name] = task
            return task

        return register(func) if func is not None else register

    def middleware(self, middleware: Middleware) -> Middleware:
        """Wrap every handler call: `async def middleware(context, call_next)` (see
        pgbaton.middleware). The first registered is the outermost. Works as a decorator."""
        if not callable(middleware):
            raise InvalidArgument(f"a middleware must be callable, got {middleware!r}")
        self.middlewares.append(middleware)
        return middleware

    def limit(
        self, queue: str, *, concurrency: int | None = None, rate: object = None
    ) -> None:
        """Declare a queue's fleet-wide limits: at most `concurrency` of its jobs held at
        once, at most `rate` starts per sliding window ("100/s"). A worker of this App
        writes the limits named here when it starts; until then, and for limits not
        named, the command line's settings stand (docs/explanation/flow_control.md)."""
        if not isinstance(queue, str) or not queue:
            raise InvalidArgument(f"queue must be a non-empty string, got {queue!r}")
        limits = (check_concurrency(concurrency), parse_rate(rate))
        if limits == (None, None):
            raise InvalidArgument(f"app.limit({queue!r}) names no limit: give concurrency= "
                                  "or rate=")
        self.queue_limits[queue] = limits

    def subscribe(self, subscriber: Subscriber, names: Any = None) -> Subscriber:
        """Call subscriber(event) for what happens to this App's jobs and workers (every
        event, or those named; see pgbaton.events.EVENTS). Works as a decorator."""
        return self.events.subscribe(subscriber, names)

    def periodic(
        self,
        cron: str,
        *,
        args: Mapping[str, Any] | None = None,
        schedule: str | None = None,
        timezone: str = "UTC",
        catch_up: str = "skip",
        catch_up_limit: int = DEFAULT_CATCH_UP_LIMIT,
        **task_options: Any,
    ) -> Callable[[Callable[..., Any]], Task]:
        """Register a task and enqueue it at each tick of `cron` (5 fields, or 6 with
        seconds last) read in `timezone`, exactly once per tick however many workers
        run. schedule: its name in the schedules table (default TASK:ID); catch_up:
        what becomes of ticks missed while no worker led (docs/explanation/schedules.md)."""
        now = dt.datetime.now(dt.UTC)
        Cron(cron, timezone).check_fires(now)
        catch_up, catch_up_limit = check_catch_up(catch_up, catch_up_limit)
        if schedule is not None:
            check_schedule_name(schedule)

        def register(func: Callable[..., Any]) -> Task:
            task = func if isinstance(func, Task) else self.task(func, **task_options)
            periodic = Periodic(task, cron, args, schedule, timezone, catch_up,
                                catch_up_limit)
            refuse_sealed_schedule_args(task, args)
            try:
                # The key function and the args' encoding fail here, at definition,
                # rather than inside the maintenance leader at each tick.
                job_params(task.name, args, **task.job_options(args, {"run_at": now}))
                if task.arg_types and args:
                    task.arg_types.check(args)
            except Exception as error:
                raise InvalidArgument(
                    f"periodic schedule {cron!r} of task {task.name!r} cannot make a job: "
                    f"{type(error).__name__}: {error}"
                ) from None
            if any(p.task is task and p.schedule_id == periodic.schedule_id
                   for p in self.periodics):
                raise InvalidArgument(
                    f"task {task.name!r} already has the schedule {cron!r} with these args: "
                    "two identical schedules would enqueue each tick once, not twice"
                )
            if any(p.name == periodic.name for p in self.periodics):
                raise InvalidArgument(f"the App has a schedule named {periodic.name!r} "
                                      "already: give each schedule= its own name")
            self.periodics.append(periodic)
            return task

        return register

    @property
    def schedules(self) -> Schedules:
        """Add, change, pause, resume, run now and remove schedules at run time, and
        list them with those of @app.periodic (docs/explanation/schedules.md)."""
        return Schedules(self)

    def run_worker(
        self, config: WorkerConfig | None = None, *, app_spec: str | None = None,
        **options: Any,
    ) -> int:
        """Run a worker in this process until SIGTERM or SIGINT; returns an exit status.
        Options are WorkerConfig's fields. processes=N > 1 needs app_spec="MODULE:APP"
        (each worker process imports the App by that name)."""
        if _worker_runner is None:
            raise ConfigurationError("import pgbaton.worker to run workers")
        if config is not None and options:
            raise InvalidArgument("give a WorkerConfig or its fields as keywords, not both")
        return _worker_runner(self, config, app_spec, options)


def _check_provider(method: str, provider: object) -> None:
    if provider is not None and not callable(provider):
        raise InvalidArgument(
            f"{method} takes a function that returns the connection to join (or None), "
            f"or None; got {type(provider).__name__}"
        )


def load_app(spec: str) -> App:
    """MODULE:ATTRIBUTE to the App it names, importing MODULE with the current directory
    on sys.path; ConfigurationError says what was wrong. The command line, the worker
    processes, the dashboard and the pytest plugin all load an App through this."""
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise ConfigurationError(f"{spec!r} is not MODULE:ATTRIBUTE (e.g. myproject.jobs:app)")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise ConfigurationError(f"cannot import {module_name!r}: {error}") from None
    if not hasattr(module, attribute):
        near = difflib.get_close_matches(attribute, [n for n in dir(module)
                                                     if isinstance(getattr(module, n), App)], 1)
        hint = f"; did you mean {module_name}:{near[0]}?" if near else ""
        raise ConfigurationError(f"{module_name!r} has no attribute {attribute!r}{hint}")
    app = getattr(module, attribute)
    if not isinstance(app, App):
        raise ConfigurationError(f"{spec!r} is not a pgbaton.App (found {type(app).__name__})")
    return app
