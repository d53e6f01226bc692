"""pgbaton's schema at version 24 (sql/migrations/0024_flow_claim_marks.sql)."""

from django.db import migrations

from pgbaton.contrib.django.schema import migrate_schema


class Migration(migrations.Migration):  # type: ignore[misc]
    dependencies = [("pgbaton", "0023_pgbaton_schema_23")]
    operations = [migrate_schema(24)]
