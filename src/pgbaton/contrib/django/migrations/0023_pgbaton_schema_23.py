"""pgbaton's schema at version 23 (sql/migrations/0023_one_held_index.sql)."""

from django.db import migrations

from pgbaton.contrib.django.schema import migrate_schema


class Migration(migrations.Migration):  # type: ignore[misc]
    dependencies = [("pgbaton", "0022_pgbaton_schema_22")]
    operations = [migrate_schema(23)]
