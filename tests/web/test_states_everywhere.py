"""One set of states and a paused queue, the same on every page that shows a queue's
counts: the overview's card, the queues page, /metrics, and the job list they link to
(issue 32, items 1 and 2)."""

from __future__ import annotations

import re

from starlette.testclient import TestClient

import pgbaton
from pgbaton.models import STATES
from tests.test_metrics import samples

HTML = {"Accept": "text/html"}


def test_a_paused_queue_says_so_wherever_its_counts_are(
        client: TestClient, queue: pgbaton.Queue) -> None:
    """Paused, its due job waits for a resume, not for a worker: the overview's card
    has a paused badge, the queues page says paused, /metrics has paused 1; a queue
    not paused shows none of them."""
    queue.enqueue("send", queue="mail")
    queue.enqueue("send", queue="busy")
    queue.pause("mail")
    overview = client.get("/", headers=HTML).text
    mail = overview.split('data-queue="mail"', 1)[1].split("</article>", 1)[0]
    busy = overview.split('data-queue="busy"', 1)[1].split("</article>", 1)[0]
    assert 'class="badge paused"' in mail and 'class="badge paused"' not in busy
    queues = client.get("/queues", headers=HTML).text
    row = re.search(r'<tr><td><a href="/jobs\?queue=mail">mail</a>.*?</tr>', queues, re.S)
    assert row and "<td>paused</td>" in row[0]
    metrics = samples(client.get("/metrics").text)
    assert metrics[("pgbaton_queue_paused", (("queue", "mail"),))] == 1
    assert metrics[("pgbaton_queue_paused", (("queue", "busy"),))] == 0


def test_the_overview_counts_are_links_to_the_jobs_they_count(
        client: TestClient, queue: pgbaton.Queue) -> None:
    """Each count of a queue's card links to the job list of that state and queue, which
    lists exactly the jobs counted; the states are named as in the list's tabs and in
    /metrics."""
    due = queue.enqueue("send", queue="mail")
    later = queue.enqueue("send", queue="mail", delay=3600)
    overview = client.get("/", headers=HTML).text
    card = overview.split('data-queue="mail"', 1)[1].split("</article>", 1)[0]
    links = dict(re.findall(r'<dd class="(\w+)[^"]*"><a href="([^"]+)">\d+</a>', card))
    assert set(links) == {"pending", "scheduled", "running", "failed"} <= set(STATES)
    for state, wanted in (("pending", due), ("scheduled", later)):
        assert links[state] == f"/jobs?status={state}&amp;queue=mail"
        page = client.get(links[state].replace("&amp;", "&"), headers=HTML).text
        assert re.findall(r'<tr id="job-(\d+)"', page) == [str(wanted)]
    metrics = samples(client.get("/metrics").text)
    assert metrics[("pgbaton_queue_jobs", (("queue", "mail"), ("state", "scheduled")))] == 1
    assert metrics[("pgbaton_queue_jobs", (("queue", "mail"), ("state", "pending")))] == 1
