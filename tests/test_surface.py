"""The public surface: exports, the generated sync twin, and no-I/O helpers."""

from __future__ import annotations

import inspect
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

import pgbaton
from pgbaton import _checks, _sql, models

ROOT = Path(__file__).resolve().parents[1]


def test_all_lists_every_public_name_sorted():
    """__all__ is sorted and holds every public name the package defines."""
    public = {
        name for name, value in vars(pgbaton).items()
        if not name.startswith("_") and not isinstance(value, ModuleType)
    }
    assert pgbaton.__all__ == sorted(pgbaton.__all__)
    assert public == set(pgbaton.__all__)


def test_public_classes_report_the_public_module():
    """Classes say `pgbaton.Queue`, not a private module, in reprs and tracebacks."""
    assert pgbaton.Queue.__module__ == "pgbaton"
    assert pgbaton.SchemaOutOfDate.__module__ == "pgbaton"


def test_generated_sync_twins_are_up_to_date():
    """queue.py and _database.py are exactly what tools/async_to_sync.py makes of their sources."""
    result = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "async_to_sync.py"), "--check"],
        capture_output=True, text=True, check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_sync_and_async_queues_offer_the_same_methods():
    """One source of truth: the twins have the same public methods, their own and those
    of their parts (_queue/), each sync where the other is async."""
    def methods(cls: type) -> dict[str, bool]:
        return {n: inspect.iscoroutinefunction(getattr(cls, n)) for n in dir(cls)
                if not n.startswith("_") and callable(getattr(cls, n))}

    sync, async_ = methods(pgbaton.Queue), methods(pgbaton.AsyncQueue)
    assert sync.keys() == async_.keys()
    assert len(sync) >= 80  # the parts' methods are seen (vars() saw none of them)
    assert "enqueue" in sync and "add_schedule" in sync and "claim_batch" in sync
    # Every method of the async face that does I/O is a coroutine there and plain here.
    assert not any(sync.values())
    assert {n for n, coro in async_.items() if coro} >= {"enqueue", "claim_batch", "get"}


def test_backoff_grows_and_is_capped():
    """Retry delays double per attempt, with jitter, and never pass the cap."""
    for attempts in range(1, 30):
        ceiling = min(models.RETRY_CAP_SECONDS, 2.0 ** (attempts - 1))
        assert ceiling / 2 <= _checks.retry_delay(attempts, None) <= ceiling
    assert _checks.retry_delay(9, 2.5) == 2.5


def test_every_named_query_is_loaded_once():
    """Every `-- name:` header of the SQL files becomes one statement, bound to the schema
    asked for (a header the parser missed, or merged into its neighbour, fails this)."""
    folder = Path(_sql.__file__).parent / "sql"
    headers = [
        line for name in _sql.QUERY_FILES
        for line in (folder / name).read_text().splitlines() if line.startswith("-- name:")
    ]
    names = list(_sql.queries("s1"))
    assert len(names) == len(headers) >= 20
    assert '"s1".jobs' in _sql.queries("s1")["job_claim_many"]
    assert "__schema__" not in "".join(_sql.queries("s1").values())


def test_no_named_query_holds_a_lone_percent_sign():
    """psycopg reads every `%` of a statement sent with parameters, its comments included,
    as the start of a placeholder: a `7%` in a comment made every claim fail with
    "incomplete placeholder". Each `%` is a placeholder's, or doubled."""
    for name, text in _sql.queries("s1").items():
        rest = re.sub(r"%\(\w+\)[sbt]|%%", "", text)
        lines = [line.strip() for line in rest.splitlines() if "%" in line]
        assert not lines, f"{name}: a lone % in {lines}"


@pytest.mark.parametrize("bad", ["Public", "1abc", "a-b", 'x"; drop', "", "a" * 60])
def test_schema_names_that_are_not_plain_identifiers_are_refused(bad):
    """The schema name is spliced into SQL, so anything but a plain identifier is refused."""
    with pytest.raises(pgbaton.ConfigurationError, match="schema name"):
        _sql.check_schema_name(bad)
