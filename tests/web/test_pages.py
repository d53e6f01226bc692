"""Every page of the dashboard against a real database with jobs in every state."""

from __future__ import annotations

import psycopg
from psycopg.rows import DictRow
from starlette.testclient import TestClient

from .conftest import HOSTILE, Jobs, csrf_token

HTML = {"Accept": "text/html"}


def test_overview_counts_each_queue_from_sql(client: TestClient, jobs: Jobs,
                                             db: psycopg.Connection[DictRow]) -> None:
    """The overview shows per queue what SQL counts, with the running job's worker."""
    page = client.get("/", headers=HTML)
    assert page.status_code == 200
    for queue in ("mail", "default", "media", "sync", "reports"):
        assert f'data-queue="{queue}"' in page.text
    failed = db.execute("SELECT count(*) AS n FROM jobs WHERE status = 'failed'").fetchone()
    assert failed is not None and failed["n"] == 1
    assert "worker-running" in page.text
    assert page.text.count("<svg") >= 2  # the charts are drawn server-side
    assert "No leader" in page.text  # no worker runs here, so nobody holds the lock


def test_overview_names_the_leader_holding_the_advisory_lock(
        client: TestClient, dsn: str, schema: str, jobs: Jobs) -> None:
    """A session holding leader_try_acquire's lock is shown as the leader."""
    with psycopg.connect(dsn, autocommit=True, application_name="leader-under-test") as conn:
        conn.execute("SELECT pg_try_advisory_lock(hashtext(%s))", [f"pgbaton.leader.{schema}"])
        page = client.get("/", headers=HTML)
        assert "leader-under-test" in page.text
        partial = client.get("/?partial=1", headers=HTML)
        assert "leader-under-test" in partial.text and "<html" not in partial.text


def test_job_list_filters_and_escapes(client: TestClient, jobs: Jobs) -> None:
    """Filters narrow the list; job data that looks like HTML is shown as text."""
    page = client.get("/jobs", params={"status": "failed"}, headers=HTML)
    assert page.status_code == 200
    assert f'id="job-{jobs.failed}"' in page.text
    assert f'id="job-{jobs.done}"' not in page.text
    assert "card declined" in page.text
    page = client.get("/jobs", params={"q": "DECLINED"}, headers=HTML)
    assert f'id="job-{jobs.failed}"' in page.text and f'id="job-{jobs.pending}"' not in page.text
    page = client.get("/jobs", params={"key": "customer-7"}, headers=HTML)
    assert all(f'id="job-{i}"' in page.text for i in jobs.keyed)
    page = client.get("/jobs", headers=HTML)
    assert "<script>alert" not in page.text and "&lt;script&gt;" in page.text
    detail = client.get(f"/jobs/{jobs.hostile}", headers=HTML)
    assert detail.status_code == 200
    assert HOSTILE not in detail.text and "<img src=x" not in detail.text


def test_job_list_pages_by_keyset(client: TestClient, jobs: Jobs) -> None:
    """Pages follow each other by id, never repeat a job, and end."""
    seen: list[int] = []
    url = "/jobs?limit=3"
    for _ in range(10):
        page = client.get(url, headers=HTML)
        assert page.status_code == 200
        import re

        seen += [int(i) for i in re.findall(r'<tr id="job-(\d+)"', page.text)]
        found = re.search(r'id="next-page" href="([^"]+)"', page.text)
        if not found:
            break
        url = found[1].replace("&amp;", "&")
    assert seen == sorted(seen, reverse=True)
    assert len(seen) == len(set(seen)) == 9


def test_one_job_shows_attempts_claim_and_same_key(client: TestClient, jobs: Jobs) -> None:
    """The job page shows each attempt's error, the claim token and lease of a running
    job, and the other jobs of its key."""
    failed = client.get(f"/jobs/{jobs.failed}", headers=HTML).text
    assert "attempt 1" in failed and "RuntimeError" in failed and "card declined" in failed
    running = client.get(f"/jobs/{jobs.running}", headers=HTML).text
    assert "worker-running" in running
    assert 'id="field-claim_token"><span class="none">' not in running
    keyed = client.get(f"/jobs/{jobs.keyed[0]}", headers=HTML).text
    assert f'href="/jobs/{jobs.keyed[1]}"' in keyed
    assert 'id="meta"' not in keyed  # no headers, no section


