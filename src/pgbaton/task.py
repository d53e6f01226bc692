"""Task: a registered handler, and its typed forms (TypedTask, ContextTask, Deferrable,
Deferral) with the argument checks they all apply at enqueue and at run.

The App (app.py) is their registry and makes them; a Task reaches its App only through
the `app` it is given (queue_for, wait), so this module never imports app.py at run
time. pgbaton.app re-exports every public name here."""

from __future__ import annotations

import datetime as dt
import difflib
import functools
import inspect
import os
from collections.abc import Callable, Iterable, Mapping
from typing import (
    TYPE_CHECKING,
    Any,
    Generic,
    Literal,
    ParamSpec,
    TypedDict,
    TypeVar,
    Unpack,
    cast,
)

from . import encryption
from ._checks import check_int4, check_lease, check_seconds, retry_delay
from ._encoding import to_json
from .context import JobContext
from .dependencies import CALLBACK_ARG
from .errors import ArgsRejected, ConfigurationError, InvalidArgument
from .integrations.connections import AsyncCallerConnection, CallerConnection
from .limits import DEFAULT_MAX_SNOOZES
from .models import Backoff, Enqueued
from .typed_args import ArgTypes
from .unique import Unique, check_unique

if TYPE_CHECKING:
    from .app import App

RetryPolicy = Callable[[int], float | None] | Callable[[int, BaseException], float | None]
"""A task's retry=, one of two kinds (docs/howto/retries.md). Given the attempt number
(1 for the first try): the seconds to wait before the next one, or None for the default
backoff (pgbaton.Backoff(): 1 s doubling, at most an hour, jittered). Given the attempt
number and the error: the seconds to wait, or None to stop retrying (the job fails)."""

RetryOn = tuple[type[BaseException], ...]
"""A task's retry_on=: the only errors retried; any other fails the job at once."""


def _takes_error(policy: Callable[..., Any]) -> bool:
    """Whether a retry policy takes (attempt, error) rather than (attempt)."""
    try:
        inspect.signature(policy).bind(1, None)
    except TypeError:
        return False
    except ValueError:  # no signature to read (some builtins): called with one argument
        return False
    return True


