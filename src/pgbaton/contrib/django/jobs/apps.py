"""The app that holds the Job model and its admin."""

from __future__ import annotations

from django.apps import AppConfig


class PgbatonJobsConfig(AppConfig):  # type: ignore[misc]
    name = "pgbaton.contrib.django.jobs"
    label = "pgbaton_jobs"
    verbose_name = "pgbaton jobs"
    default_auto_field = "django.db.models.BigAutoField"
