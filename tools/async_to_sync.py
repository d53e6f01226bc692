"""Generate the sync twins of pgbaton's async modules (queue_async.py -> queue.py).

The async module is the one source of truth. This rewrite is textual, token-aware
enough for our code: it drops `await`, turns `async def/with/for` into their plain
forms and renames a short list of names. Comments and layout survive, so the twin
reads like hand-written code. `--check` fails when a checked-in twin is stale.
"""

from __future__ import annotations

import argparse
import difflib
import re
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "src" / "pgbaton"

# source file -> generated file
TWINS = {
    "queue_async.py": "queue.py",
    "_database_async.py": "_database.py",
}

# Whole names (identifiers or dotted names) replaced as words.
RENAMES = {
    "asyncio.Lock": "threading.Lock",
    "asyncio.sleep": "time.sleep",
    "import asyncio": "import threading",
    "AsyncConnectionPool": "ConnectionPool",
    "AsyncConnection": "Connection",
    "AsyncCallerConnection": "CallerConnection",
    "AsyncCursor": "Cursor",
    "AsyncIterator": "Iterator",
    "AsyncQueue": "Queue",
    "asynccontextmanager": "contextmanager",
    "__aenter__": "__enter__",
    "__aexit__": "__exit__",
    "_database_async": "_database",
    "queue_async": "queue",
}

HEADER = (
    "# WARNING: generated from {source} by tools/async_to_sync.py: DO NOT EDIT.\n"
    "# Change {source} and run `make generate`.\n"
)

_RENAME = re.compile(
    r"(?<!\w)(" + "|".join(re.escape(k) for k in sorted(RENAMES, key=len, reverse=True)) + r")\b"
)
_AWAIT = re.compile(r"\bawait\s+")
_ASYNC = re.compile(r"\basync\s+(def|with|for)\b")


def to_sync(source: str, source_name: str) -> str:
    text = _AWAIT.sub("", source)
    text = _ASYNC.sub(r"\1", text)
    text = _RENAME.sub(lambda m: RENAMES[m.group(1)], text)
    text = text.replace("(async source)", "(generated sync twin)")
    return HEADER.format(source=source_name) + text


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if a twin is stale")
    options = parser.parse_args()
    stale = []
    for source_name, target_name in TWINS.items():
        wanted = to_sync((PACKAGE / source_name).read_text(), source_name)
        target = PACKAGE / target_name
        current = target.read_text() if target.exists() else ""
        if current == wanted:
            continue
        if options.check:
            stale.append(target_name)
            sys.stdout.writelines(
                difflib.unified_diff(
                    current.splitlines(True), wanted.splitlines(True), target_name, "generated"
                )
            )
        else:
            target.write_text(wanted)
            print(f"wrote {target.relative_to(PACKAGE.parent.parent)}")
    if stale:
        print(f"stale generated files: {', '.join(stale)}; run `make generate`", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
