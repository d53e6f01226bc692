"""pgbaton.contrib.django in the example Django project (examples/django_project), on
the real database: Django's own test runner, its migrations, `manage.py pgbaton`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest
from psycopg.rows import DictRow

from pgbaton import _sql
from pgbaton.integrations.migrations import migrate_to

PROJECT = Path(__file__).resolve().parents[2] / "examples" / "django_project"
MIGRATIONS = Path(_sql.__file__).parent / "contrib" / "django" / "migrations"


def manage(dsn: str, *args: str, schema: str | None = None) -> subprocess.CompletedProcess[str]:
    """`python manage.py ARGS` in the example project, on the test server."""
    env = {**os.environ, "SHOP_DATABASE_URL": dsn}
    env.pop("SHOP_SCHEMA", None)
    if schema is not None:
        env["SHOP_SCHEMA"] = schema
    return subprocess.run(
        [sys.executable, "manage.py", *args], cwd=PROJECT, env=env,
        capture_output=True, text=True, timeout=300, check=False,
    )


@pytest.fixture
def project_schema(dsn: str, schema: str, db: psycopg.Connection[DictRow]) -> str:
    """An empty schema for the project's Django tables and pgbaton's, dropped afterwards."""
    db.execute(f'CREATE SCHEMA "{schema}"')  # type: ignore[arg-type]
    return schema


def schema_versions(db: psycopg.Connection[DictRow]) -> list[int]:
    return [row["version"] for row in db.execute("SELECT version FROM schema_version")]


def test_djangos_test_runner_passes_the_shop_tests(server_dsn: str) -> None:
    """`manage.py test shop`: a rolled-back atomic block leaves no job and no wake-up, a
    committed one is run by `manage.py pgbaton worker`, with conn= or without it (the
    app joins transaction.atomic()), a TestCase sees its job; and the jobs' admin
    (shop/test_admin.py) lists, filters, shows, retries and cancels."""
    run = manage(server_dsn, "test", "shop", "--noinput")
    assert run.returncode == 0, run.stdout + run.stderr
    assert "Ran 14 tests" in run.stderr and "\nOK" in run.stderr


def test_migrate_creates_pgbatons_schema(
    dsn: str, project_schema: str, db: psycopg.Connection[DictRow]
) -> None:
    """Django's migrate runs pgbaton's own migrations, one Django migration per version."""
    run = manage(dsn, "migrate", "--noinput", schema=project_schema)
    assert run.returncode == 0, run.stdout + run.stderr
    assert schema_versions(db) == list(range(1, _sql.schema_version() + 1))
    applied = db.execute(
        "SELECT name FROM django_migrations WHERE app = 'pgbaton' ORDER BY id"
    ).fetchall()
    assert [row["name"] for row in applied] == [
        f"{n:04d}_pgbaton_schema_{n}" for n in range(1, _sql.schema_version() + 1)
    ]


def test_migrate_upgrades_a_schema_from_an_older_pgbaton(
    dsn: str, project_schema: str, db: psycopg.Connection[DictRow]
) -> None:
    """A schema left at version 1 (by `pgbaton migrate` of an older pgbaton) is upgraded."""
    with psycopg.connect(dsn) as conn:
        migrate_to(conn, project_schema, 1)
    assert schema_versions(db) == [1]
    run = manage(dsn, "migrate", "--noinput", schema=project_schema)
    assert run.returncode == 0, run.stdout + run.stderr
    assert schema_versions(db) == list(range(1, _sql.schema_version() + 1))


def test_every_schema_version_has_its_django_migration() -> None:
    """A new pgbaton schema version needs a Django migration of its own, named for it."""
    names = sorted(path.stem for path in MIGRATIONS.glob("0*.py"))
    wanted = [f"{n:04d}_pgbaton_schema_{n}" for n in range(1, _sql.schema_version() + 1)]
    assert names == wanted


def test_no_model_change_lacks_a_migration(dsn: str, project_schema: str) -> None:
    """makemigrations finds nothing to write, for pgbaton's app or the shop."""
    run = manage(dsn, "makemigrations", "--check", "--dry-run", schema=project_schema)
    assert run.returncode == 0, run.stdout + run.stderr


