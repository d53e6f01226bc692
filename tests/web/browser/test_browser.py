"""The dashboard as a person uses it: Debian's Chromium, headless, driven by Selenium.

Nothing downloads a browser: the binary and its driver are /usr/bin/chromium and
/usr/bin/chromedriver (`apt-get install chromium chromium-driver`), given to Selenium
explicitly, with Selenium Manager told to stay offline. Without them the tests skip.
With PGBATON_SCREENSHOTS=DIR a screenshot of each page is written there (the docs' come
from `PGBATON_SCREENSHOTS=docs/images pytest tests/web/browser/test_browser.py`).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg.rows import DictRow

import pgbaton
from pgbaton.web import create_app
from tests.test_metrics import free_port
from tests.web.conftest import HOSTILE, Jobs
from tests.web.test_store import finish

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
WAIT = 20.0

pytestmark = pytest.mark.skipif(
    not (CHROMIUM.exists() and CHROMEDRIVER.exists()),
    reason="no /usr/bin/chromium and /usr/bin/chromedriver: apt-get install chromium "
           "chromium-driver",
)

webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is a dev dependency")
from selenium.common.exceptions import NoSuchElementException  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.remote.webelement import WebElement  # noqa: E402
from selenium.webdriver.support import expected_conditions  # noqa: E402
from selenium.webdriver.support.wait import WebDriverWait  # noqa: E402


@pytest.fixture
def server(dsn: str, schema: str, queue: pgbaton.Queue,
           monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """The dashboard served by uvicorn on a free local port, in a thread of this test."""
    import uvicorn

    for name in ("PGBATON_DASHBOARD_TOKEN", "PGBATON_DASHBOARD_USER",
                 "PGBATON_DASHBOARD_PASSWORD"):
        monkeypatch.delenv(name, raising=False)
    port = free_port()
    config = uvicorn.Config(create_app(dsn, schema=schema), host="127.0.0.1", port=port,
                            log_level="warning")
    uvicorn_server = uvicorn.Server(config)
    thread = threading.Thread(target=uvicorn_server.run, daemon=True)
    thread.start()
    for _ in range(int(WAIT / 0.05)):
        if uvicorn_server.started:
            break
        threading.Event().wait(0.05)
    assert uvicorn_server.started, "uvicorn did not start"
    yield f"http://127.0.0.1:{port}"
    uvicorn_server.should_exit = True
    thread.join(WAIT)


@pytest.fixture
def browser(monkeypatch: pytest.MonkeyPatch) -> Iterator[webdriver.Chrome]:
    monkeypatch.setenv("SE_OFFLINE", "true")  # Selenium Manager must fetch nothing
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage",
                     "--window-size=1400,1000", "--disable-gpu"):
        options.add_argument(argument)
    driver = webdriver.Chrome(service=webdriver.ChromeService(str(CHROMEDRIVER)),
                              options=options)
    try:
        yield driver
    finally:
        driver.quit()


def wait(browser: webdriver.Chrome) -> WebDriverWait:
    return WebDriverWait(browser, WAIT)


def screenshot(browser: webdriver.Chrome, name: str, tmp_path: Path) -> None:
    path = tmp_path / name
    assert browser.save_screenshot(str(path))
    wanted = os.environ.get("PGBATON_SCREENSHOTS")
    if wanted:
        Path(wanted).mkdir(parents=True, exist_ok=True)
        shutil.copy(path, Path(wanted) / name)


def test_every_page_loads(browser: webdriver.Chrome, server: str, jobs: Jobs,
                          queue: pgbaton.Queue, tmp_path: Path) -> None:
    """Each page of the URL contract renders, with the jobs of every state, and hostile
    job data stays text."""
    queue.worker_beat({"worker_id": "web-1:4242:a1b2c3", "host": "web-1", "pid": 4242,
                       "version": "0.9.0", "queues": ["mail", "media"], "concurrency": 8,
                       "held": 0})
    queue.worker_beat({"worker_id": "batch-2:77:d4e5f6", "host": "batch-2", "pid": 77,
                       "version": "0.9.0", "queues": None, "concurrency": 2, "held": 0})
    for path, heading, shot in (
            ("/", "Overview", None), ("/jobs", "Jobs", "dashboard-jobs.png"),
            ("/queues", "Queues", "dashboard-queues.png"),
            ("/workers", "Workers", "dashboard-workers.png"),
            ("/periodic", "Periodic jobs", None), ("/health", "Health", "dashboard-health.png"),
            (f"/jobs/{jobs.failed}", f"Job {jobs.failed}", None)):
        browser.get(server + path)
        assert browser.find_element(By.TAG_NAME, "h1").text.startswith(heading), path
        if shot:
            screenshot(browser, shot, tmp_path)
    # Markup and SQL-looking text in a worker's id, queues and a job's task, args and
    # error are shown as text on every page: nothing runs, no element is made of them.
    queue.worker_beat({"worker_id": HOSTILE, "host": "'; DROP TABLE jobs; --",
                       "pid": 1, "version": "<b>1</b>", "queues": [HOSTILE],
                       "concurrency": 1, "held": 0})
    bad = queue.enqueue(HOSTILE, {"q": "'; DROP TABLE jobs; --"}, queue=HOSTILE,
                        max_attempts=1)
    [claim] = queue.claim("w", queues=[HOSTILE], limit=1)
    queue.fail(claim, RuntimeError(HOSTILE))
    for path in ("/", "/jobs", "/workers", "/queues", f"/jobs/{bad}"):
        browser.get(server + path)
        assert browser.execute_script(
            "return document.querySelectorAll('img, b, script:not([src])').length") == 0, path
        assert HOSTILE in browser.find_element(By.TAG_NAME, "main").text, path
    browser.get(f"{server}/jobs")
    statuses = {e.text for e in browser.find_elements(By.CSS_SELECTOR, "td.status")}
    assert statuses == {"pending", "scheduled", "running", "done", "failed", "cancelled"}
    browser.get(f"{server}/jobs/{jobs.hostile}")
    shown = json.loads(browser.find_element(By.ID, "args").text)
    assert shown == {"title": HOSTILE}  # shown as text, never run
    assert browser.execute_script("return document.querySelectorAll('img').length") == 0
    browser.get(f"{server}/jobs/{jobs.failed}")
    screenshot(browser, "dashboard-job.png", tmp_path)


def test_retry_and_cancel_by_clicking(browser: webdriver.Chrome, server: str, jobs: Jobs,
                                      db: psycopg.Connection[DictRow]) -> None:
    """Click retry on the failed job and cancel on the pending one, confirm the dialog,
    and see the row change on the page and in SQL."""
    browser.get(f"{server}/jobs/{jobs.failed}")
    browser.find_element(By.ID, "action-retry").click()
    wait(browser).until(expected_conditions.alert_is_present()).accept()
    wait(browser).until(expected_conditions.text_to_be_present_in_element(
        (By.ID, "job-status"), "pending"))
    assert browser.find_element(By.ID, "notice").text == "The job is pending again."
    browser.get(f"{server}/jobs/{jobs.pending}")
    browser.find_element(By.ID, "action-cancel").click()
    wait(browser).until(expected_conditions.alert_is_present()).dismiss()  # changed my mind
    row = db.execute("SELECT status FROM jobs WHERE id = %s", [jobs.pending]).fetchone()
    assert row == {"status": "pending"}
    browser.find_element(By.ID, "action-cancel").click()
    wait(browser).until(expected_conditions.alert_is_present()).accept()
    wait(browser).until(expected_conditions.text_to_be_present_in_element(
        (By.ID, "job-status"), "cancelled"))
    browser.get(f"{server}/jobs?status=cancelled")
    assert browser.find_element(By.ID, f"job-{jobs.pending}").find_element(
        By.CSS_SELECTOR, "td.status").text == "cancelled"
    rows = db.execute("SELECT id, status FROM jobs WHERE id IN (%s, %s) ORDER BY id",
                      [jobs.failed, jobs.pending]).fetchall()
    assert rows == [{"id": jobs.failed, "status": "pending"},
                    {"id": jobs.pending, "status": "cancelled"}]


def test_an_action_without_the_csrf_token_is_refused(
        browser: webdriver.Chrome, server: str, jobs: Jobs,
        db: psycopg.Connection[DictRow]) -> None:
    """A form stripped of its CSRF field is refused with 403 and changes nothing."""
    browser.get(f"{server}/jobs/{jobs.failed}")
    browser.execute_script("""
        const form = document.getElementById('action-retry').form;
        form.querySelector('input[name=csrf_token]').remove();
        delete form.dataset.confirm;
        form.submit();
    """)
    message = wait(browser).until(expected_conditions.presence_of_element_located(
        (By.ID, "error-message")))
    assert "CSRF" in message.text and browser.find_element(By.TAG_NAME, "h1").text == "403"
    row = db.execute("SELECT status FROM jobs WHERE id = %s", [jobs.failed]).fetchone()
    assert row == {"status": "failed"}


def test_bulk_retry_is_counted_then_confirmed(
        browser: webdriver.Chrome, server: str, queue: pgbaton.Queue,
        db: psycopg.Connection[DictRow]) -> None:
    """Filter failed jobs of a task, count them, confirm: exactly those are retried."""
    for n in range(4):
        queue.enqueue("charge", {"n": n}, max_attempts=1)
    for claim in queue.claim("w", limit=10):
        queue.fail(claim, "declined")
    browser.get(f"{server}/jobs?status=failed&task=charge")
    browser.find_element(By.ID, "bulk-preview").click()
    count = wait(browser).until(expected_conditions.presence_of_element_located(
        (By.ID, "bulk-count")))
    assert count.text.startswith("4 jobs would change now")
    browser.find_element(By.ID, "bulk-confirm").click()
    done = wait(browser).until(expected_conditions.presence_of_element_located(
        (By.ID, "bulk-changed")))
    assert done.text == "retry: 4 jobs changed."
    row = db.execute("SELECT count(*) AS n FROM jobs WHERE status = 'pending'").fetchone()
    assert row == {"n": 4}


def test_the_overview_updates_live(*, browser: webdriver.Chrome, server: str, jobs: Jobs,
                                   queue: pgbaton.Queue, tmp_path: Path,
                                   db: psycopg.Connection[DictRow]) -> None:
    """The charts draw the last hour's work; a job enqueued while the page is open
    appears without a reload (the NOTIFY wakes the server-sent stream)."""
    # Minutes 1 to 57 ago: still inside the chart's hour if a minute turns meanwhile.
    for ago in range(1, 58):
        finish(db, 20 + (ago * 7) % 13 + (40 - ago if ago < 40 else 0), ago, queue="mail",
               wait=0.5 + (ago % 9) / 4)
        if ago % 11 == 3:
            finish(db, 4, ago, status="failed", queue="mail")
    browser.get(server + "/")
    bars = browser.find_elements(By.CSS_SELECTOR, '[data-queue="mail"] svg rect.done')
    assert len(bars) == 57 + 1  # and the minute of the fixture's done job of "mail"
    assert browser.find_elements(By.CSS_SELECTOR, '[data-queue="mail"] svg rect.failed')
    wait(browser).until(expected_conditions.text_to_be_present_in_element(
        (By.ID, "live-state"), "live"))
    browser.execute_script("document.body.dataset.marker = 'not reloaded'")
    with pytest.raises(NoSuchElementException):
        browser.find_element(By.CSS_SELECTOR, '[data-queue="arrived-live"]')
    queue.enqueue("late", {}, queue="arrived-live")
    wait(browser).until(expected_conditions.presence_of_element_located(
        (By.CSS_SELECTOR, '[data-queue="arrived-live"] dd.pending')))
    assert browser.execute_script("return document.body.dataset.marker") == "not reloaded"
    screenshot(browser, "dashboard-overview.png", tmp_path)


def test_select_rows_and_act_on_them_by_clicking(
        browser: webdriver.Chrome, server: str, queue: pgbaton.Queue,
        db: psycopg.Connection[DictRow]) -> None:
    """Check two failed rows of three: the buttons wake with "2 selected"; Retry asks
    "Retry 2 jobs with fresh attempts?"; confirming retries exactly those two. The
    state tabs count the failed jobs, and a click on a tab filters the list."""
    failed = [queue.enqueue("charge", {"n": n}, max_attempts=1) for n in range(3)]
    for claim in queue.claim("w", limit=10):
        queue.fail(claim, "card declined by the issuing bank")
    browser.get(f"{server}/jobs")
    assert browser.find_element(By.CSS_SELECTOR, "#tab-failed .count").text == "3"
    assert not browser.find_element(By.ID, "selected-retry").is_enabled()
    for job_id in failed[:2]:
        browser.find_element(By.CSS_SELECTOR, f"#job-{job_id} input.select").click()
    assert browser.find_element(By.ID, "selected-count").text == "2 selected"
    browser.find_element(By.ID, "selected-retry").click()
    question = wait(browser).until(expected_conditions.presence_of_element_located(
        (By.ID, "bulk-question")))
    assert question.text == "Retry 2 jobs with fresh attempts?"
    browser.find_element(By.ID, "bulk-confirm").click()
    done = wait(browser).until(expected_conditions.presence_of_element_located(
        (By.ID, "bulk-changed")))
    assert done.text == "retry: 2 jobs changed."
    rows = db.execute("SELECT id, status FROM jobs ORDER BY id").fetchall()
    assert rows == [{"id": failed[0], "status": "pending"},
                    {"id": failed[1], "status": "pending"},
                    {"id": failed[2], "status": "failed"}]
    browser.get(f"{server}/jobs")
    browser.find_element(By.ID, "select-all").click()
    assert browser.find_element(By.ID, "selected-count").text == "3 selected"
    browser.find_element(By.ID, "tab-failed").click()
    wait(browser).until(expected_conditions.url_contains("status=failed"))
    assert [e.text for e in browser.find_elements(By.CSS_SELECTOR, "td.status")] == ["failed"]
    assert browser.find_element(By.ID, "tab-failed").get_attribute("aria-current") == "page"
    # The tabs' counts are live: a job enqueued meanwhile is counted without a reload.
    browser.execute_script("document.body.dataset.marker = 'not reloaded'")
    queue.enqueue("charge", {"n": 3})
    wait(browser).until(expected_conditions.text_to_be_present_in_element(
        (By.CSS_SELECTOR, "#tab-pending .count"), "3"))
    assert browser.execute_script("return document.body.dataset.marker") == "not reloaded"


def test_times_hover_zero_is_not_red_and_errors_wrap_at_spaces(
        browser: webdriver.Chrome, server: str, queue: pgbaton.Queue) -> None:
    """A time reads "5 min ago" with the absolute one in its title; a queue without
    failed jobs shows its 0 in the page's ink, not in red; an error wraps between
    words (a cell too narrow for it breaks no word that would fit on a line)."""
    message = "the payment provider answered with a timeout " * 6
    job = queue.enqueue("charge", max_attempts=1)
    [claim] = queue.claim("w", limit=1)
    queue.fail(claim, message)
    queue.enqueue("send", queue="quiet")
    browser.get(f"{server}/jobs")
    stamp = browser.find_element(By.CSS_SELECTOR, f"#job-{job} td.when time")
    assert stamp.text in ("just now",) or stamp.text.endswith(" s ago")
    assert stamp.get_attribute("title")[:4].isdigit() and "." not in stamp.get_attribute(
        "title")
    cell = browser.find_element(By.CSS_SELECTOR, f"#job-{job} td.err")
    assert cell.value_of_css_property("word-break") != "break-all"
    # Every line of the wrapped error ends at a word's end: the text's words are whole.
    lines = browser.execute_script("""
        const cell = arguments[0], range = document.createRange(), text = cell.firstChild;
        const tops = new Map();
        for (let i = 0; i < text.length; i++) {
            range.setStart(text, i); range.setEnd(text, i + 1);
            const top = Math.round(range.getBoundingClientRect().top);
            tops.set(top, (tops.get(top) || "") + text.data[i]);
        }
        return Array.from(tops.values());
    """, cell)
    assert len(lines) > 1, "the error should wrap in its cell"
    words = set(message.split())
    for line in lines[:-1]:
        assert line.split()[-1] in words | {"RuntimeError:", "charge:"}, lines
    browser.get(f"{server}/")
    # Read at once: the live overview may replace the panel between two reads.
    zero, red = browser.execute_script("""
        return ['quiet', 'default'].map((name) => {
            const a = document.querySelector(`[data-queue="${name}"] dd.failed a`);
            return [a.textContent, getComputedStyle(a).color];
        });
    """)
    assert (zero[0], red[0]) == ("0", "1")
    assert zero[1] != red[1], "a zero failed count is drawn in the failed jobs' red"


@pytest.fixture
def app_server(dsn: str, schema: str, queue: pgbaton.Queue,
               monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, pgbaton.App]]:
    """The dashboard of an App (create_app(app=...)): tasks checked on the periodic
    page, listed on /tasks; its @app.periodic written as a starting worker writes it."""
    import uvicorn

    from pgbaton.schedules import code_definitions

    for name in ("PGBATON_DASHBOARD_TOKEN", "PGBATON_DASHBOARD_USER",
                 "PGBATON_DASHBOARD_PASSWORD"):
        monkeypatch.delenv(name, raising=False)
    app = pgbaton.App(dsn, schema=schema)

    @app.task(queue="reports", max_attempts=3)
    def report(region: str, days: int = 1) -> None: ...

    @app.task(queue="billing")
    def send_invoice(customer_id: int, amount_cents: int, currency: str = "EUR") -> None: ...

    @app.task
    def purge_sessions() -> None: ...

    @app.periodic("0 6 * * 1", timezone="America/New_York", schedule="weekly-digest")
    def weekly_digest() -> None: ...

    now = dt.datetime.now(dt.UTC)
    queue.sync_code_schedules(code_definitions(app.periodics, now, 9), now=now,
                              by="worker web-1:4242:a1b2c3")
    port = free_port()
    uvicorn_server = uvicorn.Server(uvicorn.Config(
        create_app(app=app), host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=uvicorn_server.run, daemon=True)
    thread.start()
    for _ in range(int(WAIT / 0.05)):
        if uvicorn_server.started:
            break
        threading.Event().wait(0.05)
    assert uvicorn_server.started, "uvicorn did not start"
    yield f"http://127.0.0.1:{port}", app
    uvicorn_server.should_exit = True
    thread.join(WAIT)
    app.queue.close()


def schedule_row(browser: webdriver.Chrome, name: str) -> WebElement:
    return browser.find_element(
        By.XPATH, f"//tr[starts-with(@id, 'schedule-')][td[1][starts-with("
                  f"normalize-space(.), '{name}')]]")


def click_and_confirm(browser: webdriver.Chrome, element: WebElement) -> None:
    element.click()
    wait(browser).until(expected_conditions.alert_is_present()).accept()


def fill(form: WebElement, **fields: str) -> None:
    for field, value in fields.items():
        box = form.find_element(By.NAME, field)
        box.clear()
        box.send_keys(value)


def open_edit(browser: webdriver.Chrome, name: str, cron: str) -> None:
    """Open a schedule's edit form and type a new cron into it (not saved yet)."""
    row = schedule_row(browser, name)
    row.find_element(By.TAG_NAME, "summary").click()
    fill(row, cron=cron)


