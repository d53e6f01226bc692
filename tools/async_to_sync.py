"""Generate the sync twins of pgbaton's async modules (queue_async.py -> queue.py).

The async module is the one source of truth; its twin is written from its syntax tree
(libcst, a concrete syntax tree: every comment, blank line and line break survives, so the
twin reads like the hand-written code it comes from). psycopg's generator, the model, goes
through `ast` and prints the tree anew (ast_comments keeps the comments, black and isort
format the result), so its output depends on the Python that runs it; a concrete tree
changes only what must change. In code, and only in code:

- `await x` becomes `x`; `async def`, `async with` (any number of items), `async for` and
  async comprehensions become their plain forms;
- names are renamed where they are names: identifiers, attributes, import names and
  modules (`RENAMES`, where each module of `TWINS` is named as its twin, plus the
  module's own `Twin.renames`); a dotted key (`asyncio.sleep`) renames that whole
  attribute chain; `IMPORTS` renames a module in `import` statements only (`import
  asyncio` -> `import threading`); a renamed import goes back to its place in ruff's
  order, among the plain `import` lines beside it or among the names of its `from ...
  import`;
- a continuation line aligned under a bracket stays aligned under it when a dropped
  `await`/`async` or a rename moves the bracket.

Strings and comments are left alone, however much they say `await` or `AsyncQueue`, except
for the replacements listed explicitly: `STRINGS` for every module (the module docstring's
`(async source)` becomes `(generated sync twin)`) and `Twin.strings` for one module. They
are applied to the text of string literals (f-string text included), never to comments.

Async-only code, with no sync twin, is marked in the source by a comment
`# sync: skip`, either on a line of its own among the lines directly above a statement or
at the end of the statement's first line. The twin drops that statement, with the
comments above it. On an `if` that has an `else:`, the twin keeps the `else:` body in the
`if`'s place instead:

    if True:  # sync: skip (asyncio.timeout has no blocking twin)
        async with asyncio.timeout(5):
            await job()
    else:
        job()

`python tools/async_to_sync.py` (`make generate`) writes every twin of `TWINS`;
`--check` (`make lint`, CI) writes nothing and fails, printing the diff, when a checked-in
twin is not what its source generates. Paths of `*_async.py` files given as arguments are
converted instead of `TWINS`, each into the file beside it without `_async` (the tests
use this on sample modules).
"""

from __future__ import annotations

import argparse
import difflib
import io
import sys
import tokenize
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

try:
    import libcst as cst
    from libcst.helpers import get_full_name_for_node
    from libcst.metadata import MetadataWrapper, PositionProvider
except ImportError:  # pragma: no cover - the message is the point
    sys.exit("tools/async_to_sync.py needs libcst, a dev dependency: pip install -e '.[dev]'")

PACKAGE = Path(__file__).resolve().parent.parent / "src" / "pgbaton"


@dataclass(frozen=True)
class Twin:
    """What one async module generates: its twin's file name, and the renames and string
    replacements that only this module needs (on top of `RENAMES` and `STRINGS`)."""

    target: str
    renames: Mapping[str, str] = field(default_factory=dict)
    strings: Mapping[str, str] = field(default_factory=dict)


# Names renamed in every module: psycopg's and the standard library's async names, and
# pgbaton's async classes (each module of TWINS is renamed as its twin, below). A dotted
# key renames that attribute chain as a whole.
RENAMES = {
    "AsyncConnection": "Connection",
    "AsyncConnectionPool": "ConnectionPool",
    "AsyncCursor": "Cursor",
    "ParsedOnceAsyncCursor": "ParsedOnceCursor",
    "AsyncIterator": "Iterator",
    "asynccontextmanager": "contextmanager",
    "AbstractAsyncContextManager": "AbstractContextManager",
    "__aenter__": "__enter__",
    "__aexit__": "__exit__",
    "AsyncCallerConnection": "CallerConnection",
    "AsyncDatabase": "Database",
    "AsyncEngine": "Engine",
    "AsyncQueue": "Queue",
    # the parts of the queue (_queue/)
    "AsyncChores": "Chores",
    "AsyncEnqueueing": "Enqueueing",
    "AsyncFlowSettings": "FlowSettings",
    "AsyncJobWrites": "JobWrites",
    "AsyncOperatorActions": "OperatorActions",
    "AsyncQueueCore": "QueueCore",
    "AsyncReads": "Reads",
    "AsyncScheduling": "Scheduling",
    "AsyncWorkerProtocol": "WorkerProtocol",
}

