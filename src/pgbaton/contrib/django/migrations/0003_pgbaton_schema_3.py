"""pgbaton's schema at version 3 (sql/migrations/0003_task_idempotency_and_cancel_holds.sql)."""

from django.db import migrations

from pgbaton.contrib.django.schema import migrate_schema


class Migration(migrations.Migration):  # type: ignore[misc]
    dependencies = [("pgbaton", "0002_pgbaton_schema_2")]
    operations = [migrate_schema(3)]
