"""pgbaton's schema at version 15 (sql/migrations/0015_progress_and_job_logs.sql)."""

from django.db import migrations

from pgbaton.contrib.django.schema import migrate_schema


class Migration(migrations.Migration):  # type: ignore[misc]
    dependencies = [("pgbaton", "0014_pgbaton_schema_14")]
    operations = [migrate_schema(15)]
