"""`python -m pgbaton` is the `pgbaton` command."""

from .cli import main

main()
