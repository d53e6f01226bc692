"""pgbaton as a Django app: add "pgbaton.contrib.django" to INSTALLED_APPS.

    PGBATON = {
        "APP": "shop.jobs:app",   # the pgbaton.App whose tasks this project enqueues and runs
        "DATABASE": "default",    # the Django database the jobs live in
        "SCHEMA": "pgbaton",      # pgbaton's schema in it
    }

`manage.py migrate` creates and upgrades pgbaton's schema; `manage.py pgbaton ...` is
the `pgbaton` command line on that database; enqueue() and deferral() write in the
transaction of Django's connection, so a rolled-back `transaction.atomic()` block takes
its jobs with it. docs/howto/frameworks.md has the whole story.
"""

from __future__ import annotations

from .enqueue import deferral, enqueue
from .settings import Settings, pgbaton_settings

__all__ = ["Settings", "deferral", "enqueue", "pgbaton_settings"]
