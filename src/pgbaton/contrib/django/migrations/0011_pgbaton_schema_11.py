"""pgbaton's schema at version 11 (sql/migrations/0011_history_statements.sql)."""

from django.db import migrations

from pgbaton.contrib.django.schema import migrate_schema


class Migration(migrations.Migration):  # type: ignore[misc]
    dependencies = [("pgbaton", "0010_pgbaton_schema_10")]
    operations = [migrate_schema(11)]
