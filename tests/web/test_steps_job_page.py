"""The dashboard's job page lists a job's durable steps and says what a suspended job
waits for (docs/howto/durable-steps.md)."""

from __future__ import annotations

import psycopg
from psycopg.rows import DictRow
from starlette.testclient import TestClient

import pgbaton

HTML = {"Accept": "text/html"}


def test_the_job_page_lists_the_steps_of_a_sleeping_job(
    client: TestClient, queue: pgbaton.Queue, db: psycopg.Connection[DictRow]
) -> None:
    """Each step with its state, duration and size; a sleeping job says until when,
    one waiting for an event names it (escaped); a job without steps shows none."""
    sleeping = queue.enqueue("nap", delay=3600)
    waiting = queue.enqueue("signup", delay=60)
    db.execute("INSERT INTO job_steps (job_id, seq, name, kind, result, started_at, "
               "finished_at, size) VALUES (%s, 0, 'fetch', 'step', '1', "
               "now() - interval '1.5 seconds', now(), 1)", [sleeping])
    db.execute("INSERT INTO job_steps (job_id, seq, name, kind, until) VALUES "
               "(%s, 1, 'sleep', 'sleep', now() + interval '1 hour'), "
               "(%s, 0, '<b>ok</b>', 'event', NULL)", [sleeping, waiting])
    page = client.get(f"/jobs/{sleeping}", headers=HTML).text
    assert "<h2>Steps (2)</h2>" in page and 'id="suspended">Sleeping until' in page
    assert "<td>fetch</td><td>step</td><td>done</td><td>1.500</td><td>1</td>" in page
    assert "<td>sleep</td><td>sleep</td><td>sleeping</td><td></td><td></td>" in page
    other = client.get(f"/jobs/{waiting}", headers=HTML).text
    assert "Waiting for event <strong>&lt;b&gt;ok&lt;/b&gt;</strong>, no timeout" in other
    plain = client.get(f"/jobs/{queue.enqueue('plain')}", headers=HTML).text
    assert 'id="steps"' not in plain
