"""pgbaton's schema at version 7 (sql/migrations/0007_flow_claim_finished.sql)."""

from django.db import migrations

from pgbaton.contrib.django.schema import migrate_schema


class Migration(migrations.Migration):  # type: ignore[misc]
    dependencies = [("pgbaton", "0006_pgbaton_schema_6")]
    operations = [migrate_schema(7)]
