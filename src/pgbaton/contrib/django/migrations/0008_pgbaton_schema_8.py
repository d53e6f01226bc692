"""pgbaton's schema at version 8 (sql/migrations/0008_jobs_history.sql)."""

from django.db import migrations

from pgbaton.contrib.django.schema import migrate_schema


class Migration(migrations.Migration):  # type: ignore[misc]
    dependencies = [("pgbaton", "0007_pgbaton_schema_7")]
    operations = [migrate_schema(8)]
