"""Job: pgbaton's jobs table as an unmanaged Django model, for reading only.

Django never creates, alters or writes this table: pgbaton's migrations own it, and
every change of a job's state goes through pgbaton's fenced statements (admin.py's
actions call Queue.retry and Queue.cancel). Columns that later schema versions add are
simply not read here.
"""

from __future__ import annotations

from django.db import models

from ..settings import pgbaton_settings

STATUSES = ("pending", "running", "done", "failed", "cancelled")


def _table() -> str:
    # Django quotes db_table as one identifier; the inner quotes make it "schema"."jobs".
    # The schema name is checked (check_schema_name) by pgbaton_settings().
    return f'{pgbaton_settings().schema}"."jobs'


class Job(models.Model):  # type: ignore[misc]
    id = models.BigIntegerField(primary_key=True)
    queue = models.TextField()
    task = models.TextField()
    args = models.JSONField()
    status = models.TextField(choices=[(status, status) for status in STATUSES])
    priority = models.IntegerField()
    run_at = models.DateTimeField()
    attempts = models.IntegerField()
    max_attempts = models.IntegerField()
    key = models.TextField(null=True)
    idempotency_key = models.TextField(null=True)
    claim_token = models.UUIDField(null=True)
    lease_until = models.DateTimeField(null=True)
    worker_id = models.TextField(null=True)
    errors = models.JSONField()
    result = models.JSONField(null=True)
    created_at = models.DateTimeField()
    started_at = models.DateTimeField(null=True)
    finished_at = models.DateTimeField(null=True)

    class Meta:
        managed = False
        db_table = _table()
        ordering = ("-id",)
        verbose_name = "job"

    def __str__(self) -> str:
        return f"job {self.id} ({self.task}, {self.status})"
