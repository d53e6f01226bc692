"""`manage.py pgbaton ...`: the `pgbaton` command line on the project's database.

Every command and option is the CLI's own (`manage.py pgbaton --help`); the DSN and
schema come from settings (PGBATON["DATABASE"], PGBATON["SCHEMA"]) unless --dsn or
--schema are given, and `worker` runs PGBATON["APP"] when no MODULE:APP is given.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from ..... import cli
from ...settings import database_dsn, pgbaton_settings


class Command(BaseCommand):  # type: ignore[misc]
    help = "pgbaton's command line on this project's database (manage.py pgbaton --help)."

    def run_from_argv(self, argv: list[str]) -> None:
        # The CLI parses its own arguments and exits with its own status.
        run_cli(argv[2:], prog_name=f"{os.path.basename(argv[0])} {argv[1]}")

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("args", nargs=argparse.REMAINDER)

    def handle(self, *args: str, **options: Any) -> None:
        """call_command("pgbaton", "stats", "--json"): a failure is a CommandError."""
        try:
            run_cli(list(args), prog_name="manage.py pgbaton")
        except SystemExit as stop:
            if stop.code not in (0, None):
                raise CommandError(f"pgbaton {' '.join(args)} exited with {stop.code}") from None


def run_cli(args: list[str], *, prog_name: str) -> None:
    settings = pgbaton_settings()
    os.environ["PGBATON_DSN"] = database_dsn(settings.database)
    os.environ["PGBATON_SCHEMA"] = settings.schema
    if args[:1] == ["worker"] and (len(args) == 1 or args[1].startswith("-")):
        if settings.app is None:
            raise CommandError(
                "manage.py pgbaton worker needs MODULE:APP, or settings.PGBATON['APP']"
            )
        args = ["worker", settings.app, *args[1:]]
    cli.main.main(args=args, prog_name=prog_name)