def save(browser: webdriver.Chrome, name: str) -> None:
    schedule_row(browser, name).find_element(By.XPATH, ".//button[text()='save']").click()


def test_schedules_by_clicking(
        browser: webdriver.Chrome, app_server: tuple[str, pgbaton.App],
        db: psycopg.Connection[DictRow], tmp_path: Path) -> None:
    """Add a schedule with the form, pause, resume, run it now and remove it by
    clicking (each confirmed); the code schedule offers no edit. Screenshots of
    /periodic and /tasks for the docs."""
    server, app = app_server
    browser.get(f"{server}/periodic")
    form = browser.find_element(By.CSS_SELECTOR, 'form[action="/periodic/add"]')
    fill(form, name="nightly-report", cron="30 2 * * *", timezone="Europe/Berlin",
         task="report", args='{"region": "eu"}', priority="5")
    form.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    wait(browser).until(expected_conditions.url_contains("done=add"))
    assert schedule_row(browser, "nightly-report").text.count(" 02:30:00+0") == 5
    (added,) = db.execute("SELECT * FROM schedules WHERE name = 'nightly-report'").fetchall()
    assert (added["args"], added["priority"], added["updated_by"][:10]) == (
        {"region": "eu"}, 5, "dashboard:")
    for button, done in (("pause", "pause"), ("resume", "resume"), ("run now", "run-now")):
        click_and_confirm(browser, schedule_row(browser, "nightly-report").find_element(
            By.XPATH, f".//button[text()='{button}']"))
        wait(browser).until(expected_conditions.url_contains(f"done={done}"))
        if button == "pause":
            assert "paused" in schedule_row(browser, "nightly-report").text
    job_id = db.execute("SELECT last_job_id FROM schedules WHERE name = "
                        "'nightly-report'").fetchone()["last_job_id"]
    link = schedule_row(browser, "nightly-report").find_element(By.LINK_TEXT, str(job_id))
    assert link.get_attribute("href").endswith(f"/jobs/{job_id}")
    code = schedule_row(browser, "weekly-digest")
    assert "defined in code: edit it there" in code.text and "(code)" in code.text
    app.schedules.add("session-purge", "*/15 * * * *", "purge_sessions", catch_up="all",
                      catch_up_limit=4, by="cli:ops")
    app.schedules.pause("session-purge", by="cli:ops")
    browser.get(f"{server}/periodic")
    assert "paused" in schedule_row(browser, "session-purge").text
    screenshot(browser, "dashboard-periodic.png", tmp_path)
    click_and_confirm(browser, schedule_row(browser, "nightly-report").find_element(
        By.XPATH, ".//button[text()='remove']"))
    wait(browser).until(expected_conditions.url_contains("done=remove"))
    assert db.execute("SELECT name FROM schedules ORDER BY name").fetchall() == [
        {"name": "session-purge"}, {"name": "weekly-digest"}]
    browser.get(f"{server}/tasks")
    assert browser.find_element(By.TAG_NAME, "h1").text == "Tasks"
    names = [e.text for e in browser.find_elements(By.CSS_SELECTOR, "table.jobs td:first-child")]
    assert names == ["purge_sessions", "report", "send_invoice", "weekly_digest"]
    screenshot(browser, "dashboard-tasks.png", tmp_path)


