"""pgbaton's schema at version 19 (sql/migrations/0019_job_log_runs.sql)."""

from django.db import migrations

from pgbaton.contrib.django.schema import migrate_schema


class Migration(migrations.Migration):  # type: ignore[misc]
    dependencies = [("pgbaton", "0018_pgbaton_schema_18")]
    operations = [migrate_schema(19)]
