"""The doctor's report for people: one table row per finding, then the verdict."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table
from rich.text import Text

from .findings import Finding, plural

_STYLES = {"ok": ("OK", "green"), "warn": ("WARN", "yellow"), "fail": ("FAIL", "bold red")}


def render(findings: list[Finding], header: str, *, verbose: bool = False) -> None:
    """Prints the findings. A finding's details (the claim's EXPLAIN) are printed when it
    is not ok, or with verbose: a healthy install gets a short report."""
    console = Console()
    if not console.is_terminal:
        # Written to a file or a log: plan lines stay whole rather than wrap at 80.
        console = Console(width=160)
    table = Table("", "check", "finding, evidence and what to do", title=header,
                  show_lines=True, title_justify="left")
    table.columns[0].no_wrap = True
    table.columns[1].no_wrap = True
    table.columns[2].overflow = "fold"
    for finding in findings:
        label, style = _STYLES[finding.status]
        # Text, not markup: plan lines and queries hold brackets that rich would eat.
        cell = Text(finding.summary, style="bold")
        shown = finding.evidence
        if verbose or finding.status != "ok":
            shown = shown + finding.details
        for line in shown:
            cell.append("\n" + line, style="dim")
        if finding.advice:
            cell.append("\n→ " + finding.advice, style="cyan")
        table.add_row(Text(label, style=style), finding.name, cell)
    console.print(table)
    failed = sum(f.status == "fail" for f in findings)
    warned = sum(f.status == "warn" for f in findings)
    if failed:
        verdict = Text(f"{plural(failed, 'problem')}, {plural(warned, 'warning')}",
                       style="bold red")
    elif warned:
        verdict = Text(f"healthy, with {plural(warned, 'warning')}", style="yellow")
    else:
        verdict = Text("healthy", style="green")
    console.print(verdict)
