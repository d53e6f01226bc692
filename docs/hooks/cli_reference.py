"""Writes docs/reference/cli.md's body from the `pgbaton` command itself, so the page
cannot drift from `--help`.

mkdocs-click renders click 8.3's `Sentinel.UNSET` as every unset option's default and
cuts each command's summary at its first line break; this reads click's own
`to_info_dict()`, which gives None for an unset default, and click's short help, which
ends at the first sentence.
"""

from __future__ import annotations

import inspect
from typing import Any

import click

MARKER = "<!-- the pgbaton command's reference -->"


def on_page_markdown(markdown: str, page: Any, **_: Any) -> str:
    if MARKER not in markdown:
        return markdown
    from pgbaton.cli import main

    root = click.Context(main, info_name="pgbaton")
    return markdown.replace(MARKER, "\n".join(_command(main, root, level=2)))


def _command(command: click.Command, ctx: click.Context, level: int) -> list[str]:
    path = ctx.command_path
    lines = [f"{'#' * level} `{path}`" if level > 2 else "## Options before the command", ""]
    lines += _help(command.help or "")
    pieces = " ".join(command.collect_usage_pieces(ctx))
    lines += ["", "```text", f"Usage: {path} {pieces}".rstrip(), "```", ""]
    lines += _options(command, ctx)
    if isinstance(command, click.Group):
        subcommands = [(name, command.get_command(ctx, name))
                       for name in command.list_commands(ctx)]
        lines += ["**Commands**", ""]
        lines += [f"- [`{name}`](#{_anchor(f'{path} {name}')}): "
                  f"{sub.get_short_help_str(limit=300)}"
                  for name, sub in subcommands if sub is not None and not sub.hidden]
        lines.append("")
        for name, sub in subcommands:
            if sub is not None and not sub.hidden:
                child = click.Context(sub, info_name=name, parent=ctx)
                lines += _command(sub, child, level + 1 if level > 2 else 3)
    return lines


def _help(text: str) -> list[str]:
    """click's help text as Markdown: a paragraph that click keeps unwrapped (after a
    line holding only \\b) stays a block of lines."""
    out: list[str] = []
    for paragraph in inspect.cleandoc(text).split("\n\n"):
        if paragraph.startswith("\b\n"):
            out += ["```text", paragraph[2:], "```", ""]
        else:
            out += [" ".join(paragraph.split()), ""]
    return out


def _options(command: click.Command, ctx: click.Context) -> list[str]:
    rows = []
    for param in command.get_params(ctx):
        info = param.to_info_dict()
        if info.get("hidden"):
            continue
        if isinstance(param, click.Argument):
            continue
        names = ", ".join(f"`{name}`" for name in [*param.opts, *param.secondary_opts])
        kind = "flag" if info.get("is_flag") else _type_name(param)
        help_text = " ".join((getattr(param, "help", None) or "").split())
        envvar = info.get("envvar")
        if envvar and envvar not in help_text:
            help_text += f" [or {envvar}]"
        rows.append(f"| {names} | {kind} | {_cell(help_text)} | {_default(param, info)} |")
    if not rows:
        return []
    return ["| Option | Value | What it does | Default |", "|---|---|---|---|", *rows, ""]


def _type_name(param: click.Parameter) -> str:
    if isinstance(param.type, click.Choice):
        return " \\| ".join(f"`{choice}`" for choice in param.type.choices)
    name = param.type.name.lower()
    if isinstance(param.type, click.types._NumberRangeBase):
        bounds = param.type._describe_range()
        for ascii_sign, sign in (("<=", "≤"), (">=", "≥"), ("<", "<"), (">", ">")):
            bounds = bounds.replace(ascii_sign, f" {sign} ")
        return f"{name.removesuffix(' range')}, {' '.join(bounds.split())}"
    return name


def _default(param: click.Parameter, info: dict[str, Any]) -> str:
    default = info.get("default")
    if info.get("is_flag") and default is False:
        return ""
    if default is None or default == () or callable(default):
        return ""
    if isinstance(default, (list, tuple)):
        return ", ".join(f"`{item}`" for item in default)
    return f"`{default}`"


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _anchor(title: str) -> str:
    """The id mkdocs' toc gives a heading of `title` in backticks."""
    return "-".join("".join(c if c.isalnum() or c in " -_" else "" for c in title).lower()
                    .split())
