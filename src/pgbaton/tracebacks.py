"""A stored traceback as an operator reads it: the handler's own frames, with the runs of
frames of pgbaton's worker around them (the executor that calls the handler, the
middleware) set apart so they can be folded. The stored text is never changed."""

from __future__ import annotations

import re
from dataclasses import dataclass

# A frame's first line; the frame is pgbaton's when its file is inside a `pgbaton`
# package folder (installed or a checkout's src/), whatever machine wrote it.
_FRAME = re.compile(r'^  File "(?P<path>[^"]*)", line \d+')
_OWN_PATH = re.compile(r"(^|[/\\])pgbaton[/\\](?!tests[/\\])[^/\\]+(\.py|[/\\].*\.py)$")


@dataclass(frozen=True, slots=True)
class Part:
    text: str
    own: bool  # frames of pgbaton itself, to fold
    frames: int = 0


def parts(traceback: str) -> list[Part]:
    """The traceback cut into runs: pgbaton's frames (own=True, with their count) and
    everything else, in order; joined, the parts are the text again."""
    lines = traceback.splitlines(keepends=True)
    result: list[Part] = []
    run: list[str] = []
    run_own = False
    frames = 0
    index = 0
    while index < len(lines):
        line = lines[index]
        match = _FRAME.match(line)
        if match:
            # A frame is its File line and the indented lines under it.
            end = index + 1
            while end < len(lines) and lines[end].startswith("    "):
                end += 1
            own = bool(_OWN_PATH.search(match.group("path")))
            block = lines[index:end]
            index = end
        else:
            own, block = False, [line]
            index += 1
        if run and own != run_own:
            result.append(Part("".join(run), run_own, frames if run_own else 0))
            run, frames = [], 0
        run_own = own
        run.extend(block)
        frames += 1 if own else 0
    if run:
        result.append(Part("".join(run), run_own, frames if run_own else 0))
    return result


def folded(traceback: str) -> str:
    """The traceback with each run of pgbaton's frames as one line that counts them."""
    return "".join(
        f"  [{p.frames} frame{'s' if p.frames != 1 else ''} of pgbaton's worker]\n"
        if p.own else p.text
        for p in parts(traceback)
    )
