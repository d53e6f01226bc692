"""tools/async_to_sync.py: the sync twin of a small module with the hard cases, and
`--check` on a twin that is current and on one that is stale."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TOOL = ROOT / "tools" / "async_to_sync.py"

spec = importlib.util.spec_from_file_location("async_to_sync", TOOL)
assert spec is not None and spec.loader is not None
async_to_sync = importlib.util.module_from_spec(spec)
sys.modules["async_to_sync"] = async_to_sync  # its dataclass looks itself up there
spec.loader.exec_module(async_to_sync)

SAMPLE = '''\
"""A sample of what the generator meets (async source).

Its docstring says await and AsyncQueue, and keeps saying them.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import AsyncIterator, Callable

import psycopg

from ._database_async import connect as open_connection  # await nothing here
from .sample_async import AsyncQueue


class AsyncSample:
    """Wraps an AsyncQueue; `await sample.run()` runs it."""

    async def __aenter__(self) -> AsyncSample:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close(await self.pending(), wait=await self.patient())

    async def rows(self, pages: AsyncIterator[list[int]]) -> list[list[int]]:
        # await each page: AsyncQueue pages are async iterators
        return [[row async for row in self.expand(page)] async for page in pages
                if await self.keep(page)]

    async def run(self, queue: AsyncQueue, conn: psycopg.AsyncConnection[object]) -> str:
        async with queue.lock() as held, conn.transaction(), self.timer(
            "run"
        ) as timer:
            total = await held.count("await AsyncQueue", json.dumps({"a": 1},
                                                                    indent=2))
        async with (
            open_connection() as first,
            open_connection() as second,
        ):
            await asyncio.sleep(0)
        # sync: skip (a task group has no sync twin here)
        async with asyncio.TaskGroup() as group:
            group.create_task(self.close(0, wait=False))
        if True:  # sync: skip: the timeout is async-only
            async with asyncio.timeout(1):
                await self.close(1, wait=True)
        else:
            self.close(1, wait=True)
        text = await self.say(f"""{await self.name()!r} awaits {{AsyncQueue}}
                              {total} stays where it is""")
        return f"{timer} {text} {first} {second} in AsyncQueue (await)"

    async def stream(self) -> AsyncIterator[int]:
        async for row in self.expand([1]):
            yield row

    def callbacks(self) -> Callable[[], object]:  # sync: skip
        return self.run
'''

# What the generator must write: awaits and asyncs gone in code, names renamed in code
# only, the string and comments as they were but for the explicit `(async source)`,
# `import threading` and `Iterator` back in their sorted places, the continuation line
# under `json.dumps(` still under it, the statements marked `# sync: skip` gone (the
# `if`'s `else:` body kept in its place).
EXPECTED = '''\
# WARNING: generated from sample_async.py by tools/async_to_sync.py: DO NOT EDIT.
# Change sample_async.py and run `make generate`.
"""A sample of what the generator meets (generated sync twin).

Its docstring says await and AsyncQueue, and keeps saying them.
"""

from __future__ import annotations

import json
import sys
import threading
from collections.abc import Callable, Iterator

import psycopg

from ._database import connect as open_connection  # await nothing here
from .sample import Queue


class Sample:
    """Wraps an AsyncQueue; `await sample.run()` runs it."""

    def __enter__(self) -> Sample:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close(self.pending(), wait=self.patient())

    def rows(self, pages: Iterator[list[int]]) -> list[list[int]]:
        # await each page: AsyncQueue pages are async iterators
        return [[row for row in self.expand(page)] for page in pages
                if self.keep(page)]

    def run(self, queue: Queue, conn: psycopg.Connection[object]) -> str:
        with queue.lock() as held, conn.transaction(), self.timer(
            "run"
        ) as timer:
            total = held.count("await AsyncQueue", json.dumps({"a": 1},
                                                              indent=2))
        with (
            open_connection() as first,
            open_connection() as second,
        ):
            time.sleep(0)
        self.close(1, wait=True)
        text = self.say(f"""{self.name()!r} awaits {{AsyncQueue}}
                              {total} stays where it is""")
        return f"{timer} {text} {first} {second} in AsyncQueue (await)"

    def stream(self) -> Iterator[int]:
        for row in self.expand([1]):
            yield row
'''

TWIN = async_to_sync.Twin(
    "sample.py",
    renames={"AsyncQueue": "Queue", "AsyncSample": "Sample", "sample_async": "sample",
             "asyncio.sleep": "time.sleep"},
)


def test_the_twin_of_the_hard_cases():
    """Every hard case at once, compared line by line with the twin written by hand."""
    assert async_to_sync.to_sync(SAMPLE, "sample_async.py", TWIN).splitlines() == (
        EXPECTED.splitlines()
    )


def test_a_skip_mark_on_every_statement_of_a_block_is_refused():
    """A block left empty would not parse: the error says to mark the statement that
    holds the block instead."""
    source = "async def f():\n    # sync: skip\n    await g()\n"
    with pytest.raises(async_to_sync.GenerationError, match="every statement of this block"):
        async_to_sync.to_sync(source, "f_async.py")


def test_the_blank_lines_above_a_dropped_statement_stay():
    """A dropped statement's blank lines go to the statement after it, so that the
    twin's groups stay apart as in the source (ruff wants one after __future__)."""
    source = textwrap.dedent("""\
        from __future__ import annotations

        import asyncio  # sync: skip
        import json
        """)
    assert async_to_sync.to_sync(source, "f_async.py").splitlines()[-3:] == [
        "from __future__ import annotations", "", "import json"]


def test_a_skip_mark_on_an_if_with_elif_is_refused():
    source = textwrap.dedent("""\
        if a:  # sync: skip
            pass
        elif b:
            pass
        else:
            pass
        """)
    with pytest.raises(async_to_sync.GenerationError, match="plain `else:` block"):
        async_to_sync.to_sync(source, "f_async.py")


def run(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(TOOL), *map(str, args)],
        capture_output=True, text=True, timeout=60, check=False,
    )


def test_check_fails_on_a_stale_twin_and_passes_once_generated(tmp_path):
    """--check writes nothing and fails with the diff while the twin is stale; the plain
    run writes it, and --check then passes."""
    source = tmp_path / "small_async.py"
    source.write_text("async def f(conn: AsyncConnection) -> None:\n    await conn.close()\n")
    twin = tmp_path / "small.py"
    stale = "# an old twin\n"
    twin.write_text(stale)

    checked = run("--check", source)
    assert checked.returncode == 1
    assert "stale generated files: small.py; run `make generate`" in checked.stderr
    assert "+def f(conn: Connection) -> None:" in checked.stdout
    assert twin.read_text() == stale

    assert run(source).returncode == 0
    assert twin.read_text().endswith("def f(conn: Connection) -> None:\n    conn.close()\n")
    again = run("--check", source)
    assert (again.returncode, again.stdout, again.stderr) == (0, "", "")


def test_the_package_twins_are_current():
    """What `make lint` checks: queue.py and _database.py are what their sources make."""
    checked = run("--check")
    assert checked.returncode == 0, checked.stdout + checked.stderr
