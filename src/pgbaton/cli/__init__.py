"""The `pgbaton` command line (the console script `pgbaton`, and `python -m pgbaton`):
main.py holds the group and its commands, bulk.py the bulk forms of retry and cancel,
queues.py `pgbaton queue`."""

from .main import main

__all__ = ["main"]
