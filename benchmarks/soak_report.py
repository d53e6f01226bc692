"""The soak's samples: the CSV, the plot and the verdict against issue 16's criteria.

    python -m benchmarks.soak_report benchmarks/results/soak.csv   # draws soak.png again

The criteria are written for 30 minutes; a shorter run (the 2-minute smoke) scales every
window in proportion, so its verdict is computed the same way but proves little.

- sizes plateau: the largest jobs-table size (pg_total_relation_size) and index size
  (pg_indexes_size) of the last 10 minutes is at most 10% above the largest of the 10
  minutes before;
- claim and enqueue p99: the p99 of every claim (enqueue call) in the last 5 minutes is
  at most 1.2 times the p99 of those in the first 5 (computed from every duration, not
  from the per-sample p99s in the CSV);
- worker RSS drift: the median RSS of the last 5 minutes is within 10% of the median of
  the 5 minutes after a 5-minute warm-up. The warm-up is the time it takes the table to
  reach its steady size (retention plus the first autovacuums) and the worker's
  allocator arenas, pools and prepared statements to fill: growth in it is start-up,
  not drift.
"""

from __future__ import annotations

import csv
import math
import statistics
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

MB = 1024 * 1024
COLUMNS = (
    "elapsed_s", "utc", "load1", "total_bytes", "heap_bytes", "index_bytes", "live_tuples",
    "dead_tuples", "autovacuum_count", "autoanalyze_count", "deleted_total", "pending",
    "running", "enqueued_total", "producer_lag_jobs", "enqueue_calls", "enqueue_p50_ms",
    "enqueue_p99_ms", "done_total", "done_per_s", "claim_calls", "claim_p50_ms",
    "claim_p99_ms", "worker_rss_bytes", "worker_cpu_pct", "claimed_total",
    "claim_stmt_calls", "claim_stmt_ms_total", "claim_stmt_blocks_total",
    "claim_server_mean_ms", "claim_blocks_per_call", "cpu_busy_pct", "cpu_iowait_pct",
    "cpu_steal_pct",
)
FULL_MINUTES = 30.0
PLATEAU_MINUTES, PLATEAU_LIMIT = 10.0, 1.10
P99_MINUTES, P99_LIMIT = 5.0, 1.2
WARM_UP_MINUTES, RSS_MINUTES, RSS_LIMIT = 5.0, 5.0, 0.10


def percentile(values: Sequence[float], fraction: float) -> float:
    """Nearest rank; nan for no values."""
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[max(1, math.ceil(fraction * len(ordered))) - 1]


def window_stats(name: str, seconds: Sequence[float]) -> dict[str, Any]:
    return {f"{name}_calls": len(seconds),
            f"{name}_p50_ms": round(percentile(seconds, 0.50) * 1000, 3),
            f"{name}_p99_ms": round(percentile(seconds, 0.99) * 1000, 3)}


def csv_writer(file: IO[str]) -> csv.DictWriter[str]:
    writer = csv.DictWriter(file, COLUMNS)
    writer.writeheader()
    return writer


def read_csv(path: Path) -> list[dict[str, Any]]:
    with open(path, encoding="utf-8", newline="") as file:
        return [{k: (v if k == "utc" else float(v)) for k, v in row.items()}
                for row in csv.DictReader(file)]


def progress_line(row: dict[str, Any]) -> str:
    return (f"{row['elapsed_s'] / 60:5.1f} min  table {row['total_bytes'] / MB:7.1f} MB  "
            f"indexes {row['index_bytes'] / MB:6.1f} MB  dead {row['dead_tuples']:>8}  "
            f"claim p99 {row['claim_p99_ms']:6.2f} ms  enqueue p99 "
            f"{row['enqueue_p99_ms']:6.2f} ms  rss {row['worker_rss_bytes'] / MB:5.1f} MB  "
            f"done/s {row['done_per_s']:6.0f}  backlog {row['pending']:>6}  "
            f"buffers/claim {row['claim_blocks_per_call']:7.1f}  "
            f"load {row['load1']:.1f}")


@dataclass
class Criterion:
    name: str
    measured: str
    passed: bool


