"""pgbaton's schema at version 26 (sql/migrations/0026_args_checked_once.sql)."""

from django.db import migrations

from pgbaton.contrib.django.schema import migrate_schema


class Migration(migrations.Migration):  # type: ignore[misc]
    dependencies = [("pgbaton", "0025_pgbaton_schema_25")]
    operations = [migrate_schema(26)]
