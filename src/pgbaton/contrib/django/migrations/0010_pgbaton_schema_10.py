"""pgbaton's schema at version 10 (sql/migrations/0010_claims_and_cascade.sql)."""

from django.db import migrations

from pgbaton.contrib.django.schema import migrate_schema


class Migration(migrations.Migration):  # type: ignore[misc]
    dependencies = [("pgbaton", "0009_pgbaton_schema_9")]
    operations = [migrate_schema(10)]
