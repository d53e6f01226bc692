"""pgbaton's schema at version 25 (sql/migrations/0025_event_by_key_index.sql)."""

from django.db import migrations

from pgbaton.contrib.django.schema import migrate_schema


class Migration(migrations.Migration):  # type: ignore[misc]
    dependencies = [("pgbaton", "0024_pgbaton_schema_24")]
    operations = [migrate_schema(25)]