# Modules renamed in `import` statements only.
IMPORTS = {"asyncio": "threading"}

# Text replaced inside string literals of every module; nothing else in a string changes.
STRINGS = {"(async source)": "(generated sync twin)"}

# source file (its path in src/pgbaton) -> what it generates, beside it
TWINS = {
    "queue_async.py": Twin("queue.py"),
    "_queue/core_async.py": Twin("core.py"),
    "_queue/job_writes_async.py": Twin(
        "job_writes.py", renames={"asyncio.sleep": "time.sleep"}
    ),
    "_queue/enqueueing_async.py": Twin("enqueueing.py"),
    "_queue/worker_protocol_async.py": Twin("worker_protocol.py"),
    "_queue/chores_async.py": Twin("chores.py"),
    "_queue/reads_async.py": Twin("reads.py"),
    "_queue/operator_actions_async.py": Twin("operator_actions.py"),
    "_queue/flow_settings_async.py": Twin("flow_settings.py"),
    "_queue/scheduling_async.py": Twin("scheduling.py"),
    "engine_async.py": Twin("engine.py"),
    "_database_async.py": Twin(
        "_database.py",
        renames={"asyncio.Lock": "threading.Lock"},
        # _fetch's refusal names the class the sync Database wants.
        strings={"must be a psycopg.AsyncConnection": "must be a psycopg.Connection"},
    ),
}

# Each module of TWINS is named as its twin wherever the code names it (imports):
# `from ._queue.reads_async import AsyncReads` -> `from ._queue.reads import Reads`.
RENAMES |= {Path(source).stem: Path(twin.target).stem for source, twin in TWINS.items()}

SKIP = "# sync: skip"

HEADER = (
    "# WARNING: generated from {source} by tools/async_to_sync.py: DO NOT EDIT.\n"
    "# Change {source} and run `make generate`.\n"
)


class GenerationError(Exception):
    """The source asks for something the generator cannot do; the message says what."""


def to_sync(source: str, source_name: str, twin: Twin | None = None) -> str:
    """The sync twin of an async module's text, with its DO-NOT-EDIT header."""
    twin = twin or Twin(source_name.replace("_async", ""))
    renames = {**RENAMES, **twin.renames}
    strings = {**STRINGS, **twin.strings}
    # First find where the rewrite moves text within a line, and move the continuation
    # lines aligned under a bracket that moves with it; then rewrite for real.
    finder = AsyncToSync(renames, strings)
    MetadataWrapper(cst.parse_module(source)).visit(finder)
    aligned = _realign(source, finder.moves)
    module = cst.parse_module(aligned).visit(AsyncToSync(renames, strings))
    return HEADER.format(source=source_name) + module.code