def test_one_job_shows_its_headers_escaped(client: TestClient, jobs: Jobs,
                                           db: psycopg.Connection[DictRow]) -> None:
    """A job's meta (the trace context tracing stores) is shown under Headers, as text
    even when it holds markup."""
    traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    db.execute("UPDATE jobs SET meta = jsonb_build_object('traceparent', %s::text, "
               "'note', %s::text) WHERE id = %s", (traceparent, HOSTILE, jobs.pending))
    page = client.get(f"/jobs/{jobs.pending}", headers=HTML).text
    assert 'id="meta"' in page and traceparent in page
    assert HOSTILE not in page and "&lt;script&gt;" in page


def test_other_pages_answer(client: TestClient, jobs: Jobs) -> None:
    """Queues, periodic, health, healthz."""
    assert 'href="/jobs?queue=reports"' in client.get("/queues", headers=HTML).text
    assert "--app MODULE:APP" in client.get("/periodic", headers=HTML).text
    health = client.get("/health", headers=HTML)
    assert health.status_code == 200 and 'id="health-status"' in health.text
    assert client.get("/healthz").text == "ok\n"
    css = client.get("/static/dashboard.css")
    assert css.status_code == 200 and "text/css" in css.headers["content-type"]


def test_bad_input_is_a_clear_4xx_and_writes_nothing(
        client: TestClient, jobs: Jobs, db: psycopg.Connection[DictRow]) -> None:
    """Unknown ids, malformed filters and huge pages are refused with a reason."""
    before = db.execute("SELECT md5(string_agg(j::text, '' ORDER BY id)) AS h FROM jobs j")
    snapshot = before.fetchone()
    cases = {
        "/jobs/999999": (404, "there is no job 999999"),
        "/jobs/abc": (404, "no such page"),
        "/jobs/99999999999999999999999": (404, "no such page"),
        "/jobs?limit=100000": (400, "limit=100000 is out of range"),
        "/jobs?limit=-1": (400, "out of range"),
        "/jobs?limit=lots": (400, "not a whole number"),
        "/jobs?status=exploded": (400, "status 'exploded'"),
        "/jobs?since=yesterday-ish": (400, "is not a time"),
        "/jobs?before=0": (400, "before=0"),
        "/jobs?task=%00": (400, "NUL"),
        "/jobs/bulk?action=explode": (400, "unknown action"),
        "/nowhere": (404, "no such page"),
    }
    for url, (status, words) in cases.items():
        answer = client.get(url)
        assert answer.status_code == status, (url, answer.text)
        assert words in answer.text, (url, answer.text)
    assert client.post("/jobs/999999/retry").status_code == 403  # no CSRF token: refused
    after = db.execute("SELECT md5(string_agg(j::text, '' ORDER BY id)) AS h FROM jobs j")
    assert after.fetchone() == snapshot


def test_a_job_moved_to_the_history_is_listed_and_shown(
        client: TestClient, jobs: Jobs, queue, db: psycopg.Connection[DictRow]) -> None:
    """A done job moved to jobs_history (docs/explanation/retention.md) is on the job
    list among the others (not on a list of failed jobs) and has its page, args and
    result as they were; its page's delete removes it from the history."""
    db.execute("UPDATE jobs SET finished_at = now() - interval '2 hours' WHERE id = %s",
               (jobs.done,))
    assert queue.archive(after=3600, partition=86400) == 1
    assert db.execute("SELECT count(*) AS n FROM jobs WHERE id = %s",
                      (jobs.done,)).fetchone() == {"n": 0}
    listed = client.get("/jobs", headers=HTML).text
    assert f'id="job-{jobs.done}"' in listed and f'id="job-{jobs.failed}"' in listed
    done_only = client.get("/jobs", params={"status": "done"}, headers=HTML).text
    assert f'id="job-{jobs.done}"' in done_only and f'id="job-{jobs.failed}"' not in done_only
    failed_only = client.get("/jobs", params={"status": "failed"}, headers=HTML).text
    assert f'id="job-{jobs.done}"' not in failed_only
    page = client.get(f"/jobs/{jobs.done}", headers=HTML)
    assert page.status_code == 200
    assert "a@example.com" in page.text and "worker-done" in page.text
    token = csrf_token(client)
    answer = client.post(f"/jobs/{jobs.done}/delete", data={"csrf_token": token},
                         follow_redirects=False)
    assert answer.status_code == 303
    assert db.execute("SELECT count(*) AS n FROM jobs_history").fetchone() == {"n": 0}
    assert client.get(f"/jobs/{jobs.done}", headers=HTML).status_code == 404
