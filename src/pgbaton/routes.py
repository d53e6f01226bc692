"""An App's routes: which queues keep their jobs in another database, and the queues
(connection pools) the App opens there. docs/explanation/scaling.md, "Queues over several
databases", says what routing keeps of the guarantees."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from psycopg.conninfo import conninfo_to_dict

from ._checks import JOB_DEFAULTS, _brief, check_name
from .dsn import normalize_dsn, redact_dsn, with_application_name
from .errors import ConfigurationError, InvalidArgument
from .queue import Queue
from .queue_async import AsyncQueue

if TYPE_CHECKING:
    from .dependencies import Batch
    from .events import Events

# Names a connection; two DSNs that differ only in these reach the same database.
_NOT_WHERE = ("application_name", "fallback_application_name")


def same_database(dsn: str, other: str) -> bool:
    """Whether two DSNs name the same server, database and role (spelling aside)."""
    def where(text: str) -> dict[str, object]:
        return {k: v for k, v in conninfo_to_dict(text).items() if k not in _NOT_WHERE}
    return where(dsn) == where(other)


class Routes:
    """Queue name -> DSN, checked as each route is added, and one Queue and AsyncQueue
    per routed database, opened when first used."""

    def __init__(self) -> None:
        self._dsn_of: dict[str, str] = {}
        self._queues: dict[str, Queue] = {}
        self._async_queues: dict[str, AsyncQueue] = {}

    def add(self, queue: object, dsn: object, own_dsn: str | None) -> None:
        check_name("a route's queue", queue)
        assert isinstance(queue, str)
        if not isinstance(dsn, str) or not dsn.strip():
            raise InvalidArgument(
                f"the route of queue {queue!r} needs a DSN (a non-empty string), "
                f"got {_brief(dsn)}"
            )
        dsn = normalize_dsn(dsn, f"the route of queue {queue!r}")
        if queue in self._dsn_of:
            raise InvalidArgument(
                f"queue {queue!r} is already routed (to {redact_dsn(self._dsn_of[queue])}): "
                "one queue lives in one database"
            )
        if own_dsn is not None and same_database(dsn, own_dsn):
            raise InvalidArgument(
                f"the route of queue {queue!r} names the App's own database "
                f"({redact_dsn(dsn)}): its jobs are there without a route; drop it"
            )
        self._dsn_of[queue] = dsn

    def dsn_of(self, queue: str) -> str | None:
        # A malformed queue (a list, say) is not routed: enqueue refuses it in one line.
        return self._dsn_of.get(queue) if isinstance(queue, str) else None

    def shared_by(self, queues: Iterable[str] | None) -> str | None:
        """The DSN every queue is routed to (None: the App's own); refuses two."""
        where = self._by_database(queues or ())
        if len(where) > 1:
            raise ConfigurationError(
                f"queues of two databases cannot be worked by one worker: "
                f"{_describe(where)} (run one worker per database)"
            )
        return next(iter(where), None)

    def queue_of_many(self, jobs: list[Mapping[str, Any]], batch: Batch | None) -> str:
        """A queue standing for the database of every job and callback of one
        enqueue_many call; InvalidArgument when they are routed to two databases."""
        queues = [job.get("queue") if isinstance(job, Mapping) else None for job in jobs]
        for callback in (batch.on_finish, batch.on_success) if batch is not None else ():
            queues.append(getattr(callback, "queue", None))
        # A missing or malformed queue is the default here; enqueue_many refuses the
        # malformed ones itself, before writing.
        named = [q if isinstance(q, str) else JOB_DEFAULTS["queue"] for q in queues]
        where = self._by_database(named)
        if len(where) > 1:
            raise InvalidArgument(
                f"one enqueue_many writes to one database, and these jobs' queues are "
                f"routed to two: {_describe(where)}; nothing was written (call it once "
                "per database)"
            )
        return named[0] if named else JOB_DEFAULTS["queue"]

    def _by_database(self, queues: Iterable[str]) -> dict[str | None, list[str]]:
        where: dict[str | None, list[str]] = {}
        for queue in queues:
            names = where.setdefault(self._dsn_of.get(queue), [])
            if queue not in names:
                names.append(queue)
        return where

    def queue(self, dsn: str, schema: str, events: Events) -> Queue:
        if dsn not in self._queues:
            # The App's connection provider is left out: it joins the App's own database.
            self._queues[dsn] = Queue(with_application_name(dsn, None), schema=schema,
                                      events=events)
        return self._queues[dsn]

    def async_queue(self, dsn: str, schema: str, events: Events) -> AsyncQueue:
        if dsn not in self._async_queues:
            self._async_queues[dsn] = AsyncQueue(with_application_name(dsn, None),
                                                 schema=schema, events=events)
        return self._async_queues[dsn]

    def dsns(self) -> list[str]:
        """Every routed database, once each, in the order first routed."""
        return list(dict.fromkeys(self._dsn_of.values()))

    def forget_queues(self) -> None:
        """After App.configure: the next use opens queues with the new schema."""
        self._queues.clear()
        self._async_queues.clear()


def _describe(where: Mapping[str | None, list[str]]) -> str:
    parts = []
    for dsn, names in where.items():
        database = "the App's own database" if dsn is None else redact_dsn(dsn)
        parts.append(f"{', '.join(map(repr, names))} in {database}")
    return "; ".join(parts)
