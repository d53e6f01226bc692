"""The dashboard's job page shows a unique job's key and blocking states."""

from __future__ import annotations

from starlette.testclient import TestClient

import pgbaton

HTML = {"Accept": "text/html"}


def test_the_job_page_shows_the_unique_key_and_states(
    client: TestClient, queue: pgbaton.Queue
) -> None:
    """A unique job's page has its key (hex) and states; a plain job's says none."""
    unique = pgbaton.Unique(args=["tenant"], states=("pending", "running", "done"))
    job_id = queue.enqueue("report", {"tenant": "<b>acme</b>"}, unique=unique)
    job = queue.get(job_id)
    assert job is not None and job.unique_key is not None and len(job.unique_key) == 64
    page = client.get(f"/jobs/{job_id}", headers=HTML).text
    assert f'<td id="field-unique_key">{job.unique_key}</td>' in page
    assert '<td id="field-unique_states">pending, running, done</td>' in page
    assert "<b>acme</b>" not in page
    plain = client.get(f"/jobs/{queue.enqueue('report')}", headers=HTML).text
    assert '<td id="field-unique_key"><span class="none">none</span></td>' in plain
