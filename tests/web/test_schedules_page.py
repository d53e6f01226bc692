"""The periodic page: every schedule with its next five fire times in its zone, its last
job and its state; full access adds, edits, pauses, resumes, runs now and removes, each
with the CSRF token and logged with who did it; read-only sees no form and is refused."""

from __future__ import annotations

import logging

import psycopg
import pytest
from psycopg.rows import DictRow
from starlette.testclient import TestClient

import pgbaton
from pgbaton.web import create_app
from tests.web.conftest import HOSTILE, csrf_token

HTML = {"Accept": "text/html"}


def rows(db) -> list[dict]:
    return db.execute("SELECT * FROM schedules ORDER BY name").fetchall()


def test_the_page_lists_schedules_with_fire_times_in_their_zone(
        client: TestClient, queue: pgbaton.Queue) -> None:
    queue.add_schedule("nightly", "30 2 * * *", "report", {"title": HOSTILE}, new=True,
                       timezone="Europe/Berlin")
    job_id = queue.run_schedule_now("nightly")
    page = client.get("/periodic", headers=HTML).text
    assert "Europe/Berlin" in page and page.count(" 02:30:00+0") == 5
    assert f'href="/jobs/{job_id}"' in page and "pending" in page
    assert HOSTILE not in page and "&lt;script&gt;" in page  # escaped, in the table and form
    assert 'action="/periodic/pause"' in page and 'action="/periodic/add"' in page


def test_full_access_adds_edits_pauses_resumes_runs_and_removes(
        client: TestClient, db: psycopg.Connection[DictRow],
        caplog: pytest.LogCaptureFixture) -> None:
    token = csrf_token(client, "/periodic")
    caplog.set_level(logging.INFO, logger="pgbaton.web")

    def post(action: str, **fields: str):
        return client.post(f"/periodic/{action}", data={"csrf_token": token, **fields},
                           follow_redirects=False)

    answer = post("add", name="hourly", cron="0 * * * *", task="sync", args='{"n": 1}',
                  timezone="UTC", catch_up="all", catch_up_limit="5", new="yes")
    assert answer.status_code == 303 and answer.headers["location"].endswith("?done=add")
    assert (rows(db)[0]["catch_up"], rows(db)[0]["catch_up_limit"]) == ("all", 5)
    assert rows(db)[0]["updated_by"] == "dashboard:anonymous@testclient"
    assert post("edit", name="hourly", cron="15 * * * *", task="sync", args='{"n": 2}',
                timezone="Asia/Tokyo", queue="reports", priority="3",
                revision=str(rows(db)[0]["revision"])).status_code == 303
    assert (rows(db)[0]["queue"], rows(db)[0]["priority"]) == ("reports", 3)
    assert (rows(db)[0]["cron"], rows(db)[0]["args"], rows(db)[0]["timezone"]) == (
        "15 * * * *", {"n": 2}, "Asia/Tokyo")
    assert post("pause", name="hourly").status_code == 303 and rows(db)[0]["paused"]
    assert post("resume", name="hourly").status_code == 303 and not rows(db)[0]["paused"]
    assert post("run-now", name="hourly").status_code == 303
    assert db.execute("SELECT count(*) AS n FROM jobs").fetchone() == {"n": 1}
    assert post("remove", name="hourly").status_code == 303 and rows(db) == []
    logged = [r.getMessage() for r in caplog.records if r.name == "pgbaton.web"]
    assert "dashboard: anonymous@testclient pause schedule 'hourly'" in logged


@pytest.mark.parametrize(("fields", "message"), [
    ({"cron": "0 0 30 2 *"}, "never fires"),
    ({"timezone": "Nowhere/Zone"}, "unknown time zone"),
    ({"task": "unheard", "new": ""}, "unknown task"),
    ({"args": "[1"}, "args are not JSON"),
    ({"args": "[" * 5000}, "args are not JSON"),
    ({"args": '{"n": ' + "7" * 5000 + "}"}, "args are not JSON"),
    ({"catch_up_limit": "\u00b2"}, "whole number"),
    ({"catch_up_limit": "9" * 5000}, "whole number"),
    ({"cron": "@bogus"}, "not a cron expression"),
    ({"name": "taken"}, "exists already"),
])
def test_bad_input_is_a_400_that_names_it_and_writes_nothing(
        client: TestClient, queue: pgbaton.Queue, db: psycopg.Connection[DictRow],
        fields: dict[str, str], message: str) -> None:
    queue.add_schedule("taken", "* * * * *", "sync", new=True)
    before = rows(db)
    token = csrf_token(client, "/periodic")
    form = {"csrf_token": token, "name": "x", "cron": "* * * * *", "task": "unheard",
            "new": "yes", **fields}
    answer = client.post("/periodic/add", data=form, headers=HTML)
    assert answer.status_code == 400 and message in answer.text
    assert rows(db) == before


def test_an_app_checks_the_task_and_args_and_code_schedules_are_not_editable(
        dsn: str, schema: str, queue: pgbaton.Queue, db: psycopg.Connection[DictRow]) -> None:
    app = pgbaton.App(dsn, schema=schema)

    @app.task
    def report(day: int) -> None: ...

    with TestClient(create_app(app=app)) as client:
        token = csrf_token(client, "/periodic")
        answer = client.post("/periodic/add", headers=HTML, data={
            "csrf_token": token, "name": "x", "cron": "* * * * *", "task": "report",
            "args": '{"week": 1}'})
        assert answer.status_code == 400 and "missing &#39;day&#39;" in answer.text
        assert rows(db) == []
    app.queue.close()


