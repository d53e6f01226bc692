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
