"""pgbaton's schema at version 20 (sql/migrations/0020_waiting_event_honest.sql)."""

from django.db import migrations

from pgbaton.contrib.django.schema import migrate_schema


class Migration(migrations.Migration):  # type: ignore[misc]
    dependencies = [("pgbaton", "0019_pgbaton_schema_19")]
    operations = [migrate_schema(20)]
