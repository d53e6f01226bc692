"""App and Task: register handlers, enqueue them by name, run workers for them.

Over 400 lines on purpose: Task and its typed forms (TypedTask, ContextTask, Deferral)
share the argument checks they all apply at enqueue, and App is their registry; split
apart, each would import the others."""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import difflib
import functools
import hashlib
import importlib
import inspect
import json
import logging
import os
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import (
    TYPE_CHECKING,
    Any,
    Concatenate,
    Generic,
    Literal,
    ParamSpec,
    TypedDict,
    TypeVar,
    Unpack,
    cast,
    overload,
)

from . import _sql, waiting
from ._checks import check_int4, check_lease, check_name, job_params
from .context import JobContext
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
from .middleware import Middleware
from .models import Backoff, Enqueued
from .queue import Queue
from .queue_async import AsyncQueue
from .routes import Routes
from .unique import Unique, check_unique

if TYPE_CHECKING:
    from .dependencies import Batch
    from .worker import WorkerConfig

# pgbaton.worker registers its run_worker here when it is imported (pgbaton's own
# __init__ imports it), so that App.run_worker can start a worker while the App never
# imports the worker: the worker depends on the App, not the other way round.
WorkerRunner = Callable[..., int]
_worker_runner: WorkerRunner | None = None


def register_worker_runner(runner: WorkerRunner) -> None:
    global _worker_runner  # noqa: PLW0603 (set once, by pgbaton.worker)
    _worker_runner = runner


RetryPolicy = Callable[[int], float | None]
"""A task's retry=: the attempt number (1 for the first try) to the seconds to wait
before the next one, or None for the default backoff (pgbaton.Backoff(): 1 s doubling,
at most an hour, jittered). docs/howto/retries.md."""


class EnqueueOptions(TypedDict, total=False):
    """What a task's enqueue(), enqueue_async() and using() take besides the args and
    conn=: Queue.enqueue's options (docs/howto/queue-api.md says what each does)."""

    queue: str
    priority: int
    run_at: dt.datetime | None
    delay: float | None
    key: str | None
    idempotency_key: str | None
    max_attempts: int
    after: Iterable[int] | None
    after_failure: Literal["cancel", "run"]
    limit_key: str | None
    unique: Unique | None


def check_enqueue_options(task: str, options: Mapping[str, Any]) -> None:
    """InvalidArgument naming an option no enqueue takes (a typo found at run time
    rather than deep inside Queue.enqueue), with the nearest real one."""
    for name in options:
        if name not in EnqueueOptions.__optional_keys__:
            near = difflib.get_close_matches(name, sorted(EnqueueOptions.__optional_keys__), 1)
            hint = f"; did you mean {near[0]!r}?" if near else "."
            raise InvalidArgument(
                f"{task}: {name!r} is not an enqueue option{hint} The options are "
                + ", ".join(sorted(EnqueueOptions.__optional_keys__)) + " and conn."
            )
KeyFunction = Callable[..., Any]

P = ParamSpec("P")
R = TypeVar("R")

_BY_NAME = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)