def _check_retry_on(retry_on: object) -> RetryOn | None:
    if retry_on is None:
        return None
    if not isinstance(retry_on, tuple) or not all(
        isinstance(kind, type) and issubclass(kind, BaseException) for kind in retry_on
    ):
        hint = (f"; write retry_on=({retry_on.__name__},)" if isinstance(retry_on, type)
                else "")
        raise InvalidArgument(
            f"retry_on must be a tuple of exception classes, got {retry_on!r:.80}{hint}"
        )
    return retry_on


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
        retry_on: RetryOn | None = None,
        max_snoozes: int = DEFAULT_MAX_SNOOZES,
        encrypt: bool = False,
    ) -> None:
        self.app = app
        self.func = func
        self.name = name
        self.queue = queue
        self.max_attempts = max_attempts
        if retry is not None and not callable(retry):
            raise InvalidArgument(f"retry must be callable, got {retry!r:.80}")
        self.retry = retry or Backoff()
        self._retry_takes_error = _takes_error(self.retry)
        self.retry_on = _check_retry_on(retry_on)
        self.max_snoozes = check_int4("max_snoozes", max_snoozes, minimum=0)
        self.key = key
        self.timeout = None if timeout is None else check_lease(timeout)
        self.lease = None if lease is None else check_lease(lease)
        self.pass_context = pass_context
        # Keep what the handler logs with the job (docs/howto/progress-and-logs.md).
        self.job_logs = True
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
        if not isinstance(encrypt, bool):
            raise InvalidArgument(f"task {name!r}: encrypt= must be True or False, "
                                  f"got {encrypt!r}")
        self.encrypt = encrypt
        if encrypt:
            encryption.check_available()
            self._check_unique_sealed(unique)
        # The handler's annotated parameters, judged at enqueue and converted at run
        # when pydantic is installed (docs/howto/typed-args.md).
        self.arg_types = ArgTypes(name, func, self.signature, sealed=encrypt)
        # A handler whose parameters are all required and typed int, float, str or bool
        # (`seq: int`): its args are judged by their count and types alone at run.
        as_is = self.arg_types.as_is
        self._exact_args = as_is if (
            as_is is not None and self._names_taken is not None
            and not self._names_taken[2]
            and self._names_taken[0] == self._names_taken[1] == {n for n, _ in as_is}
        ) else None
        functools.update_wrapper(self, func)

    def retry_in(self, attempt: int, error: BaseException) -> float | None:
        """Seconds before the next attempt after this one failed with this error; None:
        it is not retried (not one of retry_on, or the policy said stop)."""
        if self.retry_on is not None and not isinstance(error, self.retry_on):
            return None
        if self._retry_takes_error:
            delay = cast("Callable[[int, BaseException], float | None]", self.retry)(
                attempt, error)
            return None if delay is None else check_seconds("retry_in", delay)
        return retry_delay(attempt, cast("Callable[[int], float | None]", self.retry)(attempt))

    def _check_unique_sealed(self, unique: Unique | None) -> None:
        """An encrypted task's unique= may not count its args: their digest would be
        stored in the clear beside the sealed args (docs/howto/encryption.md)."""
        if unique is not None and unique.args != ():
            raise InvalidArgument(
                f"task {self.name!r} encrypts its args, so its unique= cannot count them "
                "(their digest would be stored in the clear): give Unique(args=[]) or no "
                "unique="
            )

    def stored_args(self, args: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
        """The args as the job stores them: made JSON by the handler's types (typed
        args; InvalidArgument naming a field that does not fit), then sealed when the
        task encrypts (ConfigurationError without usable keys). Nothing is written
        before this has judged them."""
        if args and self.arg_types.adapters and not (
                self._exact_args is not None and self._as_given(args)):
            args = self.arg_types.check(args)
        if self.encrypt:
            text = to_json(dict(args or {}), f"args for task {self.name!r}")
            args = encryption.seal(self.name, text, encryption.keyring(self.name))
        return args

    def args_for_run(self, args: Mapping[str, Any]) -> Mapping[str, Any]:
        """A claimed job's stored args as its handler takes them: opened when sealed,
        checked against its parameters, converted to its types. ArgsRejected when
        that cannot be done: the job fails at once, as a retry would meet the same."""
        # Beside a batch callback's sealed args the database puts its `batch` (clear).
        if encryption.ENVELOPE in args and set(args) <= {encryption.ENVELOPE, CALLBACK_ARG}:
            try:
                ring: encryption.Keyring | None = encryption.keyring(self.name)
            except ConfigurationError as error:
                if encryption.KEYS_VARIABLE in os.environ:
                    raise ArgsRejected(str(error)) from None  # set, but malformed
                ring = None
            added = {name: value for name, value in args.items()
                     if name != encryption.ENVELOPE}
            args = {**encryption.open_sealed(self.name, args, ring), **added}
        elif self.encrypt:
            raise ArgsRejected(
                f"task {self.name!r} encrypts its args but this job's are not encrypted "
                "(enqueued through the SQL API or Queue.enqueue, which do not seal them): "
                "enqueue it through the task"
            )
        if self._exact_args is not None and self._as_given(args):
            return args
        arg_types = self.arg_types
        if not arg_types.adapters:
            return args
        if arg_types.as_is is not None and type(args) is dict and self._names_fit(args):
            for name, kind in arg_types.as_is:
                if name in args and type(args[name]) is not kind:
                    break
            else:
                return args  # what convert() would give: each of them as it is
        try:
            self.check_args(args)
        except InvalidArgument as error:
            raise ArgsRejected(str(error)) from None
        return self.arg_types.convert(args)

    def args_schema(self) -> dict[str, Any]:
        """The task's args as a JSON Schema object (`pgbaton tasks`, the dashboard)."""
        return self.arg_types.json_schema()

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

    def _as_given(self, args: Mapping[str, Any]) -> bool:
        """True when the args are exactly the parameters of _exact_args, each of its
        type already: what the adapters would hand back unchanged, at enqueue and at
        run, and what check_args would find nothing in."""
        exact = self._exact_args
        if exact is None or type(args) is not dict or len(args) != len(exact):
            return False
        for name, kind in exact:  # noqa: SIM110 (all() and its generator: twice the time)
            if type(args.get(name)) is not kind:
                return False
        return True

    def _names_fit(self, args: Mapping[str, Any]) -> bool:
        """True when the args name every required parameter and (unless the handler
        takes **kwargs) no other: without positional-only parameters, args that
        Signature.bind accepts, so check_args would find nothing."""
        if self._names_taken is None:
            return False
        taken, required, takes_any = self._names_taken
        names = args.keys()
        return required <= names and (
            names <= taken if not takes_any else all(isinstance(n, str) for n in names))

    def check_args(self, args: Mapping[str, Any] | None) -> None:
        """Refuse args the handler could not be called with, before anything is written:
        every missing and every unexpected name is listed."""
        # A dict first: the ABC's isinstance alone took longer than the rest of the
        # check (each enqueue through a task, each run of a typed one).
        if not (args is None or type(args) is dict or isinstance(args, Mapping)):
            raise InvalidArgument(
                f"args for task {self.name!r} must be a mapping of keyword arguments, "
                f"got {type(args).__name__}"
            )
        if self._names_fit(args or {}):
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
            if self.encrypt:
                self._check_unique_sealed(unique)
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
        return self.app.queue_for(job["queue"]).enqueue(
            self.name, self.stored_args(args), conn=conn, **job)

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
            self.name, self.stored_args(args), conn=conn, **job
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
        return self.app.queue_for(job["queue"]).enqueue_once(
            self.name, self.stored_args(args), conn=conn, **job)

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
            self.name, self.stored_args(args), conn=conn, **job
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
