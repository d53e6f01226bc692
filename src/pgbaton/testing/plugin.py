"""pgbaton's pytest plugin: loaded with pytest through its entry point, and off until a
project asks for it, with `pgbaton = true` in its pytest configuration or `--pgbaton`.

Once on, it adds the fixtures of pgbaton.testing.fixtures; until then it adds only its
options, so a project that installs pgbaton gets no fixture it did not ask for.
"""

from __future__ import annotations

import pytest

FIXTURES_PLUGIN = "pgbaton.testing.fixtures"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("pgbaton")
    group.addoption("--pgbaton", action="store_true", default=False,
                    help="turn on pgbaton's fixtures (pgbaton_app, pgbaton_queue, ...)")
    parser.addini("pgbaton", type="bool", default=False,
                  help="turn on pgbaton's fixtures (pgbaton_app, pgbaton_queue, ...)")
    parser.addini("pgbaton_app", default="",
                  help="MODULE:ATTRIBUTE of the App that the pgbaton_app fixture points "
                       "at the test schema")


def pytest_configure(config: pytest.Config) -> None:
    if config.getoption("--pgbaton") or config.getini("pgbaton"):
        config.pluginmanager.import_plugin(FIXTURES_PLUGIN)
