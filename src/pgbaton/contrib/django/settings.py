"""settings.PGBATON read and checked once, and the DSN of the Django database it names."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import psycopg
from django.conf import settings as django_settings
from django.core.exceptions import ImproperlyConfigured
from django.db import DEFAULT_DB_ALIAS

from ... import _sql

KNOWN_KEYS = frozenset({"APP", "DATABASE", "SCHEMA"})

# Django's names for the libpq connection keywords; OPTIONS may hold libpq's own too.
_DJANGO_TO_LIBPQ = {"NAME": "dbname", "USER": "user", "PASSWORD": "password",
                    "HOST": "host", "PORT": "port"}


@dataclass(frozen=True)
class Settings:
    app: str | None
    database: str
    schema: str


def pgbaton_settings() -> Settings:
    """settings.PGBATON with its defaults, or ImproperlyConfigured naming the problem."""
    given: Any = getattr(django_settings, "PGBATON", {})
    if not isinstance(given, dict):
        raise ImproperlyConfigured(f"settings.PGBATON must be a dict, got {type(given).__name__}")
    unknown = sorted(set(given) - KNOWN_KEYS)
    if unknown:
        raise ImproperlyConfigured(
            f"settings.PGBATON has unknown keys {unknown}: it takes {sorted(KNOWN_KEYS)}"
        )
    app = given.get("APP")
    if app is not None and (not isinstance(app, str) or ":" not in app):
        raise ImproperlyConfigured(
            f"settings.PGBATON['APP'] must be 'module:attribute' naming a pgbaton.App, "
            f"got {app!r}"
        )
    database = given.get("DATABASE", DEFAULT_DB_ALIAS)
    if database not in django_settings.DATABASES:
        raise ImproperlyConfigured(
            f"settings.PGBATON['DATABASE'] is {database!r}, which is not in settings.DATABASES"
        )
    try:
        schema = _sql.check_schema_name(given.get("SCHEMA", "pgbaton"))
    except Exception as error:
        raise ImproperlyConfigured(f"settings.PGBATON['SCHEMA']: {error}") from None
    return Settings(app=app, database=database, schema=schema)


def database_dsn(alias: str) -> str:
    """A libpq DSN for the Django database `alias` (its current NAME: under Django's test
    runner, the test database), for pgbaton's own connections and worker."""
    from django.db import connections

    settings_dict = connections[alias].settings_dict
    if settings_dict["ENGINE"] != "django.db.backends.postgresql":
        raise ImproperlyConfigured(
            f"Django's database {alias!r} uses {settings_dict['ENGINE']}: pgbaton needs "
            "django.db.backends.postgresql"
        )
    libpq_keywords = {option.keyword.decode() for option in psycopg.pq.Conninfo.get_defaults()}
    params = {
        libpq: str(settings_dict[django])
        for django, libpq in _DJANGO_TO_LIBPQ.items()
        if settings_dict.get(django)
    }
    for key, value in (settings_dict.get("OPTIONS") or {}).items():
        if key in libpq_keywords:
            params[key] = str(value)
    return psycopg.conninfo.make_conninfo("", **params)
