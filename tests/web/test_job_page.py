"""The job page as an operator reads it: the job's fields first, then each attempt's
error, its traceback with the frames of pgbaton's own worker folded away."""

from __future__ import annotations

import re

import pgbaton
from pgbaton import tracebacks
from pgbaton.testing import drain


def test_the_fields_come_first_and_pgbatons_frames_are_folded(client, dsn, schema) -> None:
    app = pgbaton.App(dsn, schema=schema)

    @app.task(max_attempts=1)
    def charge(amount: int) -> None:
        raise RuntimeError(f"card declined for {amount}")

    job = charge.enqueue({"amount": 5})
    [outcome] = drain(app)
    assert outcome.status == "failed"
    page = client.get(f"/jobs/{job}").text
    assert page.index('id="field-task"') < page.index("<h2>Errors (1)</h2>")
    [traceback] = re.findall(r'<pre class="traceback">(.*?)</pre>', page, re.S)
    folded = re.findall(r'<details class="own-frames"><summary>(\d+) frames? of '
                        r"pgbaton(?:'|&#39;)s worker</summary>(.*?)</details>", traceback, re.S)
    assert folded, traceback
    for _, frames in folded:
        assert "pgbaton" in frames and "test_job_page.py" not in frames
    unfolded = re.sub(r"<details.*?</details>", "", traceback, flags=re.S)
    assert "test_job_page.py" in unfolded and "in charge" in unfolded
    assert "RuntimeError: card declined for 5" in unfolded


def test_parts_give_back_the_text_and_fold_only_pgbatons_frames() -> None:
    text = (
        "Traceback (most recent call last):\n"
        '  File "/srv/venv/lib/python3.13/site-packages/pgbaton/worker/executor.py", '
        "line 300, in _run\n"
        "    result = await handler(**args)\n"
        "             ^^^^^^^^^^^^^^^^^^^^^\n"
        '  File "C:\\app\\src\\pgbaton\\middleware.py", line 20, in call\n'
        "    return await nxt()\n"
        '  File "/home/me/shop/jobs.py", line 12, in charge\n'
        '    raise ValueError("declined")\n'
        "ValueError: declined\n"
        "\n"
        "During handling of the above exception, another exception occurred:\n"
        '  File "/home/me/pgbaton-tests/tests/test_x.py", line 1, in t\n'
        "    x()\n"
        "KeyError: 'x'\n"
    )
    parts = tracebacks.parts(text)
    assert "".join(part.text for part in parts) == text
    assert [(part.own, part.frames) for part in parts] == [(False, 0), (True, 2), (False, 0)]
    assert tracebacks.folded(text).splitlines()[1] == "  [2 frames of pgbaton's worker]"
    assert tracebacks.parts("") == []
    assert tracebacks.folded("no traceback at all") == "no traceback at all"


def test_the_page_shows_how_often_the_job_snoozed(client, dsn, schema) -> None:
    """A snoozed job's page shows its snoozes beside its attempts."""
    app = pgbaton.App(dsn, schema=schema)

    @app.task
    def poll() -> None:
        raise pgbaton.Snooze(3600, note="not yet")

    job = poll.enqueue()
    [outcome] = drain(app)
    assert (outcome.status, outcome.snoozes) == ("pending", 1)
    page = client.get(f"/jobs/{job}").text
    assert re.search(r'<td id="field-snoozes">1</td>', page), page
    assert re.search(r'<td id="field-attempts">0</td>', page)
def test_progress_and_log_lines_show_by_run_as_text(client, queue) -> None:
    """A running job's page shows its progress and each run's lines in a region the
    page reads again while it runs; a line that looks like HTML or SQL is shown as
    text, never markup; the list of running jobs shows the progress too."""
    hostile = "<script>alert(1)</script><b>bold</b> '); DROP TABLE jobs; --"
    job = queue.enqueue("report", max_attempts=3)
    [first] = queue.claim("w1")
    entry = {"at": "2026-01-01T00:00:00+00:00", "level": "ERROR", "logger": "<i>app</i>",
             "message": hostile}
    assert queue.write_logs([(first, [entry], 2)]) == [True]
    assert queue.fail(first, "boom", retry_in=0)
    [second] = queue.claim("w1")
    assert queue.write_logs([(second, [{**entry, "message": "second try"}], 0)]) == [True]
    assert queue.write_progress([(second, 0.4, "<em>rows</em> & more")]) == [True]
    page = client.get(f"/jobs/{job}").text
    assert "<script>alert(1)</script>" not in page and "<b>bold</b>" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;&lt;b&gt;bold&lt;/b&gt;" in page
    assert "DROP TABLE jobs" in page and "&lt;i&gt;app&lt;/i&gt;" in page
    assert page.index('id="logs-run-1"') < page.index('id="logs-run-2"')
    assert "attempt 1, run 1</strong>" in page and "attempt 2, run 2</strong>" in page
    assert "... 2 more lines not kept" in page
    assert '<section id="job-progress" data-refresh="2">' in page
    assert '<progress max="1" value="0.4' in page and "40%" in page
    assert "&lt;em&gt;rows&lt;/em&gt; &amp; more" in page
    listing = client.get("/jobs?status=running").text
    assert 'id="job-rows" data-refresh="2"' in listing
    assert "&lt;em&gt;rows&lt;/em&gt; &amp; more" in listing and "<em>rows</em>" not in listing
    assert queue.complete(second)
    page = client.get(f"/jobs/{job}").text
    assert '<section id="job-progress">' in page  # ended: nothing more to read
    quiet = queue.enqueue("quiet")
    assert "Its handler has reported none." in client.get(f"/jobs/{quiet}").text
