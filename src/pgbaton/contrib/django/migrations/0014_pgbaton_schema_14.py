"""pgbaton's schema at version 14 (sql/migrations/0014_snoozes.sql)."""

from django.db import migrations

from pgbaton.contrib.django.schema import migrate_schema


class Migration(migrations.Migration):  # type: ignore[misc]
    dependencies = [("pgbaton", "0013_pgbaton_schema_13")]
    operations = [migrate_schema(14)]
