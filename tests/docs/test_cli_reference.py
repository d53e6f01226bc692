"""The docs site's CLI reference, read from the built page: every command and option of
`pgbaton` is there, no default reads as click's internal sentinel, and no command's
summary is cut off mid-sentence."""

from __future__ import annotations

import html
import os
import re
import subprocess
import sys
from pathlib import Path

import click
import pytest

from pgbaton.cli import main

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def page(tmp_path_factory: pytest.TempPathFactory) -> str:
    # .ci/run names the site its `make docs` has just built (the same command, --strict),
    # so that each of its lanes does not build it again.
    built = os.environ.get("PGBATON_DOCS_SITE")
    if built:
        site = Path(built)
    else:
        site = tmp_path_factory.mktemp("site")
        subprocess.run([sys.executable, "-m", "mkdocs", "build", "--quiet", "--strict",
                        "--site-dir", str(site)], cwd=ROOT, check=True, timeout=300,
                       env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    text = (site / "reference" / "cli" / "index.html").read_text()
    return html.unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", text)))


def _commands() -> list[tuple[click.Context, click.Command]]:
    found = []

    def walk(command: click.Command, ctx: click.Context) -> None:
        found.append((ctx, command))
        if isinstance(command, click.Group):
            for name in command.list_commands(ctx):
                sub = command.get_command(ctx, name)
                assert sub is not None
                walk(sub, click.Context(sub, info_name=name, parent=ctx))

    walk(main, click.Context(main, info_name="pgbaton"))
    return found


def test_no_default_reads_as_a_sentinel(page: str) -> None:
    assert "Sentinel" not in page
    assert "UNSET" not in page


def test_every_command_and_option_is_on_the_page(page: str) -> None:
    commands = _commands()
    assert len(commands) > 20
    for ctx, command in commands:
        assert ctx.command_path in page
        for param in command.get_params(ctx):
            for name in getattr(param, "opts", []):
                if name.startswith("-"):
                    assert f" {name} " in page or f" {name}," in page, (ctx.command_path,
                                                                       name)


def test_each_summary_is_a_whole_sentence(page: str) -> None:
    """The list of commands gives each one's first sentence whole: the demo's once
    read "in a schema of its own: the", cut at the line break of its help text."""
    for ctx, command in _commands()[1:]:
        summary = command.get_short_help_str(limit=300)
        assert summary.endswith((".", ")")), (ctx.command_path, summary)
        listed = f"{ctx.info_name} : {' '.join(summary.split())}"
        assert listed in page, (ctx.command_path, listed)


def test_a_shown_default_is_the_real_one(page: str) -> None:
    assert re.search(r"--concurrency integer Jobs at once per process\. 10 ", page), (
        page[page.find("--concurrency"):][:200])
