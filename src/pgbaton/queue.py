# WARNING: generated from queue_async.py by tools/async_to_sync.py: DO NOT EDIT.
# Change queue_async.py and run `make generate`.
"""The data plane's face: what users call on a queue (generated sync twin).

AsyncQueue is made of one part per concern, each in _queue/ (_queue/__init__.py lists
them): the enqueue family (one job, once, many, by COPY, graphs and batches), reads,
operator actions, flow settings, schedules, the maintenance chores and the worker's
protocol. Each call is one statement of sql/*.sql run on the pool of the database
handle (_database_async.py) the queue is. The worker's and the leader's statements are
the engine's (engine_async.py, `queue.engine`, on the same pool); the
build-your-own-worker protocol keeps its names on the queue (claim, heartbeat,
complete, fail, release, snooze, the *_many calls, reap, archive, vacuum, ...), each a
delegate to the engine. What builds parameters or reads rows without I/O lives in
_queue_base.py and _checks.py, once for both twins; queue.py is generated from this.
"""

from __future__ import annotations

from collections.abc import Callable

from . import _database as database
from ._queue.chores import Chores
from ._queue.enqueueing import Enqueueing
from ._queue.flow_settings import FlowSettings
from ._queue.operator_actions import OperatorActions
from ._queue.reads import Reads
from ._queue.scheduling import Scheduling
from ._queue.worker_protocol import WorkerProtocol
from .engine import Engine
from .events import Events
from .integrations.connections import CallerConnection


# The API reference lists the members of the parts from the last base to the first: the
# enqueue family first, the schedules last. Scheduling is built on the enqueue family.
class Queue(
    Scheduling,
    FlowSettings,
    OperatorActions,
    Reads,
    Chores,
    WorkerProtocol,
    Enqueueing,
):
    """A handle on one pgbaton schema in one database.

    Connections come from a small pool, opened on first use after checking that the
    server is reachable, new enough, and migrated to this version of pgbaton, and
    (prepare=None) whether the DSN goes through a transaction pool, where the pool's
    connections then prepare no statements (docs/howto/pgbouncer.md). `connect_timeout`:
    how long a call waits for a connection of the pool before ConnectionFailed (10 s).

    A Queue knows no tasks: it writes a job of any task name, and of any callback's
    (batch=), which waits until a worker whose App registers that task takes it. An
    App's enqueues (a task's enqueue and defer, App.enqueue_many) refuse a task the App
    does not register, before anything is written.
    """

    def __init__(
        self,
        dsn: str | None = None,
        *,
        schema: str = "pgbaton",
        pool_size: int = 4,
        events: Events | None = None,
        connection_provider: Callable[[], CallerConnection | None] | None = None,
        prepare: bool | None = None,
        connect_timeout: float = database.CONNECT_TIMEOUT_SECONDS,
    ) -> None:
        super().__init__(dsn, schema=schema, pool_size=pool_size, prepare=prepare,
                         connect_timeout=connect_timeout)
        # Asked by enqueue, enqueue_once and enqueue_many when no conn= is given: the
        # connection whose transaction the job joins (a framework's current one), or
        # None for the pool. docs/howto/frameworks.md, "Joining a transaction without conn=".
        self.connection_provider = connection_provider
        # job.enqueued and job.cancelled go to these subscribers (an App's queues share
        # the App's Events); emitted when the statement ran, so with conn= the caller's
        # transaction may still roll the job back.
        self.events = events if events is not None else Events()
        # The worker's and the leader's statements, over this queue's pool: the worker
        # and the maintenance leader call it; the queue's names for them delegate.
        self.engine = Engine(self)

    def __enter__(self) -> Queue:
        return self