class AsyncToSync(cst.CSTTransformer):
    """The rewrite itself. Run on a tree with positions (a MetadataWrapper's), it also
    records in `moves` each place where it shortens or lengthens a line: line ->
    [(column, characters added)]."""

    METADATA_DEPENDENCIES = (PositionProvider,)

    def __init__(self, renames: Mapping[str, str], strings: Mapping[str, str]) -> None:
        super().__init__()
        self.names = {k: v for k, v in renames.items() if "." not in k}
        self.dotted = {k: v for k, v in renames.items() if "." in k}
        self.strings = strings
        self.moves: dict[int, list[tuple[int, int]]] = {}

    def _moved(self, node: cst.CSTNode, added: int, column_offset: int = 0) -> None:
        if added and PositionProvider in self.metadata:
            start = self.get_metadata(PositionProvider, node).start
            self.moves.setdefault(start.line, []).append((start.column + column_offset, added))

    # await, async

    def leave_Await(self, original: cst.Await, updated: cst.Await) -> cst.BaseExpression:
        space = original.whitespace_after_await
        self._moved(original, -len("await") - len(getattr(space, "value", "")))
        inner = updated.expression
        return inner.with_changes(
            lpar=[*updated.lpar, *inner.lpar], rpar=[*inner.rpar, *updated.rpar]
        )

    def _sync_of(self, original: cst.CSTNode, asynchronous: cst.Asynchronous | None,
                 at: cst.CSTNode | None = None) -> None:
        if asynchronous is not None:
            width = len("async" + asynchronous.whitespace_after.value)
            self._moved(at or original, -width, -1 if at is not None else 0)

    def leave_FunctionDef(
        self, original: cst.FunctionDef, updated: cst.FunctionDef
    ) -> cst.FunctionDef:
        # A decorated def starts at its first decorator: the name's line is the one moved.
        self._sync_of(original, original.asynchronous, at=original.name)
        return updated.with_changes(asynchronous=None)

    def leave_With(self, original: cst.With, updated: cst.With) -> cst.With:
        self._sync_of(original, original.asynchronous)
        return updated.with_changes(asynchronous=None)

    def leave_For(self, original: cst.For, updated: cst.For) -> cst.For:
        self._sync_of(original, original.asynchronous)
        return updated.with_changes(asynchronous=None)

    def leave_CompFor(self, original: cst.CompFor, updated: cst.CompFor) -> cst.CompFor:
        self._sync_of(original, original.asynchronous)
        return updated.with_changes(asynchronous=None)

    # names

    def leave_Name(self, original: cst.Name, updated: cst.Name) -> cst.Name:
        new = self.names.get(updated.value)
        if new is None:
            return updated
        self._moved(original, len(new) - len(updated.value))
        return updated.with_changes(value=new)

    def leave_Attribute(
        self, original: cst.Attribute, updated: cst.Attribute
    ) -> cst.BaseExpression:
        new = self.dotted.get(get_full_name_for_node(original) or "")
        if new is None:
            return updated
        old = get_full_name_for_node(original) or ""
        # The chain's names were seen by leave_Name first: count only what this adds.
        self._moved(original, len(new) - len(get_full_name_for_node(updated) or old))
        replaced = cst.parse_expression(new)
        return replaced.with_changes(lpar=updated.lpar, rpar=updated.rpar)

    def leave_Import(self, original: cst.Import, updated: cst.Import) -> cst.Import:
        names = []
        for before, alias in zip(original.names, updated.names, strict=True):
            old = get_full_name_for_node(alias.name) or ""
            new = IMPORTS.get(old)
            if new is None:
                names.append(alias)
            else:
                self._moved(before.name, len(new) - len(old))
                names.append(alias.with_changes(name=cst.parse_expression(new)))
        return updated.with_changes(names=names)

    def leave_ImportFrom(
        self, original: cst.ImportFrom, updated: cst.ImportFrom
    ) -> cst.ImportFrom:
        if isinstance(updated.names, cst.ImportStar) or updated.names == original.names:
            return updated
        # A renamed name goes back to its place in ruff's (isort's) order: constants,
        # classes, then the rest. Each place keeps its comma and line break.
        names = sorted(updated.names, key=lambda alias: _import_order(alias.name))
        places = [alias.comma for alias in updated.names]
        kept = zip(names, places, strict=True)
        return updated.with_changes(names=[alias.with_changes(comma=c) for alias, c in kept])

    # strings

    def _replaced(self, original: cst.CSTNode, text: str) -> str:
        new = text
        for old, replacement in self.strings.items():
            new = new.replace(old, replacement)
        if new != text and "\n" not in text:
            self._moved(original, len(new) - len(text))
        return new

    def leave_SimpleString(
        self, original: cst.SimpleString, updated: cst.SimpleString
    ) -> cst.SimpleString:
        return updated.with_changes(value=self._replaced(original, updated.value))

    def leave_FormattedStringText(
        self, original: cst.FormattedStringText, updated: cst.FormattedStringText
    ) -> cst.FormattedStringText:
        return updated.with_changes(value=self._replaced(original, updated.value))

    # statements marked `# sync: skip`, and imports put back in order

    def leave_Module(self, original: cst.Module, updated: cst.Module) -> cst.Module:
        body = _sorted_imports(_without_skipped(updated.body))
        if not body:
            raise GenerationError("every statement of the module is marked `# sync: skip`")
        return updated.with_changes(body=body)

    def leave_IndentedBlock(
        self, original: cst.IndentedBlock, updated: cst.IndentedBlock
    ) -> cst.IndentedBlock:
        body = _without_skipped(updated.body)
        if not body:
            line = self.get_metadata(PositionProvider, original).start.line
            raise GenerationError(
                f"line {line}: every statement of this block is marked `# sync: skip`;"
                " mark the statement that holds the block instead"
            )
        return updated.with_changes(body=_sorted_imports(body))


