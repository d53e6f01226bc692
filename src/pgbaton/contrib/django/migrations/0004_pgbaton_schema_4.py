"""pgbaton's schema at version 4 (sql/migrations/0004_flow_control.sql)."""

from django.db import migrations

from pgbaton.contrib.django.schema import migrate_schema


class Migration(migrations.Migration):  # type: ignore[misc]
    dependencies = [("pgbaton", "0003_pgbaton_schema_3")]
    operations = [migrate_schema(4)]
