"""pgbaton: a background-job queue that lives in PostgreSQL."""

from ._base import Claim, Job, QueueStats
from ._sql import schema_sql, schema_version
from .errors import (
    ConfigurationError,
    ConnectionFailed,
    InvalidArgument,
    NotSerializable,
    PgbatonError,
    SchemaError,
    SchemaNotMigrated,
    SchemaOutOfDate,
    SchemaTooNew,
    ServerTooOld,
)
from .queue import Queue
from .queue_async import AsyncQueue

__all__ = [
    "AsyncQueue",
    "Claim",
    "ConfigurationError",
    "ConnectionFailed",
    "InvalidArgument",
    "Job",
    "NotSerializable",
    "PgbatonError",
    "Queue",
    "QueueStats",
    "SchemaError",
    "SchemaNotMigrated",
    "SchemaOutOfDate",
    "SchemaTooNew",
    "ServerTooOld",
    "schema_sql",
    "schema_version",
]

for _name in __all__:
    _obj = globals()[_name]
    if hasattr(_obj, "__module__") and isinstance(_obj, type):
        _obj.__module__ = __name__
del _name, _obj
