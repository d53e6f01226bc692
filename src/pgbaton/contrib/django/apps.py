"""The Django app: points the App named in settings.PGBATON at Django's database, and
makes its enqueues inside transaction.atomic() join Django's transaction."""

from __future__ import annotations

import importlib
from typing import Any

from django.apps import AppConfig
from django.core.exceptions import ImproperlyConfigured
from django.db.backends.signals import connection_created

from ...app import App
from .settings import database_dsn, pgbaton_settings
from .transactions import atomic_connection


class PgbatonConfig(AppConfig):  # type: ignore[misc]
    name = "pgbaton.contrib.django"
    label = "pgbaton"
    verbose_name = "pgbaton"

    def ready(self) -> None:
        settings = pgbaton_settings()
        if settings.app is not None:
            app = load_app(settings.app)
            configure_app(app)
            app.provide_connection(atomic_connection(settings.database))
            connection_created.connect(
                _follower(app), weak=False, dispatch_uid="pgbaton.follow_database"
            )


def load_app(spec: str) -> App:
    module_name, _, attribute = spec.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise ImproperlyConfigured(
            f"settings.PGBATON['APP']: cannot import {module_name!r}: {error}"
        ) from None
    app = getattr(module, attribute, None)
    if not isinstance(app, App):
        raise ImproperlyConfigured(
            f"settings.PGBATON['APP']: {spec!r} is not a pgbaton.App "
            f"(found {type(app).__name__})"
        )
    return app


def configure_app(app: App) -> None:
    """Jobs enqueued without conn=, and the worker, use Django's database and schema."""
    settings = pgbaton_settings()
    app.configure(dsn=database_dsn(settings.database), schema=settings.schema)


def _follower(app: App) -> Any:
    """Keep the App on the database Django connects to: Django's test runner renames it
    to the test database after ready(), and jobs enqueued without conn= must go there."""

    def follow(sender: Any, connection: Any, **kwargs: Any) -> None:
        settings = pgbaton_settings()
        if connection.alias != settings.database:
            return
        dsn = database_dsn(settings.database)
        if app.dsn_in_code != dsn:
            app.configure(dsn=dsn, schema=settings.schema)

    return follow