def _leading(statement: cst.BaseStatement) -> Sequence[cst.EmptyLine]:
    """The blank and comment lines above a statement (every statement has them)."""
    lines: Sequence[cst.EmptyLine] = getattr(statement, "leading_lines", ())
    return lines


def _marked(statement: cst.BaseStatement) -> bool:
    """Whether the statement carries `# sync: skip`, above it or on its first line."""
    above = list(_leading(statement))
    for decorator in getattr(statement, "decorators", ()):
        above.extend(decorator.leading_lines)
    comments = [line.comment.value for line in above if line.comment is not None]
    if isinstance(statement, cst.SimpleStatementLine):
        trailing = statement.trailing_whitespace.comment
    else:
        body = getattr(statement, "body", None)
        header = body.header if isinstance(body, cst.IndentedBlock) else None
        if isinstance(body, cst.SimpleStatementSuite):
            header = body.trailing_whitespace
        trailing = header.comment if header is not None else None
    if trailing is not None:
        comments.append(trailing.value)
    return any(comment.startswith(SKIP) for comment in comments)


def _without_skipped(body: Sequence[cst.BaseStatement]) -> list[cst.BaseStatement]:
    kept: list[cst.BaseStatement] = []
    blanks_above: list[cst.EmptyLine] = []  # those of a dropped statement
    for statement in body:
        if not _marked(statement):
            own = list(getattr(statement, "leading_lines", ()))
            if blanks_above and not any(line.comment is None for line in own):
                # The statement takes the blank lines that set the dropped one apart.
                kept.append(statement.with_changes(leading_lines=[*blanks_above, *own]))
            else:
                kept.append(statement)
            blanks_above = []
        elif not isinstance(statement, cst.If) or statement.orelse is None:
            blanks_above = [line for line in _leading(statement) if line.comment is None]
        elif isinstance(statement, cst.If) and statement.orelse is not None:
            if not isinstance(statement.orelse, cst.Else) or not isinstance(
                statement.orelse.body, cst.IndentedBlock
            ):
                raise GenerationError(
                    "an `if` marked `# sync: skip` takes a plain `else:` block, not `elif`:"
                    " its `else:` body is the sync twin"
                )
            others = list(statement.orelse.body.body)
            # The else body takes the if's place, and the blank lines that were above it.
            blanks = [line for line in statement.leading_lines if line.comment is None]
            others[0] = others[0].with_changes(
                leading_lines=[*blanks, *_leading(others[0])]
            )
            kept.extend(others)
    return kept


def _import_order(name: cst.Name | cst.Attribute) -> tuple[int, str]:
    text = get_full_name_for_node(name) or ""
    kind = 0 if text.isupper() and len(text) > 1 else 1 if text[:1].isupper() else 2
    return kind, text


def _import_name(statement: cst.BaseStatement) -> str | None:
    """The module of a line that is one plain `import x` and nothing else."""
    if not isinstance(statement, cst.SimpleStatementLine) or len(statement.body) != 1:
        return None
    (small,) = statement.body
    if not isinstance(small, cst.Import) or len(small.names) != 1:
        return None
    return get_full_name_for_node(small.names[0].name)


