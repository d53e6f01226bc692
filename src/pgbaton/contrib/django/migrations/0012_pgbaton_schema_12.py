"""pgbaton's schema at version 12 (sql/migrations/0012_sql_api.sql)."""

from django.db import migrations

from pgbaton.contrib.django.schema import migrate_schema


class Migration(migrations.Migration):  # type: ignore[misc]
    dependencies = [("pgbaton", "0011_pgbaton_schema_11")]
    operations = [migrate_schema(12)]
