"""A Worker in this process on a DSN that sets another client encoding
(options=-c client_encoding=LATIN1, or SQL_ASCII) runs a job whose task name and args go
beyond ASCII and beyond LATIN1: pgbaton's own connections (the pool's, LISTEN's) talk
UTF8 whatever the DSN says. Under SQL_ASCII every job failed with UnknownTask (its task
read as bytes); under LATIN1 the claim raised UnicodeDecodeError after it committed,
and the job waited out its lease."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

import pgbaton
from pgbaton.worker import Worker, WorkerConfig
from tests.helpers import in_client_encoding

DEADLINE_SECONDS = 30.0


@pytest.mark.parametrize("encoding", ["LATIN1", "SQL_ASCII"])
async def test_a_worker_on_a_dsn_in_another_client_encoding_runs_text_beyond_it(
    queue, db, dsn, schema, encoding
):
    app = pgbaton.App(in_client_encoding(dsn, encoding), schema=schema)

    @app.task(name="prix €")
    async def price(text: str) -> dict[str, Any]:
        return {"echo": text, "length": len(text)}

    job_id = await price.enqueue_async({"text": "café €"})
    worker = Worker(app, WorkerConfig(concurrency=1, maintenance=False, poll_interval=0.05,
                                      shutdown_grace=0.2))
    running = asyncio.create_task(worker.run())

    def row() -> dict[str, Any]:
        found = db.execute("SELECT task, status, args, result, errors FROM jobs"
                           " WHERE id = %s", (job_id,)).fetchone()
        assert found is not None
        return found

    try:
        deadline = time.monotonic() + DEADLINE_SECONDS
        while row()["status"] not in ("done", "failed"):
            assert time.monotonic() < deadline, f"timed out waiting for the job: {row()}"
            await asyncio.sleep(0.02)
    finally:
        worker.request_stop()
        code = await asyncio.wait_for(running, DEADLINE_SECONDS)
    assert code == 0
    assert row() == {"task": "prix €", "status": "done", "args": {"text": "café €"},
                     "result": {"echo": "café €", "length": 6}, "errors": []}