def _sorted_imports(body: list[cst.BaseStatement]) -> list[cst.BaseStatement]:
    """Each run of adjacent `import x` lines that holds a renamed import (asyncio ->
    threading) in ruff's (isort's) order, so that the renamed one goes back to its place."""
    out = list(body)
    start = 0
    while start < len(out):
        end = start
        while (
            end < len(out)
            and _import_name(out[end]) is not None
            and (end == start or not _leading(out[end]))
        ):
            end += 1
        run = out[start:end]
        if len(run) > 1 and any(_import_name(s) in IMPORTS.values() for s in run):
            top = _leading(run[0])
            ordered = sorted(
                (s.with_changes(leading_lines=()) for s in run),
                key=lambda s: (_import_name(s) or "").lower(),
            )
            ordered[0] = ordered[0].with_changes(leading_lines=top)
            out[start:end] = ordered
        start = max(end, start + 1)
    return out


def _realign(source: str, moves: Mapping[int, Sequence[tuple[int, int]]]) -> str:
    """The source with each continuation line that is aligned under an open bracket (or
    that closes it) moved as far as the rewrite will move that bracket."""
    shifts: dict[int, int] = {}
    brackets: list[tuple[int, int]] = []
    last_row = 0
    # Python 3.12 and later tokenize an f-string's parts: no line inside one is moved.
    fstring_start = getattr(tokenize, "FSTRING_START", None)
    fstring_end = getattr(tokenize, "FSTRING_END", None)
    fstrings = 0
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type in (tokenize.NL, tokenize.NEWLINE):
            continue
        row, column = token.start
        if row != last_row and brackets and not fstrings:
            line, bracket = brackets[-1]
            closes = token.string in ")]}" and column == bracket
            if column == bracket + 1 or closes:
                moved = shifts.get(line, 0) + sum(
                    added for at, added in moves.get(line, ()) if at < bracket
                )
                if moved:
                    shifts[row] = moved
        last_row = token.end[0]
        if token.type == fstring_start:
            fstrings += 1
        elif token.type == fstring_end:
            fstrings -= 1
        # The braces of an f-string's fields are not brackets of the code.
        elif token.type == tokenize.OP and not fstrings and token.string in "([{":
            brackets.append((row, column))
        elif token.type == tokenize.OP and not fstrings and token.string in ")]}":
            brackets.pop()
    if not shifts:
        return source
    lines = source.splitlines(keepends=True)
    for row, moved in shifts.items():
        text = lines[row - 1]
        indent = len(text) - len(text.lstrip(" "))
        lines[row - 1] = " " * max(indent + moved, 0) + text[indent:]
    return "".join(lines)


def _twin_of(path: Path) -> Twin | None:
    """The Twin of a source given by its path, if it is one of TWINS."""
    resolved = path.resolve()
    if not resolved.is_relative_to(PACKAGE):
        return None
    return TWINS.get(resolved.relative_to(PACKAGE).as_posix())


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if a twin is stale")
    parser.add_argument(
        "sources", nargs="*", type=Path, metavar="SOURCE",
        help="*_async.py files to convert instead of the package's (TWINS)",
    )
    options = parser.parse_args(argv)
    if options.sources:
        for path in options.sources:
            if not path.name.endswith("_async.py"):
                parser.error(f"{path}: a source's name ends in _async.py")
        jobs = [
            (path, path.with_name(path.name.replace("_async.py", ".py")), _twin_of(path))
            for path in options.sources
        ]
    else:
        jobs = [
            (PACKAGE / name, (PACKAGE / name).with_name(twin.target), twin)
            for name, twin in TWINS.items()
        ]
    stale = []
    for source, target, twin in jobs:
        try:
            wanted = to_sync(source.read_text(), source.name, twin)
        except (GenerationError, cst.ParserSyntaxError) as error:
            print(f"{source}: {error}", file=sys.stderr)
            return 2
        current = target.read_text() if target.exists() else ""
        if current == wanted:
            continue
        if options.check:
            stale.append(target.name)
            sys.stdout.writelines(
                difflib.unified_diff(
                    current.splitlines(True), wanted.splitlines(True), target.name, "generated"
                )
            )
        else:
            target.write_text(wanted)
            shown = target.resolve()
            if shown.is_relative_to(Path.cwd()):
                shown = shown.relative_to(Path.cwd())
            print(f"wrote {shown}")
    if stale:
        print(f"stale generated files: {', '.join(stale)}; run `make generate`", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
