"""The job list as an operator works it: state tabs with counts, rows selected and
acted on through a counted confirmation, when each job failed or is due, and times
relative with the absolute one on hover."""

from __future__ import annotations

import re

import psycopg
import pytest
from psycopg.rows import DictRow
from starlette.testclient import TestClient

import pgbaton
from pgbaton.web import store

from .conftest import HOSTILE, Jobs, csrf_token

HTML = {"Accept": "text/html"}


def tab_counts(html: str) -> dict[str, str]:
    return dict(re.findall(
        r'id="tab-(\w+)"[^>]*>\w+ <span class="count[^"]*">([^<]*)</span>', html))


def test_state_tabs_count_each_state_of_the_filter(
        client: TestClient, jobs: Jobs, db: psycopg.Connection[DictRow]) -> None:
    """One tab per state, named as everywhere (scheduled included), each with the
    count SQL gives under the filter's other fields; the current state is marked; the
    tabs alone come back for the live refresh."""
    page = client.get("/jobs", headers=HTML).text
    counted = {row["state"]: str(row["n"]) for row in db.execute(
        "SELECT CASE WHEN status = 'pending' AND run_at > now() THEN 'scheduled' "
        "ELSE status END AS state, count(*) AS n FROM jobs GROUP BY 1")}
    assert tab_counts(page) == {state: counted.get(state, "0")
                                for state in pgbaton.models.STATES}
    assert tab_counts(page)["scheduled"] == "2"
    narrowed = client.get("/jobs", params={"status": "failed", "queue": "reports"},
                          headers=HTML).text
    assert tab_counts(narrowed)["scheduled"] == "2"  # the status filter is the tab's own
    assert tab_counts(narrowed)["failed"] == "0"
    assert re.search(r'href="/jobs\?queue=reports&amp;status=scheduled" '
                     r'class="tab scheduled" id="tab-scheduled"', narrowed)
    assert 'id="tab-failed" aria-current="page"' in narrowed
    partial = client.get("/jobs", params={"queue": "reports", "partial": "tabs"},
                         headers=HTML).text
    assert "<html" not in partial and tab_counts(partial)["scheduled"] == "2"


def test_a_tab_counts_no_further_than_its_cap(
        client: TestClient, queue: pgbaton.Queue, monkeypatch: pytest.MonkeyPatch) -> None:
    """A count stops at the cap and says so ("3+"), so a tab over millions of done jobs
    reads no more rows than the cap."""
    monkeypatch.setattr(store, "STATE_COUNT_CAP", 3)
    monkeypatch.setattr("pgbaton.web.app.STATE_COUNT_CAP", 3)
    queue.enqueue_many([{"task": "t"} for _ in range(5)])
    assert tab_counts(client.get("/jobs", headers=HTML).text)["pending"] == "3+"


def test_hostile_filter_values_stay_text_in_the_tabs(client: TestClient, jobs: Jobs) -> None:
    """A queue or text filter holding markup or SQL is encoded in every tab's link."""
    page = client.get("/jobs", params={"queue": HOSTILE, "q": "'; DROP TABLE jobs; --"},
                      headers=HTML)
    assert page.status_code == 200
    assert HOSTILE not in page.text and "<img src=x" not in page.text
    assert "DROP+TABLE" in page.text and set(tab_counts(page.text).values()) == {"0"}


