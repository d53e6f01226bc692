"""pgbaton's schema at version 22 (sql/migrations/0022_no_before_row_triggers.sql)."""

from django.db import migrations

from pgbaton.contrib.django.schema import migrate_schema


class Migration(migrations.Migration):  # type: ignore[misc]
    dependencies = [("pgbaton", "0021_pgbaton_schema_21")]
    operations = [migrate_schema(22)]
