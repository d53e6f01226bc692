"""Running workers: one asyncio loop per process, signals, and several processes."""

from __future__ import annotations

from typing import Any

from ..app import App, register_worker_runner
from .config import WorkerConfig
from .run import run_worker
from .runner import Worker

__all__ = ["Worker", "WorkerConfig", "run_worker"]



def _run_for_app(
    app: App, config: WorkerConfig | None, app_spec: str | None, options: dict[str, Any]
) -> int:
    return run_worker(app, config or WorkerConfig(**options), app_spec=app_spec)


register_worker_runner(_run_for_app)
