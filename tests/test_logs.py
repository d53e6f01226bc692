"""The worker's log output: JSON objects that carry a record's extra fields, readable text."""

from __future__ import annotations

import io
import json
import logging

import pytest

from pgbaton import logs


@pytest.fixture
def captured():
    """Configure logging into a buffer; restore the root logger afterwards."""
    root = logging.getLogger()
    saved = (root.handlers[:], root.level)
    buffer = io.StringIO()
    yield buffer
    root.handlers[:], root.level = saved


def test_json_lines_carry_the_extra_fields(captured):
    """One object a line, with job_id, task, queue, attempt and error_type as given."""
    logs.configure("INFO", "json", captured)
    extra = {"job_id": 7, "task": "charge", "queue": "billing", "attempt": 2,
             "error_type": "ValueError"}
    logging.getLogger("pgbaton.worker").warning("job %s failed", 7, extra=extra)
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        logging.getLogger("shop").exception("handler crashed")
    first, second = (json.loads(line) for line in captured.getvalue().splitlines())
    assert first == {"time": first["time"], "level": "WARNING", "logger": "pgbaton.worker",
                     "message": "job 7 failed", **extra}
    assert (second["level"], second["logger"]) == ("ERROR", "shop")
    assert "RuntimeError: boom" in second["exception"]


def test_text_lines_are_readable_with_the_extra_fields_after(captured):
    """`time LEVEL logger: message key=value`."""
    logs.configure("INFO", "text", captured)
    logging.getLogger("pgbaton.worker").info("job lost", extra={"job_id": 3})
    line = captured.getvalue().strip()
    assert line.endswith(" INFO pgbaton.worker: job lost job_id=3")


def test_the_level_filters(captured):
    """Below the chosen level nothing is written."""
    logs.configure("WARNING", "text", captured)
    logging.getLogger("pgbaton").info("quiet")
    logging.getLogger("pgbaton").warning("loud")
    assert [line.split(": ", 1)[1] for line in captured.getvalue().splitlines()] == ["loud"]


@pytest.mark.parametrize(("level", "log_format"), [("LOUD", "text"), ("INFO", "xml")])
def test_unknown_settings_are_refused(level, log_format):
    """A level or format that does not exist is an error naming it."""
    with pytest.raises(ValueError, match=r"LOUD|xml"):
        logs.configure(level, log_format, io.StringIO())
