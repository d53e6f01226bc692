"""pgbaton's schema at version 13 (sql/migrations/0013_sql_api.sql)."""

from django.db import migrations

from pgbaton.contrib.django.schema import migrate_schema


class Migration(migrations.Migration):  # type: ignore[misc]
    dependencies = [("pgbaton", "0012_pgbaton_schema_12")]
    operations = [migrate_schema(13)]
