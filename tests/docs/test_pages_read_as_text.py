"""Pages a new user reads on GitHub as often as on the built site show their examples
in full, and each example that names a file of the repository is that file word for
word, so it cannot go stale."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FENCE = re.compile(r"^```\w*\n# (?P<path>\S+)\n(?P<body>.*?)^```$", re.S | re.M)


def _examples(page: str) -> list[tuple[str, str]]:
    return [(m["path"], m["body"]) for m in FENCE.finditer((ROOT / page).read_text())]


def test_the_testing_page_has_no_include_lines() -> None:
    assert "--8<--" not in (ROOT / "docs/howto/testing.md").read_text()


def test_the_testing_page_shows_every_file_of_the_example_project() -> None:
    shown = {path for path, _ in _examples("docs/howto/testing.md")}
    project = ROOT / "tests/testing/example_project"
    files = {str(p.relative_to(ROOT)) for p in project.iterdir()
             if p.suffix in (".py", ".ini") and p.name not in ("__init__.py", "conftest.py")}
    assert shown == files


@pytest.mark.parametrize(("path", "body"), _examples("docs/howto/testing.md"))
def test_each_example_is_its_file_word_for_word(path: str, body: str) -> None:
    assert body == (ROOT / path).read_text().rstrip("\n") + "\n", path
