"""Other sessions' SQL, made safe to show: every literal and comment removed.

The doctor lists the last statement of sessions that hold a transaction open, and those
statements carry whatever the application put in them: `ALTER ROLE ... PASSWORD '...'`,
an email address, a token. Each string (plain, E'...', dollar-quoted), number and
comment becomes `?`, as in a query fingerprint; identifiers, keywords and placeholders
stay, so the statement can still be recognised. A literal cut off by the server's
track_activity_query_size is removed to the end.
"""

from __future__ import annotations

import re

WIDTH = 120

_TOKEN = re.compile(
    r"""
      (?P<comment> --[^\n]* | /\*.*?(?:\*/|\Z) )
    | (?P<literal>
          [eE]'(?:[^'\\]|\\.|'')*(?:'|\Z)              # E'...' with backslash escapes
        | '(?:[^']|'')*(?:'|\Z)                         # '...', '' inside
        | \$(?P<tag>[A-Za-z_]\w*|)\$.*?(?:\$(?P=tag)\$|\Z)   # $tag$...$tag$
      )
    | (?P<identifier> "(?:[^"]|"")*(?:"|\Z) | [A-Za-z_][\w$]* | \$\d+ )
    | (?P<number> (?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)? )
    """,
    re.VERBOSE | re.DOTALL,
)


def without_literals(query: str | None, width: int = WIDTH) -> str:
    """The statement with every literal replaced by ? and every comment dropped, on one
    line of at most width characters."""
    if not query:
        return ""

    def replace(match: re.Match[str]) -> str:
        if match["comment"] is not None:
            return " "
        if match["identifier"] is not None:
            return match[0]
        return "?"

    line = " ".join(_TOKEN.sub(replace, query).split())
    return line if len(line) <= width else line[: width - 3] + "..."
