"""pgbaton's schema at version 6 (sql/migrations/0006_trace_context.sql)."""

from django.db import migrations

from pgbaton.contrib.django.schema import migrate_schema


class Migration(migrations.Migration):  # type: ignore[misc]
    dependencies = [("pgbaton", "0005_pgbaton_schema_5")]
    operations = [migrate_schema(6)]
