"""`pgbaton lab`: five ways to claim a job, side by side, measured on this machine.

Each strategy gets a fresh schema with a minimal `jobs` table (id, status, claim token,
lease) and an `effects` table, the same number of jobs and the same simulated work. W
worker processes (spawned, started together at a barrier) claim and perform jobs until
none is left. Everything in the table is measured: doubles are counted in SQL from the
effects rows, lost races are the claim round trips that came back empty while jobs were
pending, and lock waits and held connections are what pg_stat_activity reports, sampled
every few milliseconds. This module prints and draws the report and holds the command;
lab_runner.py runs the strategies and lab_workers.py is what the worker processes run.
"""

from __future__ import annotations

import importlib
import importlib.util
from pathlib import Path
from typing import Any

import click

from .._cli_common import (
    NumberRange,
    WholeNumberRange,
    _print_json,
    dsn_option,
    json_option,
    resolve_dsn,
)
from ..errors import PgbatonError
from .lab_runner import Settings, run_lab
from .lab_workers import STRATEGIES, Strategy


def _print_table(report: dict[str, Any]) -> None:
    from rich import box
    from rich.console import Console
    from rich.table import Table

    rows = report["strategies"]
    intervals = [r["sample_interval_ms"] for r in rows if r["sample_interval_ms"]]
    every = f"~{sum(intervals) / len(intervals):.0f} ms" if intervals else "few ms"
    table = Table(
        box=box.SIMPLE_HEAD,
        pad_edge=False,
        collapse_padding=True,
        title=(
            f"pgbaton lab: {report['workers']} workers, {report['jobs']} jobs of "
            f"{report['work_ms']:g} ms work, {report['race_gap_ms']:g} ms between SELECT "
            f"and UPDATE, PostgreSQL {report['server_version']}"
        ),
    )
    for header in ("#", "strategy", "jobs/s", "doubles", "lost\nraces", "lock\nwait s",
                   "conns\nheld", "peak\nheld", "round\ntrips"):
        table.add_column(header, justify="left" if header == "strategy" else "right",
                         no_wrap=header == "strategy")
    for r in rows:
        table.add_row(
            str(r["number"]), r["strategy"], f"{r['jobs_per_second']:.0f}",
            str(r["doubles"]), str(r["lost_races"]), f"{r['lock_wait_seconds']:.2f}",
            f"{r['connections_held_mean']:.2f}", str(r["connections_held_peak"]),
            str(r["round_trips"]),
        )
    console = Console()
    console.print(table)
    for r in rows:
        console.print(f"{r['number']}  {r['description']}", highlight=False)
    console.print(
        "\ndoubles: jobs performed by more than one worker, counted in the effects table.\n"
        "lost races: claims that came back without a job while jobs were still pending.\n"
        "lock wait: seconds the workers' sessions spent waiting for a lock; conns held: "
        "sessions inside a transaction or a statement (mean over the run, and peak); both "
        f"from pg_stat_activity, sampled every {every}. Every worker keeps one connection "
        "open throughout.",
        highlight=False,
    )


_COLOURS = ("#c0392b", "#e67e22", "#8e44ad", "#27ae60", "#2980b9")


def _plot(report: dict[str, Any], path: Path) -> None:
    # Imported by name: matplotlib is optional, and this keeps the type check independent
    # of whether it is installed.
    matplotlib = importlib.import_module("matplotlib")
    matplotlib.use("Agg")
    pyplot = importlib.import_module("matplotlib.pyplot")

    rows = report["strategies"]
    numbers = [str(r["number"]) for r in rows]
    panels = [
        ("jobs per second", [r["jobs_per_second"] for r in rows]),
        ("doubles: jobs performed by two workers or more", [r["doubles"] for r in rows]),
        ("lost races", [r["lost_races"] for r in rows]),
        ("seconds waiting for locks", [r["lock_wait_seconds"] for r in rows]),
        ("connections held (mean)", [r["connections_held_mean"] for r in rows]),
        ("round trips", [r["round_trips"] for r in rows]),
    ]
    colours = [_COLOURS[(r["number"] - 1) % len(_COLOURS)] for r in rows]
    figure, axes = pyplot.subplots(2, 3, figsize=(14, 8), layout="constrained")
    for axis, (title, values) in zip(axes.flat, panels, strict=True):
        bars = axis.bar(numbers, values, color=colours)
        axis.bar_label(bars, fmt="%g", fontsize=8)
        axis.set_title(title, fontsize=10)
        axis.set_xlabel("strategy", fontsize=8)
        axis.margins(y=0.15)
    figure.legend(
        bars, [f"{r['number']}  {r['strategy']}" for r in rows],
        loc="outside lower center", ncol=len(rows), frameon=False,
    )
    figure.suptitle(
        f"pgbaton lab: {report['workers']} workers, {report['jobs']} jobs of "
        f"{report['work_ms']:g} ms, PostgreSQL {report['server_version']}"
    )
    figure.savefig(path, dpi=100)
    pyplot.close(figure)