@dataclass
class Soak:
    """The samples of one soak, with every claim's and enqueue's duration kept per
    sample for the windows' percentiles."""

    minutes: float
    rate: float
    rows: list[dict[str, Any]] = field(default_factory=list)
    claims: list[list[float]] = field(default_factory=list)
    enqueues: list[list[float]] = field(default_factory=list)
    settings: dict[str, Any] = field(default_factory=dict)
    worker_exit: int | None = None

    def add(self, row: dict[str, Any], claims: list[float], enqueues: list[float]) -> None:
        self.rows.append(row)
        self.claims.append(claims)
        self.enqueues.append(enqueues)

    @property
    def scale(self) -> float:
        return self.minutes / FULL_MINUTES

    def _indexes(self, start_min: float, end_min: float) -> list[int]:
        return [i for i, row in enumerate(self.rows)
                if start_min * 60 < row["elapsed_s"] <= end_min * 60 + 1e-6]

    def _windowed(self, start_min: float, end_min: float, column: str) -> list[float]:
        return [self.rows[i][column] for i in self._indexes(start_min, end_min)]

    def _durations(self, which: list[list[float]], start_min: float,
                   end_min: float) -> list[float]:
        return [d for i in self._indexes(start_min, end_min) for d in which[i]]

    def criteria(self) -> list[Criterion]:
        end, s = self.minutes, self.scale
        found = []
        for column, label in (("total_bytes", "jobs table size (with indexes, TOAST)"),
                              ("index_bytes", "jobs index size")):
            before = self._windowed(end - 2 * PLATEAU_MINUTES * s, end - PLATEAU_MINUTES * s,
                                    column)
            last = self._windowed(end - PLATEAU_MINUTES * s, end, column)
            if not before or not last:
                found.append(Criterion(f"{label} plateaus", "too few samples", False))
                continue
            ratio = max(last) / max(before)
            found.append(Criterion(
                f"{label} plateaus: max of the last {PLATEAU_MINUTES * s:.3g} min "
                f"<= {PLATEAU_LIMIT:.3g} x max of the {PLATEAU_MINUTES * s:.3g} min before",
                f"{max(before) / MB:.1f} MB -> {max(last) / MB:.1f} MB ({ratio:.3f} x)",
                ratio <= PLATEAU_LIMIT))
        for which, label in ((self.claims, "claim"), (self.enqueues, "enqueue")):
            first = percentile(self._durations(which, 0, P99_MINUTES * s), 0.99)
            last = percentile(self._durations(which, end - P99_MINUTES * s, end), 0.99)
            ratio = last / first
            found.append(Criterion(
                f"{label} p99: last {P99_MINUTES * s:.3g} min <= {P99_LIMIT:.3g} x the first "
                f"{P99_MINUTES * s:.3g} min",
                f"{first * 1000:.2f} ms -> {last * 1000:.2f} ms ({ratio:.2f} x)",
                ratio <= P99_LIMIT))
        warm = WARM_UP_MINUTES * s
        reference = self._windowed(warm, warm + RSS_MINUTES * s, "worker_rss_bytes")
        last_rss = self._windowed(end - RSS_MINUTES * s, end, "worker_rss_bytes")
        if reference and last_rss:
            ref, now = statistics.median(reference), statistics.median(last_rss)
            drift = (now - ref) / ref
            found.append(Criterion(
                f"worker RSS drift: median of the last {RSS_MINUTES * s:.3g} min within "
                f"{RSS_LIMIT:.0%} of the median of minutes {warm:.3g}-{warm + RSS_MINUTES * s:.3g}",
                f"{ref / MB:.1f} MB -> {now / MB:.1f} MB ({drift:+.1%})",
                abs(drift) < RSS_LIMIT))
        return found

    def overloads(self) -> list[str]:
        return overload_lines(self.rows, self.rate)

    def passed(self) -> bool:
        return self.worker_exit == 0 and all(c.passed for c in self.criteria())

    def context(self) -> list[str]:
        """What else the samples say: whether the load kept pace, and how busy the
        machine was in the windows compared."""
        end, s = self.minutes, self.scale
        lines = []
        for label, (a, b) in (("first", (0, P99_MINUTES * s)),
                              ("last", (end - P99_MINUTES * s, end))):
            loads = self._windowed(a, b, "load1")
            done = self._windowed(a, b, "done_per_s")
            backlog = self._windowed(a, b, "pending")
            blocks = self._windowed(a, b, "claim_blocks_per_call")
            server = self._windowed(a, b, "claim_server_mean_ms")
            lines.append(f"{label} {P99_MINUTES * s:.3g} min: load average (1 min) "
                         f"{statistics.mean(loads):.1f}, done {statistics.mean(done):.0f} "
                         f"jobs/s, backlog max {max(backlog):.0f}, claim on the server "
                         f"{statistics.mean(server):.2f} ms and {statistics.mean(blocks):.0f} "
                         f"buffers a call (mean of samples)")
        measured = [row for row in self.rows
                    if not (math.isnan(row["claim_p99_ms"]) or math.isnan(row["enqueue_p99_ms"]))]
        claims = [row["claim_p99_ms"] for row in measured]
        enqueues = [row["enqueue_p99_ms"] for row in measured]
        loads = [row["load1"] for row in measured]
        if len(set(claims)) > 1 and len(set(enqueues)) > 1 and len(set(loads)) > 1:
            lines.append(f"correlation of each sample's claim p99 with the load average: "
                         f"{statistics.correlation(claims, loads):+.2f}; enqueue p99: "
                         f"{statistics.correlation(enqueues, loads):+.2f}")
        lines += self.overloads()
        dead = [row["dead_tuples"] for row in self.rows]
        lines.append(f"dead tuples: max {max(dead):.0f}; autovacuums of the jobs table: "
                     f"{self.rows[-1]['autovacuum_count']:.0f}; rows pruned: "
                     f"{self.rows[-1]['deleted_total']:.0f}; jobs done: "
                     f"{self.rows[-1]['done_total']:.0f}")
        lines.append(f"producer behind its schedule at the end: "
                     f"{self.rows[-1]['producer_lag_jobs']:.0f} jobs; worker exit status "
                     f"{self.worker_exit}")
        return lines


