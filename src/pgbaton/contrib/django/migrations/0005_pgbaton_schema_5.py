"""pgbaton's schema at version 5 (sql/migrations/0005_dependencies_and_batches.sql)."""

from django.db import migrations

from pgbaton.contrib.django.schema import migrate_schema


class Migration(migrations.Migration):  # type: ignore[misc]
    dependencies = [("pgbaton", "0004_pgbaton_schema_4")]
    operations = [migrate_schema(5)]
