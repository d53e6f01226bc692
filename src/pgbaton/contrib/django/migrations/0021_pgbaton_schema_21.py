"""pgbaton's schema at version 21 (sql/migrations/0021_placeholder_for_holds.sql)."""

from django.db import migrations

from pgbaton.contrib.django.schema import migrate_schema


class Migration(migrations.Migration):  # type: ignore[misc]
    dependencies = [("pgbaton", "0020_pgbaton_schema_20")]
    operations = [migrate_schema(21)]