def _episodes(rows: list[dict[str, Any]], behind: float) -> list[list[dict[str, Any]]]:
    """Runs of consecutive samples whose backlog is above `behind` jobs."""
    episodes: list[list[dict[str, Any]]] = []
    for previous, row in zip([None, *rows], rows, strict=False):
        if row["pending"] > behind:
            if previous is None or previous["pending"] <= behind:
                episodes.append([])
            episodes[-1].append(row)
    return episodes


def overload_lines(rows: list[dict[str, Any]], rate: float) -> list[str]:
    """The stretches in which the worker fell behind by more than 10 s of load: a
    machine too busy to run it shows as one, and the table must hold that backlog."""
    return [
        f"behind by more than 10 s of load in minutes {run[0]['elapsed_s'] / 60:.1f}-"
        f"{run[-1]['elapsed_s'] / 60:.1f}: backlog up to {max(r['pending'] for r in run):.0f} "
        f"jobs, load average up to {max(r['load1'] for r in run):.1f}, worker CPU down to "
        f"{min(r['worker_cpu_pct'] for r in run):.0f}%"
        for run in _episodes(rows, rate * 10)
    ]


def verdict_markdown(soak: Soak, plot_name: str) -> str:
    settings = soak.settings
    drain = settings.get("measured_drain")
    lines = [
        f"# Soak: {soak.minutes:.3g} minutes at {soak.rate:.0f} jobs/s",
        "",
        f"![the soak's samples]({plot_name})",
        "",
        f"- rate: {soak.rate:.0f} jobs/s"
        + (f", half the measured drain of {drain:.0f} jobs/s" if drain else " (given)")
        + f"; worker concurrency {settings.get('concurrency')}; producer: one "
          f"enqueue_many call every {settings.get('tick')} s",
        f"- pruner: retention {settings.get('retention')} s, every "
        f"{settings.get('prune_interval')} s",
        f"- server: embedded PostgreSQL {settings.get('server_version')}, autovacuum "
        f"{settings.get('autovacuum')} (naptime {settings.get('autovacuum_naptime')}, "
        f"scale factor {settings.get('autovacuum_vacuum_scale_factor')}), shared_buffers "
        f"{settings.get('shared_buffers')}, synchronous_commit "
        f"{settings.get('synchronous_commit')}",
        f"- machine: {_cpus()} CPUs; load average at the start {settings.get('load_at_start')}",
        "",
        "| criterion | measured | verdict |",
        "|---|---|---|",
    ]
    lines += [f"| {c.name} | {c.measured} | {'pass' if c.passed else 'FAIL'} |"
              for c in soak.criteria()]
    lines += ["", *[f"- {line}" for line in soak.context()], "",
              f"**Verdict: {'no drift' if soak.passed() else 'drift or failure'}**", ""]
    return "\n".join(lines)


