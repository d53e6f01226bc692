"""The dashboard as a person uses it: Debian's Chromium, headless, driven by Selenium.

Nothing downloads a browser: the binary and its driver are /usr/bin/chromium and
/usr/bin/chromedriver (`apt-get install chromium chromium-driver`), given to Selenium
explicitly, with Selenium Manager told to stay offline. Without them the tests skip.
With PGBATON_SCREENSHOTS=DIR the overview and job screenshots are written there (the
docs' come from `PGBATON_SCREENSHOTS=docs/images pytest tests/web/test_browser.py`).
"""

from __future__ import annotations

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

from .conftest import HOSTILE, Jobs
from .test_metrics import free_port
from .test_store import finish

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
                          tmp_path: Path) -> None:
    """Each page of the URL contract renders, with the jobs of every state, and hostile
    job data stays text."""
    for path, heading in (("/", "Overview"), ("/jobs", "Jobs"), ("/queues", "Queues"),
                          ("/periodic", "Periodic jobs"), ("/health", "Health"),
                          (f"/jobs/{jobs.failed}", f"Job {jobs.failed}")):
        browser.get(server + path)
        assert browser.find_element(By.TAG_NAME, "h1").text.startswith(heading), path
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
