"""The jobs in Django's admin: a list filtered by status, queue and task, one job's
page, and retry and cancel, which run pgbaton's own fenced statements (Queue.retry,
Queue.cancel), never an ORM update of a job's state."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar, cast

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.html import format_html

from ....dsn import with_application_name
from ....queue import Queue
from ..settings import database_dsn, pgbaton_settings
from .models import Job

# Who may retry and cancel: the model's change permission, though no job can be
# changed through a form here.
OPERATE_PERMISSION = "pgbaton_jobs.change_job"


@contextmanager
def operator_queue() -> Iterator[Queue]:
    """A Queue on PGBATON's database and schema for one request's actions, closed after
    it, so that no pool outlives the request (nor holds a test database open)."""
    settings = pgbaton_settings()
    dsn = with_application_name(database_dsn(settings.database), "pgbaton admin")
    with Queue(dsn, schema=settings.schema) as queue:
        yield queue


Method = TypeVar("Method", bound=Callable[..., Any])


def _display(description: str) -> Callable[[Method], Method]:
    """admin.display, typed (Django ships no annotations)."""
    return cast(Callable[[Method], Method], admin.display(description=description))


def _operator_action(description: str) -> Callable[[Method], Method]:
    """admin.action for the users who may retry and cancel, typed."""
    return cast(Callable[[Method], Method],
                admin.action(description=description, permissions=["operate"]))


def _pretty_json(value: Any) -> str:
    # format_html escapes it: a job's args and errors are data, never markup.
    return str(format_html("<pre>{}</pre>", json.dumps(value, indent=2, ensure_ascii=False)))


def _apply(
    modeladmin: JobAdmin, request: HttpRequest, queryset: QuerySet[Job], *, verb: str,
    operation: Callable[[Queue, int], bool], applies_to: str,
) -> None:
    ids = list(queryset.values_list("id", flat=True))
    with operator_queue() as queue:
        changed = [job_id for job_id in ids if operation(queue, job_id)]
    modeladmin.message_user(request, f"{verb} {len(changed)} of {len(ids)} job(s).")
    skipped = len(ids) - len(changed)
    if skipped:
        modeladmin.message_user(
            request, f"{skipped} job(s) left as they were: only {applies_to} jobs can be "
            f"{verb.lower()}.", level=messages.WARNING,
        )


@admin.register(Job)
class JobAdmin(admin.ModelAdmin):  # type: ignore[misc]
    list_display = ("id", "task", "queue", "status", "attempts_of", "priority", "run_at",
                    "created_at", "finished_at")
    list_filter = ("status", "queue", "task")
    search_fields = ("task", "queue", "key", "idempotency_key")
    # No second count(*), of the whole table, beside the filtered one on every page.
    show_full_result_count = False
    list_per_page = 50
    actions = ("retry_jobs", "cancel_jobs")
    fieldsets = (
        (None, {"fields": ("id", "task", "queue", "status", "attempts_of", "priority",
                           "key", "idempotency_key")}),
        ("Times", {"fields": ("created_at", "run_at", "started_at", "finished_at")}),
        ("Claim", {"fields": ("worker_id", "claim_token", "lease_until")}),
        ("Data", {"fields": ("args_shown", "result_shown", "errors_shown")}),
    )
    readonly_fields = ("attempts_of", "args_shown", "result_shown", "errors_shown")

    @_display("attempts")
    def attempts_of(self, job: Job) -> str:
        return f"{job.attempts}/{job.max_attempts}"

    @_display("args")
    def args_shown(self, job: Job) -> str:
        return _pretty_json(job.args)

    @_display("result")
    def result_shown(self, job: Job) -> str:
        return _pretty_json(job.result)

    @_display("errors, one per attempt")
    def errors_shown(self, job: Job) -> str:
        return _pretty_json(job.errors)

    # Read-only: jobs are born from enqueue and change only through pgbaton's statements.
    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Job | None = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Job | None = None) -> bool:
        return False

    def has_operate_permission(self, request: HttpRequest) -> bool:
        return bool(request.user.has_perm(OPERATE_PERMISSION))

    @_operator_action("Retry the selected failed or cancelled jobs")
    def retry_jobs(self, request: HttpRequest, queryset: QuerySet[Job]) -> None:
        _apply(self, request, queryset, verb="Retried", operation=Queue.retry,
               applies_to="failed or cancelled")

    @_operator_action("Cancel the selected pending or running jobs")
    def cancel_jobs(self, request: HttpRequest, queryset: QuerySet[Job]) -> None:
        _apply(self, request, queryset, verb="Cancelled", operation=Queue.cancel,
               applies_to="pending or running")
