"""mypy --strict on the typed-task examples: pass_*.py must be clean, and in fail_*.py
exactly the lines marked `# E: <code>` must be errors, of that code.

Run by `make lint`; exits 1 with one line per surprise."""

from __future__ import annotations

import re
import sys
from pathlib import Path

from mypy import api

HERE = Path(__file__).resolve().parent
EXPECTED = re.compile(r"#\s*E:\s*([\w-]+)")
REPORTED = re.compile(r"^(?P<file>[^:]+):(?P<line>\d+): error: .*\[(?P<code>[\w-]+)\]$")


def expected_errors(path: Path) -> set[tuple[str, int, str]]:
    return {
        (path.name, number, match[1])
        for number, text in enumerate(path.read_text().splitlines(), start=1)
        if (match := EXPECTED.search(text))
    }


def main() -> int:
    files = sorted(HERE.glob("pass_*.py")) + sorted(HERE.glob("fail_*.py"))
    stdout, stderr, _ = api.run(
        ["--strict", "--no-incremental", "--show-error-codes", "--no-error-summary",
         "--hide-error-context", *map(str, files)]
    )
    reported = {
        (Path(m["file"]).name, int(m["line"]), m["code"])
        for line in stdout.splitlines() if (m := REPORTED.match(line))
    }
    expected = set().union(*(expected_errors(path) for path in files))
    surprises = [f"missing error {c} at {f}:{n}" for f, n, c in sorted(expected - reported)]
    surprises += [f"unexpected error {c} at {f}:{n}" for f, n, c in sorted(reported - expected)]
    if stderr.strip():
        surprises.append(f"mypy failed: {stderr.strip()}")
    for line in surprises:
        print(f"tests/typing: {line}", file=sys.stderr)
    return 1 if surprises else 0


if __name__ == "__main__":
    sys.exit(main())