def test_manage_py_pgbaton_is_the_command_line_on_djangos_database(
    dsn: str, project_schema: str
) -> None:
    """enqueue, jobs and stats through manage.py use Django's database and PGBATON's schema;
    a bad command is one line and exit 2, as with `pgbaton`."""
    assert manage(dsn, "migrate", "--noinput", schema=project_schema).returncode == 0
    enqueued = manage(dsn, "pgbaton", "enqueue", "send_receipt", "--args", '{"order_id": 7}',
                      "--app", "shop.jobs:app", schema=project_schema)
    assert enqueued.returncode == 0, enqueued.stdout + enqueued.stderr
    listed = manage(dsn, "pgbaton", "jobs", "--json", schema=project_schema)
    assert listed.returncode == 0, listed.stderr
    jobs = json.loads(listed.stdout)
    assert [(job["task"], job["args"]) for job in jobs] == [("send_receipt", {"order_id": 7})]
    stats = manage(dsn, "pgbaton", "stats", "--json", schema=project_schema)
    assert stats.returncode == 0, stats.stderr
    assert "default" in stats.stdout
    wrong = manage(dsn, "pgbaton", "nonsense", schema=project_schema)
    assert wrong.returncode == 2
    assert wrong.stderr.count("\n") == 1 and "nonsense" in wrong.stderr


BAD_SETTINGS = [
    ({"APPS": "shop.jobs:app"}, "settings.PGBATON has unknown keys ['APPS']"),
    ({"APP": "shop.jobs"}, "settings.PGBATON['APP'] must be 'module:attribute'"),
    ({"APP": "shop.nowhere:app"}, "cannot import 'shop.nowhere'"),
    ({"DATABASE": "other"}, "settings.PGBATON['DATABASE'] is 'other'"),
    ({"SCHEMA": "Bad-Name"}, "settings.PGBATON['SCHEMA']: schema name 'Bad-Name'"),
]


@pytest.mark.parametrize(("pgbaton_setting", "message"), BAD_SETTINGS)
def test_bad_settings_are_refused_in_one_line(
    server_dsn: str, pgbaton_setting: dict[str, str], message: str
) -> None:
    """A mistake in settings.PGBATON stops Django's start with a line naming it."""
    script = (
        "import django, sys; from django.conf import settings; "
        "settings.configure(INSTALLED_APPS=['pgbaton.contrib.django'], "
        "DATABASES={'default': {'ENGINE': 'django.db.backends.postgresql', 'NAME': 'x'}}, "
        f"PGBATON={pgbaton_setting!r}); django.setup()"
    )
    run = subprocess.run([sys.executable, "-c", script], cwd=PROJECT, capture_output=True,
                         text=True, timeout=120, check=False)
    assert run.returncode == 1
    assert message in run.stderr.strip().splitlines()[-1], run.stderr


TWO_DATABASES_SCRIPT = """
import sys

import django
import psycopg
from django.conf import settings

params = psycopg.conninfo.conninfo_to_dict(sys.argv[1])
database = {
    "ENGINE": "django.db.backends.postgresql", "NAME": params.get("dbname", ""),
    "USER": params.get("user", ""), "PASSWORD": params.get("password", ""),
    "HOST": params.get("host", ""), "PORT": params.get("port", ""),
}
settings.configure(
    INSTALLED_APPS=["pgbaton.contrib.django"],
    DATABASES={"default": database, "jobs": dict(database)},
    PGBATON={"APP": "tests.integrations.shop_tasks:app", "DATABASE": "jobs",
             "SCHEMA": sys.argv[2]},
)
django.setup()

from django.db import transaction

from tests.integrations.shop_tasks import send_receipt


class Refused(Exception):
    pass


for alias, order_id in (("jobs", 1), ("default", 2)):
    try:
        with transaction.atomic(using=alias):
            send_receipt.defer(order_id=order_id)
            raise Refused
    except Refused:
        pass
send_receipt.app.queue.close()
"""


