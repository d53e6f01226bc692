"""The `pgbaton` command line (the console script `pgbaton`, and `python -m pgbaton`):
main.py holds the group and registers the commands, each in the module of its concern
(main.py's docstring lists them); bulk.py the bulk forms of retry and cancel."""

from .main import main

__all__ = ["main"]
