"""pgbaton's schema at version 27 (sql/migrations/0027_cancel_delivered.sql)."""

from django.db import migrations

from pgbaton.contrib.django.schema import migrate_schema


class Migration(migrations.Migration):  # type: ignore[misc]
    dependencies = [("pgbaton", "0026_pgbaton_schema_26")]
    operations = [migrate_schema(27)]
