"""What every part of the queue stands on (async source): the pool and its named
statements (the database handle of _database_async.py), and what the queue's __init__
(queue_async.py) gives each queue besides.
"""

from __future__ import annotations

from collections.abc import Callable

from .. import _database_async as database
from ..engine_async import AsyncEngine
from ..events import Events
from ..integrations.connections import AsyncCallerConnection


class AsyncQueueCore(database.AsyncDatabase):
    """The base of each part of the queue: a database handle, and the attributes that
    the queue's __init__ sets (and says what they are for), typed once for every part."""

    connection_provider: Callable[[], AsyncCallerConnection | None] | None
    events: Events
    engine: AsyncEngine
