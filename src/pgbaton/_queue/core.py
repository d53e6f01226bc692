# WARNING: generated from core_async.py by tools/async_to_sync.py: DO NOT EDIT.
# Change core_async.py and run `make generate`.
"""What every part of the queue stands on (generated sync twin): the pool and its named
statements (the database handle of _database_async.py), and what the queue's __init__
(queue_async.py) gives each queue besides.
"""

from __future__ import annotations

from collections.abc import Callable

from .. import _database as database
from ..engine import Engine
from ..events import Events
from ..integrations.connections import CallerConnection


class QueueCore(database.Database):
    """The base of each part of the queue: a database handle, and the attributes that
    the queue's __init__ sets (and says what they are for), typed once for every part."""

    connection_provider: Callable[[], CallerConnection | None] | None
    events: Events
    engine: Engine
