"""pgbaton's schema at version 16 (sql/migrations/0016_schedules.sql)."""

from django.db import migrations

from pgbaton.contrib.django.schema import migrate_schema


class Migration(migrations.Migration):  # type: ignore[misc]
    dependencies = [("pgbaton", "0015_pgbaton_schema_15")]
    operations = [migrate_schema(16)]
