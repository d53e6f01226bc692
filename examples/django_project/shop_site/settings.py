"""The example shop's settings: one PostgreSQL database, pgbaton's app beside the shop.

SHOP_DATABASE_URL is a libpq DSN (postgresql://user@host:port/dbname); SHOP_SCHEMA,
when set, puts Django's tables and pgbaton's jobs in that schema (the tests give each
run a fresh one), else Django's go to public and pgbaton's to the schema `pgbaton`.
"""

import os

import psycopg

_dsn = psycopg.conninfo.conninfo_to_dict(
    os.environ.get("SHOP_DATABASE_URL", "postgresql:///shop")
)
_schema = os.environ.get("SHOP_SCHEMA")

SECRET_KEY = "example-only"
DEBUG = False
ALLOWED_HOSTS = ["*"]
USE_TZ = True
ROOT_URLCONF = "shop_site.urls"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "pgbaton.contrib.django",
    "pgbaton.contrib.django.jobs",  # the jobs in the admin, read-only, retry and cancel
    "shop",
]

MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]

DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": _dsn.get("dbname") or "shop",
        "USER": _dsn.get("user") or "",
        "PASSWORD": _dsn.get("password") or "",
        "HOST": _dsn.get("host") or "",
        "PORT": _dsn.get("port") or "",
        "OPTIONS": {"options": f"-c search_path={_schema}"} if _schema else {},
        # A name of its own per run, so that runs side by side do not collide.
        "TEST": {"NAME": f"test_shop_{os.getpid()}"},
    }
}

PGBATON = {
    "APP": "shop.jobs:app",
    "DATABASE": "default",
    "SCHEMA": _schema or "pgbaton",
}
