"""A real worker beside the test: in a thread, or on the test's own event loop."""

import pgbaton
from pgbaton.testing import WorkerThread, wait_for_job, wait_for_job_async, worker_task
from shop_jobs import charge


def test_a_worker_in_a_thread(pgbaton_app: pgbaton.App) -> None:
    with WorkerThread(pgbaton_app, concurrency=2):
        job_id = charge.defer(customer_id=3, amount=100)
        job = wait_for_job(pgbaton_app, job_id)
    assert (job.status, job.result) == ("done", {"charged": 100})


async def test_a_worker_on_the_event_loop(pgbaton_app: pgbaton.App) -> None:
    async with worker_task(pgbaton_app):
        job_id = await charge.defer_async(customer_id=3, amount=100)
        job = await wait_for_job_async(pgbaton_app, job_id)
    assert job.status == "done"
