"""pgbaton's schema at version 28 (sql/migrations/0028_one_status_trigger.sql)."""

from django.db import migrations

from pgbaton.contrib.django.schema import migrate_schema


class Migration(migrations.Migration):  # type: ignore[misc]
    dependencies = [("pgbaton", "0027_pgbaton_schema_27")]
    operations = [migrate_schema(28)]