def _strategy_list(
    ctx: click.Context, param: click.Parameter, value: str
) -> list[Strategy]:
    by_number = {str(s.number): s for s in STRATEGIES}
    chosen = [part.strip() for part in value.split(",") if part.strip()]
    unknown = [part for part in chosen if part not in by_number]
    if unknown or not chosen:
        raise click.BadParameter(
            f"{value!r}: give numbers from 1 to {len(STRATEGIES)}, comma-separated"
        )
    return [by_number[part] for part in sorted(set(chosen), key=int)]


@click.command()
@click.option("--workers", type=WholeNumberRange(1, 64), default=4, show_default=True,
              help="Worker processes, each with one connection.")
@click.option("--jobs", type=WholeNumberRange(1, 1_000_000), default=200, show_default=True,
              help="Jobs per strategy.")
@click.option("--work-ms", type=NumberRange(0, 60_000), default=5.0, show_default=True,
              help="Simulated work per job, in milliseconds.")
@click.option("--race-gap", "race_gap_ms", type=NumberRange(0, 60_000), default=1.0,
              show_default=True,
              help="Milliseconds between SELECT and UPDATE in strategies 1 and 2 (the "
                   "application's own time and the network's).")
@click.option("--strategies", "chosen", default="1,2,3,4,5", show_default=True,
              callback=_strategy_list, help="Which strategies to run, comma-separated.")
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False, path_type=Path),
              default=None, help="Also draw the comparison into this PNG (needs matplotlib).")
@click.option("--keep", is_flag=True,
              help="Keep each strategy's schema (jobs and effects tables) to inspect.")
@dsn_option
@json_option
def lab(
    *, workers: int, jobs: int, work_ms: float, race_gap_ms: float, chosen: list[Strategy],
    plot_path: Path | None, keep: bool, dsn: str | None, as_json: bool,
) -> None:
    """Run five ways to claim a job side by side and measure them.

    Every strategy gets the same jobs, workers and work time in a schema of its own:
    1 SELECT then UPDATE; 2 the same with the UPDATE guarded by status = 'pending';
    3 SELECT ... FOR UPDATE in one transaction held for the whole job; 4 pgbaton's
    FOR UPDATE SKIP LOCKED claim, committed before the work; 5 the same in batches of 10.
    """
    if plot_path is not None:
        if importlib.util.find_spec("matplotlib") is None:
            raise PgbatonError(
                "--plot needs matplotlib, which is not installed: pip install matplotlib"
            )
        if not plot_path.parent.is_dir():
            raise click.BadParameter(
                f"folder {str(plot_path.parent)!r} does not exist", param_hint="--plot"
            )
    settings = Settings(workers=workers, jobs=jobs, work_ms=work_ms, race_gap_ms=race_gap_ms)
    report = run_lab(
        resolve_dsn(dsn), settings, chosen, keep=keep,
        progress=lambda line: click.echo(f"lab: {line}", err=True),
    )
    if plot_path is not None:
        _plot(report, plot_path)
    if as_json:
        _print_json(report)
        return
    _print_table(report)
    if plot_path is not None:
        click.echo(f"chart written to {plot_path}")
    if keep:
        schemas = ", ".join(r["schema"] for r in report["strategies"])
        click.echo(f"kept schemas: {schemas}")
