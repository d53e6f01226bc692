"""pgbaton's schema at version 18 (sql/migrations/0018_durable_steps.sql)."""

from django.db import migrations

from pgbaton.contrib.django.schema import migrate_schema


class Migration(migrations.Migration):  # type: ignore[misc]
    dependencies = [("pgbaton", "0017_pgbaton_schema_17")]
    operations = [migrate_schema(18)]
