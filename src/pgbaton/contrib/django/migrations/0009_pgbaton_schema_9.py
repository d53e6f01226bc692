"""pgbaton's schema at version 9 (sql/migrations/0009_claim_ahead_starts.sql)."""

from django.db import migrations

from pgbaton.contrib.django.schema import migrate_schema


class Migration(migrations.Migration):  # type: ignore[misc]
    dependencies = [("pgbaton", "0008_pgbaton_schema_8")]
    operations = [migrate_schema(9)]
