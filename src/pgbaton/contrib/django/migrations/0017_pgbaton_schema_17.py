"""pgbaton's schema at version 17 (sql/migrations/0017_workers.sql)."""

from django.db import migrations

from pgbaton.contrib.django.schema import migrate_schema


class Migration(migrations.Migration):  # type: ignore[misc]
    dependencies = [("pgbaton", "0016_pgbaton_schema_16")]
    operations = [migrate_schema(17)]
