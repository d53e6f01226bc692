"""MODULE:APP on the command line, for the commands that take an App (migrate --app,
worker, enqueue --app): the App it names, and the schema a command uses with it."""

from __future__ import annotations

import click

from .. import app as app_module
from .._cli_common import given_on_command_line
from ..app import App
from ..dsn import resolve_schema
from ..errors import ConfigurationError


def load_app(spec: str) -> App:
    """MODULE:ATTRIBUTE to the App it names; a usage error says what was wrong."""
    try:
        return app_module.load_app(spec)
    except ConfigurationError as error:
        raise click.BadParameter(str(error)) from None


def _app_schema(app: App, schema: str) -> str:
    """--schema if typed, else the App's own, else what the environment said."""
    if given_on_command_line("schema"):
        return schema
    return resolve_schema(None, app_schema=app.schema_in_code)
