"""pgbaton: a background-job queue that lives in PostgreSQL."""

from ._sql import schema_sql, schema_version
from .app import App, ContextTask, Deferral, EnqueueOptions, Periodic, Task, TypedTask
from .context import JobContext
from .dependencies import Batch, BatchInfo, Callback, Dependency
from .errors import (
    ArgsRejected,
    ConfigurationError,
    ConnectionFailed,
    IdempotencyKeyTaken,
    InvalidArgument,
    JobCancelled,
    JobEnded,
    JobFailed,
    JobNotFound,
    JobTimeout,
    NotSerializable,
    PgbatonError,
    ScheduleChanged,
    SchemaError,
    SchemaNotMigrated,
    SchemaOutOfDate,
    SchemaTooNew,
    ServerTooOld,
    StepMismatch,
    StepNotStored,
    UniqueJobUnseen,
    UnknownTask,
)
from .events import Event
from .flow import ClaimBatch, QueueSettings, Rate
from .job_filter import JobFilter
from .models import Backoff, Claim, Enqueued, HistoryPartition, Job, JobLog, QueueStats, Step
from .outcomes import Cancel, Discard, HandlerOutcome, Snooze, SnoozeLimit
from .queue import Queue
from .queue_async import AsyncQueue
from .schedules import Schedule
from .unique import Unique
from .worker import Worker, WorkerConfig

__all__ = [
    "App",
    "ArgsRejected",
    "AsyncQueue",
    "Backoff",
    "Batch",
    "BatchInfo",
    "Callback",
    "Cancel",
    "Claim",
    "ClaimBatch",
    "ConfigurationError",
    "ConnectionFailed",
    "ContextTask",
    "Deferral",
    "Dependency",
    "Discard",
    "EnqueueOptions",
    "Enqueued",
    "Event",
    "HandlerOutcome",
    "HistoryPartition",
    "IdempotencyKeyTaken",
    "InvalidArgument",
    "Job",
    "JobCancelled",
    "JobContext",
    "JobEnded",
    "JobFailed",
    "JobFilter",
    "JobLog",
    "JobNotFound",
    "JobTimeout",
    "NotSerializable",
    "Periodic",
    "PgbatonError",
    "Queue",
    "QueueSettings",
    "QueueStats",
    "Rate",
    "Schedule",
    "ScheduleChanged",
    "SchemaError",
    "SchemaNotMigrated",
    "SchemaOutOfDate",
    "SchemaTooNew",
    "ServerTooOld",
    "Snooze",
    "SnoozeLimit",
    "Step",
    "StepMismatch",
    "StepNotStored",
    "Task",
    "TypedTask",
    "Unique",
    "UniqueJobUnseen",
    "UnknownTask",
    "Worker",
    "WorkerConfig",
    "schema_sql",
    "schema_version",
]

for _name in __all__:
    _obj = globals()[_name]
    if hasattr(_obj, "__module__") and isinstance(_obj, type):
        _obj.__module__ = __name__
del _name, _obj