def test_selected_rows_are_counted_asked_and_acted_on(
        client: TestClient, queue: pgbaton.Queue, db: psycopg.Connection[DictRow]) -> None:
    """Rows checked on the list go to the bulk page as ids: it asks "Retry 2 jobs
    with fresh attempts?" for the two failed ones of three selected, and the confirmed
    action retries exactly those; the other failed job stays failed."""
    ids = [queue.enqueue("charge", {"n": n}, max_attempts=1) for n in range(3)]
    for claim in queue.claim("w", limit=10):
        queue.fail(claim, "declined")
    pending = queue.enqueue("charge", {"n": 9})
    page = client.get("/jobs", headers=HTML).text
    for job_id in [*ids, pending]:
        assert f'name="ids" value="{job_id}" form="selection"' in page
    chosen = [ids[0], ids[2], pending]
    preview = client.get("/jobs/bulk", params=[("action", "retry"),
                                               *(("ids", str(i)) for i in chosen)],
                         headers=HTML)
    assert preview.status_code == 200
    assert '<h1 id="bulk-question">Retry 2 jobs with fresh attempts?</h1>' in preview.text
    assert "the other 1 selected is not in a state this action changes" in preview.text
    assert f'name="ids" value="{ids[0]},{ids[2]},{pending}"' in preview.text
    upto = re.search(r'name="upto" value="(\d+)"', preview.text)
    assert upto
    done = client.post("/jobs/bulk", data={
        "csrf_token": csrf_token(client), "action": "retry", "upto": upto[1],
        "ids": f"{ids[0]},{ids[2]},{pending}"})
    assert done.status_code == 200 and "2 jobs changed" in done.text
    rows = db.execute("SELECT id, status FROM jobs ORDER BY id").fetchall()
    assert rows == [{"id": ids[0], "status": "pending"}, {"id": ids[1], "status": "failed"},
                    {"id": ids[2], "status": "pending"}, {"id": pending, "status": "pending"}]


@pytest.mark.parametrize(("action", "question"), [
    ("cancel", "Cancel 1 job?"), ("delete", "Delete 1 job for good?"),
    ("run-now", "Make 1 job due now?"),
])
def test_every_bulk_question_names_the_count(client: TestClient, queue: pgbaton.Queue,
                                             action: str, question: str) -> None:
    """Each action asks in words with the count, never "<action> on N jobs?"."""
    job = queue.enqueue("t", delay=600)
    preview = client.get("/jobs/bulk", params={"action": action, "ids": str(job)},
                         headers=HTML)
    assert f'<h1 id="bulk-question">{question}</h1>' in preview.text


@pytest.mark.parametrize("ids", ["1;DROP TABLE jobs", "0", "-3", "x,1", "9" * 30,
                                 ",".join(["1"] * 501)])
def test_a_bad_selection_is_a_400_that_names_it_and_changes_nothing(
        client: TestClient, jobs: Jobs, db: psycopg.Connection[DictRow], ids: str) -> None:
    """Ids that are not job ids, or more than a page of them, are refused before any
    statement runs."""
    before = db.execute("SELECT id, status FROM jobs ORDER BY id").fetchall()
    preview = client.get("/jobs/bulk", params={"action": "cancel", "ids": ids})
    assert preview.status_code == 400 and "ids" in preview.text
    answer = client.post("/jobs/bulk", data={
        "csrf_token": csrf_token(client), "action": "cancel", "upto": str(jobs.hostile),
        "ids": ids})
    assert answer.status_code == 400 and "ids" in answer.text
    assert db.execute("SELECT id, status FROM jobs ORDER BY id").fetchall() == before


def test_a_selection_without_the_csrf_token_changes_nothing(
        client: TestClient, jobs: Jobs, db: psycopg.Connection[DictRow]) -> None:
    answer = client.post("/jobs/bulk", data={"action": "retry", "upto": str(jobs.hostile),
                                             "ids": str(jobs.failed)})
    assert answer.status_code == 403
    assert db.execute("SELECT status FROM jobs WHERE id = %s",
                      [jobs.failed]).fetchone() == {"status": "failed"}


