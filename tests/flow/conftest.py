"""The flow tests run real `pgbaton worker` processes on the runtime tests' app."""

from tests.runtime.conftest import app_schema, start_worker

__all__ = ["app_schema", "start_worker"]
