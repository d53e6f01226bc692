"""The pytest plugin as a user meets it: a project of its own, run by pytester in a
subprocess, with pgbaton installed (its entry point registers the plugin)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

EXAMPLE_PROJECT = Path(__file__).parent / "example_project"


@pytest.fixture
def project(pytester: pytest.Pytester, server_dsn: str,
            monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    """The example project of docs/howto/testing.md, on the suite's server."""
    shutil.copytree(EXAMPLE_PROJECT, pytester.path, dirs_exist_ok=True,
                    ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setenv("PGBATON_TEST_DSN", server_dsn)
    return pytester


def test_the_example_project_passes_with_every_helper(project: pytest.Pytester) -> None:
    """Each helper of pgbaton.testing, used as docs/howto/testing.md shows it, passes."""
    result = project.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=11)


def test_the_plugin_is_off_until_asked_for(project: pytest.Pytester) -> None:
    """Without `pgbaton = true` the fixtures do not exist; --pgbaton turns them on."""
    ini = project.path / "pytest.ini"
    ini.write_text(ini.read_text().replace("pgbaton = true\n", ""))
    off = project.runpytest_subprocess("-p", "no:cacheprovider", "test_enqueued.py")
    off.assert_outcomes(errors=2)
    off.stdout.fnmatch_lines(["*fixture 'pgbaton_app' not found*"])
    on = project.runpytest_subprocess("-p", "no:cacheprovider", "--pgbaton", "test_enqueued.py")
    on.assert_outcomes(passed=2)


def test_a_failing_assertion_says_what_is_pending(project: pytest.Pytester) -> None:
    """assert_enqueued fails with the pending jobs of the task in its message."""
    project.makepyfile(test_failing="""
        from pgbaton.testing import assert_enqueued
        from shop_jobs import charge

        def test_wrong_amount(pgbaton_app):
            charge.defer(customer_id=3, amount=100)
            assert_enqueued(charge, args={"amount": 99})
    """)
    result = project.runpytest_subprocess("-p", "no:cacheprovider", "test_failing.py")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([
        "*expected at least one job of task 'charge' with args {'amount': 99} pending, "
        "found 0; pending jobs of this task: #1 queue 'default' args *'amount': 100*",
    ])


def test_an_app_setting_that_names_nothing_is_one_clear_error(
    project: pytest.Pytester,
) -> None:
    """A pgbaton_app setting that cannot be loaded is a usage error naming it."""
    ini = project.path / "pytest.ini"
    ini.write_text(ini.read_text().replace("shop_jobs:app", "shop_jobs:missing"))
    result = project.runpytest_subprocess("-p", "no:cacheprovider", "test_enqueued.py")
    result.stdout.fnmatch_lines(["*pgbaton_app = 'shop_jobs:missing' cannot be loaded*"])
    assert result.ret != 0