def _cpus() -> int:
    import os

    return os.cpu_count() or 0


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    minutes = [row["elapsed_s"] / 60 for row in rows]

    def series(column: str, divide: float = 1.0) -> list[float]:
        return [row[column] / divide for row in rows]

    figure, axes = plt.subplots(7, 1, figsize=(10, 18), sharex=True)
    panels: list[tuple[str, list[tuple[str, str, float]], tuple[str, str, float] | None]] = [
        ("jobs table (MB)", [("total (pg_total_relation_size)", "total_bytes", MB),
                             ("heap", "heap_bytes", MB),
                             ("indexes (pg_indexes_size)", "index_bytes", MB)], None),
        ("tuples", [("dead (n_dead_tup)", "dead_tuples", 1),
                    ("live (n_live_tup)", "live_tuples", 1)],
         ("autovacuums (cumulative)", "autovacuum_count", 1)),
        ("claim (ms)", [("p99, worker's side", "claim_p99_ms", 1),
                        ("p50, worker's side", "claim_p50_ms", 1),
                        ("server mean (pg_stat_statements)", "claim_server_mean_ms", 1)],
         ("buffers touched per claim", "claim_blocks_per_call", 1)),
        ("enqueue call (ms)", [("p99", "enqueue_p99_ms", 1), ("p50", "enqueue_p50_ms", 1)],
         None),
        ("worker RSS (MB)", [("RSS", "worker_rss_bytes", MB)],
         ("worker CPU (%)", "worker_cpu_pct", 1)),
        ("jobs/s", [("done per second", "done_per_s", 1)],
         ("load average (1 min)", "load1", 1)),
        ("machine CPU (%)", [("busy", "cpu_busy_pct", 1), ("waiting for the disk",
                                                           "cpu_iowait_pct", 1)], None),
    ]
    for axis, (ylabel, lines, right) in zip(axes, panels, strict=True):
        for label, column, divide in lines:
            axis.plot(minutes, series(column, divide), label=label)
        axis.set_ylabel(ylabel)
        axis.set_ylim(bottom=0)
        axis.grid(alpha=0.3)
        handles, labels = axis.get_legend_handles_labels()
        if right is not None:
            twin = axis.twinx()
            twin.plot(minutes, series(right[1], right[2]), color="grey", linestyle=":",
                      label=right[0])
            twin.set_ylabel(right[0])
            twin.set_ylim(bottom=0)
            more_handles, more_labels = twin.get_legend_handles_labels()
            handles, labels = handles + more_handles, labels + more_labels
        axis.legend(handles, labels, loc="upper left", fontsize="small")
    axes[-1].set_xlabel("minutes")
    figure.suptitle("pgbaton soak: steady load, pruner on, embedded PostgreSQL, "
                    "one sample every 10 s")
    figure.tight_layout(rect=(0, 0, 1, 0.98))
    figure.savefig(path, dpi=80)
    plt.close(figure)


if __name__ == "__main__":
    if len(sys.argv) != 2 or not Path(sys.argv[1]).is_file():
        sys.exit("usage: python -m benchmarks.soak_report PATH.csv (an existing soak CSV)")
    source = Path(sys.argv[1])
    samples = read_csv(source)
    plot(samples, source.with_suffix(".png"))
    print(f"drew {source.with_suffix('.png')}")
    rate = samples[-1]["enqueued_total"] / samples[-1]["elapsed_s"]
    print("\n".join(overload_lines(samples, rate)) or "never behind by 10 s of load")