def test_a_failed_job_is_listed_by_when_it_failed(
        client: TestClient, queue: pgbaton.Queue, db: psycopg.Connection[DictRow]) -> None:
    """The list's time says when a job failed (its finished_at), not its run_at; a
    pending job says when it is due; each time relative, the absolute one on hover,
    to the second."""
    failed = queue.enqueue("charge", max_attempts=1)
    (claim,) = queue.claim("w", limit=1)
    queue.fail(claim, "declined")
    db.execute("UPDATE jobs SET run_at = now() - interval '3 days', "
               "finished_at = now() - interval '5 minutes' WHERE id = %s", [failed])
    later = queue.enqueue("report", delay=7200)
    page = client.get("/jobs", headers=HTML).text
    row = re.search(rf'<tr id="job-{failed}".*?</tr>', page, re.S)
    assert row and re.search(
        r'<td class="when">failed <time datetime="[^"]+" '
        r'title="\d{4}-\d\d-\d\d \d\d:\d\d:\d\d[+-]\d\d:\d\d">5 min ago</time></td>', row[0])
    row = re.search(rf'<tr id="job-{later}".*?</tr>', page, re.S)
    assert row and re.search(r'<td class="when">due <time [^>]+>in (1 h 59 min|2 h)</time>',
                             row[0])


def test_no_page_shows_microseconds(client: TestClient, jobs: Jobs) -> None:
    """Every time on every page is to the second."""
    for path in ("/", "/jobs", f"/jobs/{jobs.failed}", f"/jobs/{jobs.running}", "/queues",
                 "/workers"):
        page = client.get(path, headers=HTML)
        assert page.status_code == 200, path
        assert not re.search(r"\d\d:\d\d:\d\d\.\d", page.text), path


def test_read_only_lists_no_checkboxes(dsn: str, schema: str, jobs: Jobs) -> None:
    from pgbaton.web import create_app

    with TestClient(create_app(dsn, schema=schema, read_only=True)) as read_only:
        page = read_only.get("/jobs", headers=HTML).text
    assert 'class="select"' not in page and 'id="selection"' not in page
    assert 'id="tab-failed"' in page


def test_under_a_selection_the_tabs_counts_links_and_refresh_agree(
        client: TestClient, jobs: Jobs, db: psycopg.Connection[DictRow]) -> None:
    """`?ids=` narrows the list to a selection: every tab counts the selected jobs in its
    state, as SQL counts them; its link, the "all" link and the live refresh keep the
    selection (so a click or a refresh never shows counts of other jobs); a link clears
    the selection and keeps the other filters."""
    ids = f"{jobs.failed},{jobs.done},{jobs.cancelled}"
    page = client.get("/jobs", params={"ids": ids, "task": "charge"}, headers=HTML).text
    counted = {row["state"]: str(row["n"]) for row in db.execute(
        "SELECT status AS state, count(*) AS n FROM jobs WHERE id = ANY(%s) "
        "AND task = 'charge' GROUP BY 1", ([jobs.failed, jobs.done, jobs.cancelled],))}
    assert counted == {"failed": "1", "cancelled": "1"}
    assert tab_counts(page) == {state: counted.get(state, "0")
                                for state in pgbaton.models.STATES}
    selection = "ids=" + ids.replace(",", "%2C")
    links = re.findall(r'<a href="([^"]*)"[^>]*class="tab', page)
    assert len(links) == 1 + len(pgbaton.models.STATES)
    assert all(selection in link for link in links), links
    poll = re.search(r'data-poll="([^"]*)"', page)
    assert poll and selection in poll.group(1)
    refreshed = client.get(poll.group(1).replace("&amp;", "&"), headers=HTML).text
    assert tab_counts(refreshed) == tab_counts(page)
    failed_tab = client.get(re.search(r'href="([^"]*)" class="tab failed"', page).group(1)
                            .replace("&amp;", "&"), headers=HTML).text
    assert re.findall(r'id="job-(\d+)"', failed_tab) == [str(jobs.failed)]
    assert tab_counts(failed_tab) == tab_counts(page)
    note = re.search(r'<p class="notice" id="selection-note">(.*?)</p>', page)
    assert note and "Within the 3 jobs selected" in note.group(1)
    clear = re.search(r'href="([^"]*)" id="clear-selection"', page)
    assert clear and clear.group(1) == "/jobs?task=charge"
    # The filter form keeps the selection too: narrowing it stays within it.
    assert f'<input type="hidden" name="ids" value="{ids}">' in page