class Task:
    """A registered handler. Call it to run it in-process; enqueue() to run it on a worker.

    What `@app.task` returns is one of its typed kinds, TypedTask or ContextTask, whose
    direct call and defer() carry the handler's parameter types for mypy.
    """

    def __init__(
        self,
        app: App,
        func: Callable[..., Any],
        *,
        name: str,
        queue: str,
        max_attempts: int,
        retry: RetryPolicy | None,
        key: str | KeyFunction | None,
        timeout: float | None,
        lease: float | None,
        pass_context: bool,
        unique: Unique | None = None,
    ) -> None:
        self.app = app
        self.func = func
        self.name = name
        self.queue = queue
        self.max_attempts = max_attempts
        self.retry = retry or Backoff()
        self.key = key
        self.timeout = None if timeout is None else check_lease(timeout)
        self.lease = None if lease is None else check_lease(lease)
        self.pass_context = pass_context
        self.is_async = inspect.iscoroutinefunction(func)
        self.signature = _job_signature(func, name, pass_context)
        # What check_args needs to pass the usual call without building anything: the
        # names the handler takes and those it requires. None when a parameter is
        # positional-only, which only Signature.bind judges.
        parameters = self.signature.parameters.values()
        self._names_taken: tuple[frozenset[str], frozenset[str], bool] | None = (
            None if any(p.kind is inspect.Parameter.POSITIONAL_ONLY for p in parameters)
            else (
                frozenset(p.name for p in parameters if p.kind in _BY_NAME),
                frozenset(p.name for p in parameters
                          if p.kind in _BY_NAME and p.default is p.empty),
                any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters),
            )
        )
        self.unique = unique
        if unique is not None:
            check_unique(unique)
            unique.check_names(name, self.names_taken())
        functools.update_wrapper(self, func)

    def names_taken(self) -> frozenset[str] | None:
        """The arg names the handler takes; None when it takes any (**kwargs)."""
        parameters = self.signature.parameters.values()
        if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
            return None
        return frozenset(p.name for p in parameters if p.kind in _BY_NAME)

    def __repr__(self) -> str:
        return f"<Task {self.name!r} queue={self.queue!r}>"

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.func(*args, **kwargs)

    def check_args(self, args: Mapping[str, Any] | None) -> None:
        """Refuse args the handler could not be called with, before anything is written:
        every missing and every unexpected name is listed."""
        if not isinstance(args, Mapping | None):
            raise InvalidArgument(
                f"args for task {self.name!r} must be a mapping of keyword arguments, "
                f"got {type(args).__name__}"
            )
        if self._names_taken is not None:
            # Without positional-only parameters, args that name every required
            # parameter and (unless the handler takes **kwargs) no other are args that
            # Signature.bind accepts: the check below would find nothing.
            taken, required, takes_any = self._names_taken
            names = (args or {}).keys()
            if required <= names and (
                names <= taken if not takes_any else all(isinstance(n, str) for n in names)
            ):
                return
        given = dict(args or {})
        parameters = self.signature.parameters.values()
        by_name = {p.name: p for p in parameters if p.kind in _BY_NAME}
        takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters)
        missing = [n for n, p in by_name.items() if p.default is p.empty and n not in given]
        unexpected = [] if takes_any else [n for n in given if n not in by_name]
        problems = [
            f"{what} {', '.join(map(repr, names))}"
            for what, names in (("missing", missing), ("unexpected", unexpected)) if names
        ]
        if not problems:
            try:
                self.signature.bind(**given)
            except TypeError as error:
                problems.append(str(error))
        if problems:
            raise InvalidArgument(
                f"task {self.name!r} cannot take these args: {'; '.join(problems)} "
                f"(its handler takes {self.describe_parameters()})"
            )

    def describe_parameters(self) -> str:
        """The handler's job parameters, e.g. `customer_id, amount, currency=...`."""
        shown = [_describe(p) for p in self.signature.parameters.values()]
        return ", ".join(shown) or "no arguments"

    def job_options(
        self, args: Mapping[str, Any] | None, options: Mapping[str, Any]
    ) -> dict[str, Any]:
        """Queue.enqueue keywords for one job: the task's defaults, then the caller's."""
        check_enqueue_options(self.name, options)
        merged: dict[str, Any] = {"queue": self.queue, "max_attempts": self.max_attempts}
        if self.key is not None and "key" not in options:
            merged["key"] = self.key(**(args or {})) if callable(self.key) else self.key
            if merged["key"] is not None:
                merged["key"] = str(merged["key"])
        merged.update(options)
        unique = merged.get("unique")
        if unique is None and "unique" not in options and self.unique is not None:
            merged["unique"] = unique = self.unique
        if unique is not None and unique is not self.unique:
            check_unique(unique)
            unique.check_names(self.name, self.names_taken())
        return merged

    def options_to_wait(self, options: Mapping[str, Any]) -> dict[str, Any]:
        """Enqueue options for a job to be waited for: not in the caller's transaction,
        whose job no worker sees before the commit that the wait would hold back."""
        if options.get("conn") is not None:
            raise InvalidArgument(
                f"{self.name}: a job enqueued with conn= cannot be waited for before its "
                "transaction commits: defer() it, commit, then App.wait() its id"
            )
        return {name: value for name, value in options.items() if name != "conn"}

    def queue_of(self, options: Mapping[str, Any]) -> str:
        """The queue a job of these enqueue options goes to."""
        return str(options.get("queue", self.queue))

    def enqueue(
        self,
        args: Mapping[str, Any] | None = None,
        *,
        conn: CallerConnection | None = None,
        **options: Unpack[EnqueueOptions],
    ) -> int:
        """Queue.enqueue for this task: same options (queue, priority, run_at, delay, key,
        idempotency_key, max_attempts) and conn= for the caller's transaction. The args
        are checked against the handler's parameters first (InvalidArgument)."""
        self.check_args(args)
        job = self.job_options(args, options)
        return self.app.queue_for(job["queue"]).enqueue(self.name, args, conn=conn, **job)

    async def enqueue_async(
        self,
        args: Mapping[str, Any] | None = None,
        *,
        conn: AsyncCallerConnection | None = None,
        **options: Unpack[EnqueueOptions],
    ) -> int:
        """AsyncQueue.enqueue for this task, with the same checks."""
        self.check_args(args)
        job = self.job_options(args, options)
        return await self.app.async_queue_for(job["queue"]).enqueue(
            self.name, args, conn=conn, **job
        )

    def enqueue_once(
        self,
        args: Mapping[str, Any] | None = None,
        *,
        conn: CallerConnection | None = None,
        **options: Unpack[EnqueueOptions],
    ) -> Enqueued:
        """Queue.enqueue_once for this task (its unique=, or the idempotency_key= or
        unique= given): what the enqueue did, Enqueued(id, created, outcome, status)."""
        self.check_args(args)
        job = self.job_options(args, options)
        return self.app.queue_for(job["queue"]).enqueue_once(self.name, args, conn=conn, **job)

    async def enqueue_once_async(
        self,
        args: Mapping[str, Any] | None = None,
        *,
        conn: AsyncCallerConnection | None = None,
        **options: Unpack[EnqueueOptions],
    ) -> Enqueued:
        """enqueue_once() through the App's AsyncQueue."""
        self.check_args(args)
        job = self.job_options(args, options)
        return await self.app.async_queue_for(job["queue"]).enqueue_once(
            self.name, args, conn=conn, **job
        )

    def args_of_call(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        """A call's arguments as the job's keyword args (positional ones by their names),
        checked as enqueue() checks them."""
        try:
            bound = self.signature.bind_partial(*args, **kwargs)
        except TypeError as error:
            raise InvalidArgument(
                f"task {self.name!r} cannot take these args: {error} "
                f"(its handler takes {self.describe_parameters()})"
            ) from None
        job_args: dict[str, Any] = {}
        for name, value in bound.arguments.items():
            kind = self.signature.parameters[name].kind
            if kind is inspect.Parameter.VAR_KEYWORD:
                job_args.update(value)
            elif kind is inspect.Parameter.VAR_POSITIONAL:
                if value:
                    raise InvalidArgument(
                        f"task {self.name!r}: a job's args are keyword arguments, so "
                        f"*{name} cannot be given"
                    )
            else:
                job_args[name] = value
        self.check_args(job_args)
        return job_args


class Deferral(Generic[P]):
    """One task with enqueue options fixed, waiting for the handler's arguments:
    `charge.using(delay=60, conn=conn).defer(customer_id=3, amount=100)`."""

    def __init__(self, task: Task, options: dict[str, Any]) -> None:
        self.task = task
        self.options = options

    def defer(self, *args: P.args, **kwargs: P.kwargs) -> int:
        """Enqueue one job with these arguments, typed as the handler's; returns its id."""
        return self.task.enqueue(self.task.args_of_call(*args, **kwargs), **self.options)

    async def defer_async(self, *args: P.args, **kwargs: P.kwargs) -> int:
        """defer() through the App's AsyncQueue (conn= an AsyncConnection)."""
        return await self.task.enqueue_async(
            self.task.args_of_call(*args, **kwargs), **self.options
        )

    def defer_and_wait(self, timeout: float | None, /, *args: P.args, **kwargs: P.kwargs) -> Any:
        """defer(), then App.wait() for the job's result (timeout first, in seconds or
        None for no limit; the handler's arguments follow)."""
        options = self.task.options_to_wait(self.options)
        job_id = self.task.enqueue(self.task.args_of_call(*args, **kwargs), **options)
        return self.task.app.wait(job_id, timeout=timeout, queue=self.task.queue_of(options))

    async def defer_and_wait_async(
        self, timeout: float | None, /, *args: P.args, **kwargs: P.kwargs
    ) -> Any:
        """defer_and_wait() through the App's AsyncQueue."""
        options = self.task.options_to_wait(self.options)
        job_id = await self.task.enqueue_async(
            self.task.args_of_call(*args, **kwargs), **options)
        return await self.task.app.wait_async(job_id, timeout=timeout,
                                              queue=self.task.queue_of(options))


class Deferrable(Task, Generic[P]):
    """The typed ways to enqueue a task, shared by TypedTask and ContextTask."""

    def using(
        self,
        *,
        conn: CallerConnection | AsyncCallerConnection | None = None,
        **options: Unpack[EnqueueOptions],
    ) -> Deferral[P]:
        """Fix enqueue options (those of EnqueueOptions, and conn) for a typed defer();
        an option no enqueue takes is refused here (InvalidArgument)."""
        check_enqueue_options(self.name, options)
        return Deferral(self, {"conn": conn, **options})

    def defer(self, *args: P.args, **kwargs: P.kwargs) -> int:
        """Enqueue one job, its arguments written as in a direct call and typed as the
        handler's (mypy checks them; enqueue(dict) is the untyped form). Returns its id."""
        return self.enqueue(self.args_of_call(*args, **kwargs))

    async def defer_async(self, *args: P.args, **kwargs: P.kwargs) -> int:
        """defer() through the App's AsyncQueue."""
        return await self.enqueue_async(self.args_of_call(*args, **kwargs))

    def defer_and_wait(self, timeout: float | None, /, *args: P.args, **kwargs: P.kwargs) -> Any:
        """defer(), then App.wait() for the job's result: `timeout` first (seconds, or
        None for no limit), then the handler's arguments. Raises as App.wait does."""
        return Deferral[P](self, {}).defer_and_wait(timeout, *args, **kwargs)

    async def defer_and_wait_async(
        self, timeout: float | None, /, *args: P.args, **kwargs: P.kwargs
    ) -> Any:
        """defer_and_wait() through the App's AsyncQueue."""
        return await Deferral[P](self, {}).defer_and_wait_async(timeout, *args, **kwargs)


class TypedTask(Deferrable[P], Generic[P, R]):
    """What `@app.task` returns: a Task typed with its handler's parameters and result."""

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        return cast(R, self.func(*args, **kwargs))


class ContextTask(Deferrable[P], Generic[P, R]):
    """What `@app.task(pass_context=True)` returns: called directly with a JobContext
    first; deferred with the other arguments only (the worker supplies the context)."""

    def __call__(self, ctx: JobContext, *args: P.args, **kwargs: P.kwargs) -> R:
        return cast(R, self.func(ctx, *args, **kwargs))


def _describe(parameter: inspect.Parameter) -> str:
    if parameter.kind is inspect.Parameter.VAR_KEYWORD:
        return f"**{parameter.name}"
    if parameter.kind is inspect.Parameter.VAR_POSITIONAL:
        return f"*{parameter.name}"
    return parameter.name if parameter.default is parameter.empty else f"{parameter.name}=..."


def _job_signature(func: Callable[..., Any], name: str, pass_context: bool) -> inspect.Signature:
    """The handler's parameters that a job's args fill: all but the context."""
    signature = inspect.signature(func)
    parameters = list(signature.parameters.values())
    if pass_context:
        if not parameters or parameters[0].kind not in (
            inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD
        ):
            raise ConfigurationError(
                f"task {name!r} has pass_context=True, so its handler must take the "
                "JobContext as its first positional parameter"
            )
        parameters = parameters[1:]
    return signature.replace(parameters=parameters)


# A schedule that does not fire within this horizon is a mistake ("0 0 30 2 *").
PERIODIC_HORIZON = dt.timedelta(days=5 * 366)


@dataclass(frozen=True)
class Periodic:
    """One schedule: a task enqueued by the maintenance leader at each tick of a cron
    expression, with fixed args. One task may have several schedules."""

    task: Task
    cron: str
    args: Mapping[str, Any] | None = None

    @property
    def schedule_id(self) -> str:
        """Tells this schedule from the task's others (cron and args), for its keys."""
        text = json.dumps([self.cron, self.args or {}], sort_keys=True, default=repr)
        return hashlib.sha256(text.encode()).hexdigest()[:12]

    def idempotency_key(self, tick: dt.datetime) -> str:
        return f"pgbaton:periodic:{self.task.name}:{self.schedule_id}:{tick.isoformat()}"


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
        caller's conn= still wins. docs/scaling.md says what routing keeps."""
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
        return self.queue_for(route).enqueue_many(jobs, conn=conn, batch=batch)

    async def enqueue_many_async(
        self, jobs: Iterable[Mapping[str, Any]], *,
        conn: AsyncCallerConnection | None = None, batch: Batch | None = None,
    ) -> list[int]:
        """enqueue_many() through the AsyncQueue of the jobs' database."""
        jobs, batch = self.with_task_defaults(jobs, batch)
        route = self._routes.queue_of_many(jobs, batch)
        self.check_callback_args(batch)
        return await self.async_queue_for(route).enqueue_many(jobs, conn=conn, batch=batch)

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
            except InvalidArgument as error:
                raise InvalidArgument(f"job {position}: {error}") from None
            options = {name: value for name, value in job.items()
                       if name not in ("task", "args")}
            filled.append({"task": task.name, "args": args,
                           **task.job_options(args, options)})
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
    ) -> Task | Callable[[Callable[..., Any]], Task]:
        """Register a handler, async def or plain def. Its job's args are its keyword
        arguments; with pass_context=True a JobContext comes first. A job that raises is
        tried again after retry(attempt) seconds (default: pgbaton.Backoff()) until it
        has had max_attempts tries (docs/howto/retries.md). unique: what makes two of
        its jobs the same (docs/howto/unique.md)."""

        def register(func: Callable[..., Any]) -> Task:
            task_name = name or func.__name__
            if task_name in self.tasks:
                raise ConfigurationError(f"a task named {task_name!r} is already registered")
            check_int4("max_attempts", max_attempts, minimum=1)
            kind: type[Task] = ContextTask if pass_context else TypedTask
            task = kind(
                self, func, name=task_name, queue=queue, max_attempts=max_attempts,
                retry=retry, key=key, timeout=timeout, lease=lease, pass_context=pass_context,
                unique=unique,
            )
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
        named, the command line's settings stand (docs/flow_control.md)."""
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
        **task_options: Any,
    ) -> Callable[[Callable[..., Any]], Task]:
        """Register a task and enqueue it at each tick of `cron` (5 fields, or 6 with
        seconds last), exactly once per tick however many workers run."""
        from croniter import croniter

        if not isinstance(cron, str) or not croniter.is_valid(cron):
            raise InvalidArgument(f"not a cron expression: {cron!r}")
        now = dt.datetime.now(dt.UTC)
        try:
            first = croniter(cron, now).get_next(dt.datetime)
        except Exception:  # croniter gives up on dates that never come ("0 0 30 2 *")
            first = None
        if first is None or first - now > PERIODIC_HORIZON:
            raise InvalidArgument(
                f"cron {cron!r} never fires (no tick within five years): check the day "
                "and month fields"
            )

        def register(func: Callable[..., Any]) -> Task:
            task = func if isinstance(func, Task) else self.task(func, **task_options)
            periodic = Periodic(task, cron, args)
            try:
                # The key function and the args' encoding fail here, at definition,
                # rather than inside the maintenance leader at each tick.
                job_params(task.name, args, **task.job_options(args, {"run_at": now}))
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
            self.periodics.append(periodic)
            return task

        return register

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
