"""pgbaton's schema at version 2 (sql/migrations/0002_lean_enqueue.sql)."""

from django.db import migrations

from pgbaton.contrib.django.schema import migrate_schema


class Migration(migrations.Migration):  # type: ignore[misc]
    dependencies = [("pgbaton", "0001_pgbaton_schema_1")]
    operations = [migrate_schema(2)]