def test_enqueue_joins_atomic_blocks_of_pgbatons_database_only(
    dsn: str, shop: str, db: psycopg.Connection[DictRow]
) -> None:
    """With PGBATON["DATABASE"] = "jobs", an atomic block on "jobs" takes its job with it
    when rolled back; one on "default" is not the jobs' database: its job goes through
    pgbaton's own pool and stays."""
    run = subprocess.run(
        [sys.executable, "-c", TWO_DATABASES_SCRIPT, dsn, shop], cwd=PROJECT.parents[1],
        env={**os.environ, "PYTHONPATH": os.pathsep.join(
            filter(None, [str(PROJECT.parents[1]), os.environ.get("PYTHONPATH")]))},
        capture_output=True, text=True, timeout=120, check=False,
    )
    assert run.returncode == 0, run.stderr
    rows = db.execute("SELECT args FROM jobs").fetchall()
    assert [row["args"] for row in rows] == [{"order_id": 2}]


PSYCOPG2_SCRIPT = """
import sys

import psycopg

# Django picks psycopg 3 whenever it can be imported, as it always can beside pgbaton;
# hidden while Django loads its backend, Django falls back to psycopg2, as Django 4.1
# and older always do.
hidden = {name: module for name, module in sys.modules.items()
          if name == "psycopg" or name.startswith("psycopg.")}
params = psycopg.conninfo.conninfo_to_dict(sys.argv[1])
sys.modules.update(dict.fromkeys(hidden))

import django
from django.conf import settings

settings.configure(DATABASES={"default": {
    "ENGINE": "django.db.backends.postgresql", "NAME": params.get("dbname", ""),
    "USER": params.get("user", ""), "PASSWORD": params.get("password", ""),
    "HOST": params.get("host", ""), "PORT": params.get("port", ""),
    "OPTIONS": {"options": f"-c search_path={sys.argv[2]}"},
}})
django.setup()
from django.db import connection

connection.ensure_connection()
sys.modules.update(hidden)

import pgbaton
from tests.integrations.shop_tasks import send_receipt

send_receipt.app.configure(dsn=sys.argv[1], schema=sys.argv[2])
try:
    send_receipt.using(conn=connection).defer(order_id=1)
except pgbaton.InvalidArgument as error:
    print(type(connection.connection).__module__)
    print(error)
"""


def test_a_django_connection_on_psycopg2_is_refused_with_what_to_do(
    dsn: str, shop: str, db: psycopg.Connection[DictRow]
) -> None:
    """Django on psycopg2 is refused in one line saying to install psycopg 3."""
    run = subprocess.run(
        [sys.executable, "-c", PSYCOPG2_SCRIPT, dsn, shop], cwd=PROJECT.parents[1],
        env={**os.environ, "PYTHONPATH": os.pathsep.join(
            filter(None, [str(PROJECT.parents[1]), os.environ.get("PYTHONPATH")]))},
        capture_output=True, text=True, timeout=120, check=False,
    )
    assert run.returncode == 0, run.stderr
    driver, message = run.stdout.splitlines()
    assert driver == "psycopg2.extensions"
    assert message == (
        "conn is Django's database 'default', whose driver is psycopg2, not psycopg 3: "
        "pgbaton writes through psycopg 3 only (SQLAlchemy: a postgresql+psycopg:// URL; "
        "Django 4.2+: psycopg installed, which Django prefers to psycopg2)"
    )
    assert db.execute("SELECT count(*) AS n FROM jobs").fetchone() == {"n": 0}
