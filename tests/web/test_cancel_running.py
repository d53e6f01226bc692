"""Cancelling a running job from the dashboard says that its handler runs on until its
worker hears, as `pgbaton cancel` does (issue 32, item 12)."""

from __future__ import annotations

from starlette.testclient import TestClient

import pgbaton

from .conftest import csrf_token

HTML = {"Accept": "text/html"}


def test_cancelling_a_running_job_says_its_handler_is_told_at_once(
        client: TestClient, queue: pgbaton.Queue) -> None:
    running = queue.enqueue("t")
    queue.claim("worker-7", limit=1, lease=600)
    pending = queue.enqueue("t")
    token = csrf_token(client)
    for job_id in (running, pending):
        answer = client.post(f"/jobs/{job_id}/cancel", data={"csrf_token": token},
                             headers=HTML)
        assert answer.status_code == 200
        assert queue.get(job_id).status == "cancelled"
        notice = answer.text.split('id="notice">', 1)[1].split("</p>", 1)[0]
        if job_id == running:
            assert notice == (
                "The job was cancelled; its handler on worker-7 is told to stop at once (at "
                "that worker&#39;s next heartbeat if it does not listen), and holds the "
                "job&#39;s key until it lets go.")
        else:
            assert notice == "The job was cancelled."
