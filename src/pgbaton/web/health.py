"""The server's health: the doctor's findings (/health), a liveness probe (/healthz)
and the Prometheus metrics (/metrics)."""

from __future__ import annotations

from typing import Any

import psycopg
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response

from .. import _database
from ..doctor.checks import run_checks
from ..doctor.findings import Thresholds, overall
from ..doctor.inspection import Inspection
from .board import Board


class HealthPages(Board):
    """GET /health, /healthz and /metrics."""

    async def health(self, request: Request) -> Response:
        findings = await run_in_threadpool(_doctor, self.dsn, self.schema)
        return self.page(request, "health.html",
                          {"findings": findings, "status": overall(findings)})

    async def healthz(self, request: Request) -> Response:
        try:
            await self.store.ping()
        except (psycopg.Error, OSError) as error:
            return PlainTextResponse(f"database unreachable: {error}\n", status_code=503)
        return PlainTextResponse("ok\n")

    async def metrics(self, request: Request) -> Response:
        body = await run_in_threadpool(generate_latest, self.registry)
        return Response(body, media_type=CONTENT_TYPE_LATEST)


def _doctor(dsn: str, schema: str) -> list[Any]:
    with _database.connect(dsn, autocommit=True,
                           application_name="pgbaton dashboard health") as conn:
        return run_checks(Inspection(conn, schema, Thresholds()))
