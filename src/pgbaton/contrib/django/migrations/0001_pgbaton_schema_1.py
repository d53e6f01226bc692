"""pgbaton's schema at version 1: jobs, their indexes and the wake-up trigger."""

from django.db import migrations

from pgbaton.contrib.django.schema import migrate_schema


class Migration(migrations.Migration):  # type: ignore[misc]
    initial = True
    dependencies: list[tuple[str, str]] = []
    operations = [migrate_schema(1)]