def test_read_only_sees_no_form_and_a_post_is_refused(
        dsn: str, schema: str, queue: pgbaton.Queue, db: psycopg.Connection[DictRow]) -> None:
    queue.add_schedule("nightly", "30 2 * * *", "report", new=True)
    with TestClient(create_app(dsn, schema=schema, read_only=True)) as read_only:
        page = read_only.get("/periodic", headers=HTML).text
        assert "nightly" in page and "<form" not in page
        for action in ("pause", "remove", "run-now"):
            assert read_only.post(f"/periodic/{action}",
                                  data={"name": "nightly"}).status_code == 403
    assert not rows(db)[0]["paused"] and db.execute(
        "SELECT count(*) AS n FROM jobs").fetchone() == {"n": 0}


def test_a_post_without_the_csrf_token_is_refused(
        client: TestClient, queue: pgbaton.Queue, db: psycopg.Connection[DictRow]) -> None:
    queue.add_schedule("nightly", "30 2 * * *", "report", new=True)
    assert client.post("/periodic/pause", data={"name": "nightly"}).status_code == 403
    assert not rows(db)[0]["paused"]


def test_a_named_cron_and_a_name_with_spaces_work_as_in_the_api(
        client: TestClient, queue: pgbaton.Queue, db: psycopg.Connection[DictRow]) -> None:
    """`@daily` is a cron expression here as in @app.periodic; a name the API took with
    spaces around it can be paused from the page."""
    queue.add_schedule(" nightly ", "@daily", "sync", new=True)
    assert "@daily" in client.get("/periodic", headers=HTML).text
    token = csrf_token(client, "/periodic")
    answer = client.post("/periodic/pause", data={"csrf_token": token, "name": " nightly "},
                         follow_redirects=False)
    assert answer.status_code == 303 and rows(db)[0]["paused"]


def test_run_now_of_a_schedule_its_task_cannot_make_a_job_of_is_a_400(
        dsn: str, schema: str, queue: pgbaton.Queue, db: psycopg.Connection[DictRow]) -> None:
    app = pgbaton.App(dsn, schema=schema)

    @app.task(key=lambda customer, **_: str(customer))
    def sync_customer(customer: int = 0) -> None: ...

    queue.add_schedule("odd", "* * * * *", "sync_customer", new=True)
    with TestClient(create_app(app=app)) as client:
        token = csrf_token(client, "/periodic")
        answer = client.post("/periodic/run-now", headers=HTML,
                             data={"csrf_token": token, "name": "odd"})
        assert answer.status_code == 400 and "cannot make a job" in answer.text
    assert db.execute("SELECT count(*) AS n FROM jobs").fetchone() == {"n": 0}
    app.queue.close()


def test_two_operators_editing_at_once_do_not_overwrite_each_other(
        client: TestClient, queue: pgbaton.Queue, db: psycopg.Connection[DictRow]) -> None:
    """Both open the periodic page; the first saves; the second's save, made against the
    revision their page showed, is a 409 that says the schedule changed since they
    opened it, and the first one's change stands."""
    queue.add_schedule("hourly", "0 * * * *", "sync", {"n": 1}, new=True)
    first, second = (client.get("/periodic", headers=HTML).text for _ in range(2))
    revision = rows(db)[0]["revision"]
    assert f'name="revision" value="{revision}"' in first == second
    token = csrf_token(client, "/periodic")
    form = {"csrf_token": token, "name": "hourly", "task": "sync", "timezone": "UTC",
            "args": '{"n": 1}', "revision": str(revision)}
    saved = client.post("/periodic/edit", data={**form, "cron": "5 * * * *"},
                        follow_redirects=False)
    assert saved.status_code == 303
    late = client.post("/periodic/edit", headers=HTML,
                       data={**form, "cron": "45 * * * *", "args": '{"n": 9}'})
    assert late.status_code == 409
    assert "changed since you opened it" in late.text
    assert "by dashboard:anonymous@testclient" in late.text
    (row,) = rows(db)
    assert (row["cron"], row["args"], row["revision"]) == ("5 * * * *", {"n": 1},
                                                           revision + 1)
    # Without the revision (a form from before, a script): refused, nothing written.
    bare = client.post("/periodic/edit", headers=HTML, data={
        k: v for k, v in {**form, "cron": "45 * * * *"}.items() if k != "revision"})
    assert bare.status_code == 400 and "sent no revision" in bare.text
    assert rows(db)[0]["cron"] == "5 * * * *"


def test_a_row_with_a_zone_this_host_lacks_is_shown_marked(
        client: TestClient, queue: pgbaton.Queue, db: psycopg.Connection[DictRow]) -> None:
    """A schedule written by a host with newer tz data is listed with the others, marked
    with what is wrong and how to fix it; the page does not fail."""
    queue.add_schedule("fine", "0 * * * *", "sync", new=True)
    queue.add_schedule("martian", "0 * * * *", "sync", new=True)
    db.execute("UPDATE schedules SET timezone = 'Mars/Olympus' WHERE name = 'martian'")
    answer = client.get("/periodic", headers=HTML)
    assert answer.status_code == 200
    assert answer.text.count("unreadable here") == 1
    assert "unknown time zone &#39;Mars/Olympus&#39;" in answer.text
    assert "pgbaton schedule update martian --timezone ZONE" in answer.text
    assert answer.text.count(":00:00+00:00") == 5  # the other row's fire times