def test_two_operators_editing_one_schedule_at_once(
        browser: webdriver.Chrome, app_server: tuple[str, pgbaton.App],
        db: psycopg.Connection[DictRow]) -> None:
    """Two operators open the edit form of one schedule, in two tabs; the second to
    save is told the schedule changed since they opened it (a 409), and the first
    one's change stands; back on the page, read again, their edit goes through."""
    server, app = app_server
    app.schedules.add("nightly-report", "30 2 * * *", "report", {"region": "eu"})
    browser.get(f"{server}/periodic")
    first = browser.current_window_handle
    open_edit(browser, "nightly-report", "0 4 * * *")
    browser.switch_to.new_window("tab")
    browser.get(f"{server}/periodic")
    open_edit(browser, "nightly-report", "15 3 * * *")
    save(browser, "nightly-report")
    wait(browser).until(expected_conditions.url_contains("done=edit"))
    browser.switch_to.window(first)
    save(browser, "nightly-report")
    message = wait(browser).until(expected_conditions.presence_of_element_located(
        (By.ID, "error-message")))
    assert browser.find_element(By.TAG_NAME, "h1").text == "409"
    assert "changed since you opened it" in message.text
    assert db.execute("SELECT cron FROM schedules WHERE name = 'nightly-report'"
                      ).fetchone()["cron"] == "15 3 * * *"  # the first save stands
    browser.find_element(By.ID, "back").click()
    assert "03:15:00+0" in schedule_row(browser, "nightly-report").text
    open_edit(browser, "nightly-report", "0 4 * * *")
    save(browser, "nightly-report")
    wait(browser).until(expected_conditions.url_contains("done=edit"))
    assert db.execute("SELECT cron FROM schedules WHERE name = 'nightly-report'"
                      ).fetchone()["cron"] == "0 4 * * *"
