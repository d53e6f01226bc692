"""The soak's samples: the CSV, the plot and the verdict against issue 16's criteria.

    python -m benchmarks.soak_report benchmarks/results/soak.csv   # draws soak.png again

The CSV has one row per lane (a schema and its retention mode) per sample; the columns
are COLUMNS, described in benchmarks/README.md ("The soak"). Item 5's criteria are judged
for each lane on its own rows; item 6's comparison sets the lanes of the one soak side by
side (every ratio from the same run, the lanes on the same server at the same time).

The criteria are written for 30 minutes; a shorter run (the 2-minute smoke) scales every
window in proportion, so its verdict is computed the same way but proves little.

- sizes plateau: the largest jobs-table size (pg_total_relation_size) and index size
  (pg_indexes_size) of the last 10 minutes is at most 10% above the largest of the 10
  minutes before; in a history lane, the history table's (all partitions) too;
- claim and enqueue p99: the p99 of every claim (enqueue call) in the last 5 minutes is
  at most 1.2 times the p99 of those in the first 5 (computed from every duration, not
  from the per-sample p99s in the CSV);
- worker RSS drift: the median RSS of the last 5 minutes is within 10% of the median of
  the 5 minutes after a 5-minute warm-up. The warm-up is the time it takes the worker's
  allocator arenas, pools and prepared statements to fill and the first autovacuums to
  run: growth in it is start-up, not drift.
"""

from __future__ import annotations

import csv
import math
import statistics
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

MB = 1024 * 1024
TEXT_COLUMNS = ("lane", "mode", "schema", "utc")
COLUMNS = (
    # which lane, when, and the machine and server (the same on every lane's row of a
    # sample)
    "lane", "mode", "schema", "elapsed_s", "utc", "load1", "cpu_busy_pct", "cpu_iowait_pct",
    "cpu_steal_pct", "wal_bytes_total", "wal_mb_per_s",
    # the lane's jobs table
    "total_bytes", "heap_bytes", "index_bytes", "live_tuples", "dead_tuples",
    "autovacuum_count", "autoanalyze_count", "vacuum_count", "autovacuum_ms_total",
    "vacuum_ms_total", "inserted_total", "deleted_total", "pending", "running",
    # the lane's history table: now (summed over the partitions there are), and
    # cumulative over every partition seen in the soak (a dropped one at its last value)
    "history_partitions", "history_total_bytes", "history_heap_bytes", "history_index_bytes",
    "history_live_tuples", "history_dead_tuples", "history_partitions_seen",
    "history_partitions_dropped", "history_inserted_total", "history_autovacuum_count",
    "history_vacuum_count", "history_autovacuum_ms_total", "history_vacuum_ms_total",
    # the two tables together
    "retained_bytes", "dead_tuples_all", "autovacuum_count_all", "autovacuum_ms_all",
    # the lane's load and its worker
    "enqueued_total", "enqueued_per_s", "producer_lag_jobs", "enqueue_calls",
    "enqueue_p50_ms", "enqueue_p99_ms", "done_total", "done_per_s", "claimed_total",
    "claim_calls", "claim_p50_ms", "claim_p99_ms", "worker_rss_bytes", "worker_cpu_pct",
    # the lane's statements on the server (pg_stat_statements)
    "claim_stmt_calls", "claim_stmt_ms_total", "claim_stmt_blocks_total",
    "claim_stmt_queryids", "claim_server_mean_ms", "claim_blocks_per_call",
    "retention_stmt_calls", "retention_stmt_ms_total",
)
FULL_MINUTES = 30.0
PLATEAU_MINUTES, PLATEAU_LIMIT = 10.0, 1.10
P99_MINUTES, P99_LIMIT = 5.0, 1.2
WARM_UP_MINUTES, RSS_MINUTES, RSS_LIMIT = 5.0, 5.0, 0.10
# Two lanes within 5% of each other on a measure are even on it.
EVEN_BAND = 0.05


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


class PartitionLedger:
    """The history table's partitions as the samples saw them. Sizes and tuples are the
    partitions there now; vacuum counts, vacuum times and rows inserted are cumulative
    over every partition seen, a dropped partition counted at the last values read
    before it went (its statistics go with it; what it did between that sample and the
    drop is not counted, at most one sample interval of one partition)."""

    CUMULATIVE = (("inserted_total", "history_inserted_total"),
                  ("autovacuum_count", "history_autovacuum_count"),
                  ("vacuum_count", "history_vacuum_count"),
                  ("autovacuum_ms_total", "history_autovacuum_ms_total"),
                  ("vacuum_ms_total", "history_vacuum_ms_total"))
    CURRENT = (("total_bytes", "history_total_bytes"), ("heap_bytes", "history_heap_bytes"),
               ("index_bytes", "history_index_bytes"), ("live_tuples", "history_live_tuples"),
               ("dead_tuples", "history_dead_tuples"))

    def __init__(self) -> None:
        self.last: dict[tuple[int, str], dict[str, Any]] = {}

    def update(self, leaves: Iterable[dict[str, Any]]) -> dict[str, Any]:
        """leaves: the history table's leaf relations now (relid, name, level, and the
        columns of CURRENT and CUMULATIVE); returns the sample's history columns."""
        present = list(leaves)
        for leaf in present:
            self.last[(leaf["relid"], leaf["name"])] = leaf
        partitions = [leaf for leaf in present if leaf["level"] > 0]
        row: dict[str, Any] = {
            "history_partitions": len(partitions),
            "history_partitions_seen": sum(1 for leaf in self.last.values()
                                           if leaf["level"] > 0),
        }
        row["history_partitions_dropped"] = row["history_partitions_seen"] - len(partitions)
        for column, name in self.CURRENT:
            row[name] = sum(_number(leaf[column]) for leaf in present)
        for column, name in self.CUMULATIVE:
            row[name] = sum(_number(leaf[column]) for leaf in self.last.values())
        return row


def _number(value: Any) -> float:
    return math.nan if value is None else float(value)


def add_derived(row: dict[str, Any]) -> None:
    """The columns of the jobs and history tables together."""
    row["retained_bytes"] = row["total_bytes"] + row["history_total_bytes"]
    row["dead_tuples_all"] = row["dead_tuples"] + row["history_dead_tuples"]
    row["autovacuum_count_all"] = row["autovacuum_count"] + row["history_autovacuum_count"]
    row["autovacuum_ms_all"] = (_number(row["autovacuum_ms_total"])
                                + _number(row["history_autovacuum_ms_total"]))


def csv_writer(file: IO[str]) -> csv.DictWriter[str]:
    writer = csv.DictWriter(file, COLUMNS)
    writer.writeheader()
    return writer


def read_csv(path: Path) -> list[dict[str, Any]]:
    """The rows; a CSV of the single-mode soak (no lane column) reads as lane delete."""
    with open(path, encoding="utf-8", newline="") as file:
        rows = [{k: (v if k in TEXT_COLUMNS else _number(v or None)) for k, v in row.items()}
                for row in csv.DictReader(file)]
    for row in rows:
        row.setdefault("lane", "delete")
        row.setdefault("mode", "delete")
        row.setdefault("schema", "pgbaton")
    return rows


def by_lane(rows: Iterable[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    lanes: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        lanes.setdefault(row["lane"], []).append(row)
    return lanes


def progress_line(row: dict[str, Any], with_lane: bool = False) -> str:
    history = (f"history {row['history_total_bytes'] / MB:7.1f} MB in "
               f"{row['history_partitions']:>2} parts  " if row["mode"] == "history" else "")
    return ((f"{row['lane']:>9} " if with_lane else "")
            + f"{row['elapsed_s'] / 60:5.1f} min  table {row['total_bytes'] / MB:7.1f} MB  "
            f"indexes {row['index_bytes'] / MB:6.1f} MB  {history}dead {row['dead_tuples']:>8}  "
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
    """The samples of one lane of a soak, with every claim's and enqueue's duration kept
    per sample for the windows' percentiles."""

    minutes: float
    rate: float
    rows: list[dict[str, Any]] = field(default_factory=list)
    claims: list[list[float]] = field(default_factory=list)
    enqueues: list[list[float]] = field(default_factory=list)
    settings: dict[str, Any] = field(default_factory=dict)
    worker_exit: int | None = None
    lane: str = "delete"
    mode: str = "delete"
    schema: str = "pgbaton"

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

    def column(self, name: str) -> list[float]:
        return [_number(row.get(name)) for row in self.rows]

    def sizes(self) -> list[tuple[str, str]]:
        sizes = [("total_bytes", "jobs table size (with indexes, TOAST)"),
                 ("index_bytes", "jobs index size")]
        if self.mode == "history":
            sizes.append(("history_total_bytes", "history table size (all partitions)"))
        return sizes

    def criteria(self) -> list[Criterion]:
        end, s = self.minutes, self.scale
        found = []
        for column, label in self.sizes():
            before = self._windowed(end - 2 * PLATEAU_MINUTES * s, end - PLATEAU_MINUTES * s,
                                    column)
            last = self._windowed(end - PLATEAU_MINUTES * s, end, column)
            if not before or not last or max(before) <= 0:
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
            ratio = last / first if first > 0 else math.nan
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
        else:
            found.append(Criterion("worker RSS drift", "too few samples", False))
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
            if not loads:
                continue
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
        last = self.rows[-1]
        lines.append(f"dead tuples in the jobs table: max "
                     f"{max(_finite(self.column('dead_tuples')), default=math.nan):.0f}; "
                     f"its autovacuums: {last['autovacuum_count']:.0f}; rows deleted from it "
                     f"(pruned or moved): {last['deleted_total']:.0f}; jobs done: "
                     f"{last['done_total']:.0f}")
        if self.mode == "history" or last.get("history_partitions_seen", 0):
            lines.append(f"history table: {last['history_partitions_seen']:.0f} partitions "
                         f"made, {last['history_partitions_dropped']:.0f} dropped, "
                         f"{last['history_partitions']:.0f} at the end; "
                         f"{last['history_inserted_total']:.0f} rows moved into it; "
                         f"autovacuums of its partitions: "
                         f"{last['history_autovacuum_count']:.0f}")
        lines.append(f"producer behind its schedule at the end: "
                     f"{last['producer_lag_jobs']:.0f} jobs; worker exit status "
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


@dataclass
class Measure:
    """One line of item 6's comparison: a value per lane, lower is better unless it is
    context only (better None)."""

    label: str
    value: Callable[[Soak], float]
    unit: str = ""
    digits: int = 1
    lower_is_better: bool | None = True
    headline: bool = False


def _last(column: str, divide: float = 1.0) -> Callable[[Soak], float]:
    return lambda soak: _number(soak.rows[-1].get(column)) / divide


def _finite(values: Iterable[float]) -> list[float]:
    return [v for v in values if not math.isnan(v)]


def _max(column: str, divide: float = 1.0) -> Callable[[Soak], float]:
    return lambda soak: max(_finite(soak.column(column)), default=math.nan) / divide


def _mean(column: str, divide: float = 1.0) -> Callable[[Soak], float]:
    def value(soak: Soak) -> float:
        found = _finite(soak.column(column))
        return statistics.mean(found) / divide if found else math.nan
    return value


def _per_call(total: str, calls: str) -> Callable[[Soak], float]:
    def value(soak: Soak) -> float:
        made = _number(soak.rows[-1].get(calls))
        return _number(soak.rows[-1].get(total)) / made if made else math.nan
    return value


def _p99(which: str) -> Callable[[Soak], float]:
    return lambda soak: percentile([d for batch in getattr(soak, which) for d in batch],
                                   0.99) * 1000


def _rows_kept(soak: Soak) -> float:
    last = soak.rows[-1]
    return float(last["live_tuples"] + last["history_live_tuples"])


def _bytes_per_row_kept(soak: Soak) -> float:
    """Jobs and history's bytes per row they hold at the end: the history mode keeps
    up to a partition's width more than the retention (a partition goes whole), so the
    sizes alone would charge it for rows the delete mode has already dropped."""
    rows = _rows_kept(soak)
    return _number(soak.rows[-1]["retained_bytes"]) / rows if rows else math.nan


MEASURES = (
    Measure("jobs table size at the end", _last("total_bytes", MB), " MB"),
    Measure("jobs table size, max", _max("total_bytes", MB), " MB", headline=True),
    Measure("jobs indexes, max", _max("index_bytes", MB), " MB"),
    Measure("history table (all partitions) at the end", _last("history_total_bytes", MB),
            " MB", lower_is_better=None),
    Measure("jobs + history at the end", _last("retained_bytes", MB), " MB"),
    Measure("jobs + history, max", _max("retained_bytes", MB), " MB", headline=True),
    Measure("rows kept at the end (n_live_tup, jobs + history)", _rows_kept, "", 0,
            lower_is_better=None),
    Measure("jobs + history per row kept, at the end", _bytes_per_row_kept, " bytes", 0),
    Measure("dead tuples (jobs + history), mean of samples", _mean("dead_tuples_all"), "", 0,
            headline=True),
    Measure("dead tuples (jobs + history), max", _max("dead_tuples_all"), "", 0,
            headline=True),
    Measure("autovacuum time, jobs + history partitions", _last("autovacuum_ms_all", 1000),
            " s", 2, headline=True),
    Measure("autovacuum time, of it on the history partitions",
            _last("history_autovacuum_ms_total", 1000), " s", 2, lower_is_better=None),
    Measure("autovacuum runs, jobs + history partitions", _last("autovacuum_count_all"), "", 0),
    Measure("the retention's statements on the server (pg_stat_statements)",
            _last("retention_stmt_ms_total", 1000), " s", 2),
    Measure("claim on the server, mean per call", _per_call("claim_stmt_ms_total",
                                                            "claim_stmt_calls"), " ms", 3),
    Measure("buffers touched per claim", _per_call("claim_stmt_blocks_total",
                                                   "claim_stmt_calls"), "", 1),
    Measure("claim p99, whole soak (worker's side)", _p99("claims"), " ms", 2),
    Measure("enqueue p99, whole soak", _p99("enqueues"), " ms", 2),
    Measure("worker RSS, max", _max("worker_rss_bytes", MB), " MB"),
    Measure("jobs done per second, mean of samples", _mean("done_per_s"), "", 0,
            lower_is_better=None),
    Measure("history partitions dropped in the soak", _last("history_partitions_dropped"), "",
            0, lower_is_better=None),
)


@dataclass
class Compared:
    measure: Measure
    values: list[float]
    ratios: list[float]  # each lane after the first against the first
    better: list[str]  # per ratio: the better lane's name, "even", or "" (context)


def compare(soaks: list[Soak]) -> list[Compared]:
    """Item 6's table: every measure for every lane, each lane after the first as a ratio
    to the first; all from the same soak."""
    found = []
    first = soaks[0]
    for measure in MEASURES:
        values = [measure.value(soak) for soak in soaks]
        ratios, better = [], []
        for soak, value in zip(soaks[1:], values[1:], strict=True):
            base = values[0]
            if math.isnan(value) or math.isnan(base):
                ratio = math.nan
            elif base == 0:
                ratio = 1.0 if value == 0 else math.inf
            else:
                ratio = value / base
            ratios.append(ratio)
            if measure.lower_is_better is None or math.isnan(ratio):
                better.append("")
            elif abs(ratio - 1) <= EVEN_BAND:
                better.append("even")
            else:
                better.append(soak.lane if (ratio < 1) == measure.lower_is_better
                              else first.lane)
        found.append(Compared(measure, values, ratios, better))
    return found


class Report:
    """The verdict of a soak of one or more lanes."""

    def __init__(self, soaks: list[Soak], settings: dict[str, Any]) -> None:
        self.soaks = soaks
        self.settings = settings

    def rows(self) -> list[dict[str, Any]]:
        return [row for soak in self.soaks for row in soak.rows]

    def passed(self) -> bool:
        return all(soak.passed() for soak in self.soaks)

    def markdown(self, plot_name: str) -> str:
        settings, soaks = self.settings, self.soaks
        drain = settings.get("measured_drain")
        rate = float(settings.get("rate") or sum(soak.rate for soak in soaks))
        names = " and ".join(soak.lane for soak in soaks)
        title = (f"# Soak: {soaks[0].minutes:.3g} minutes at {rate:.0f} jobs/s"
                 + (f", retention modes side by side: {names}" if len(soaks) > 1 else
                    f", retention mode {soaks[0].mode}"))
        lines = [
            title, "",
            f"![the soak's samples]({plot_name})", "",
            f"- rate: {rate:.0f} jobs/s"
            + (f", half the measured drain of {drain:.0f} jobs/s" if drain else " (given)")
            + (f", shared by {len(soaks)} lanes ({soaks[0].rate:.0f} jobs/s each, each its "
               f"own producer and worker process, all on one server at the same time)"
               if len(soaks) > 1 else "")
            + f"; worker concurrency {settings.get('concurrency')}; producer: one "
              f"enqueue_many call every {settings.get('tick')} s",
        ]
        for lane in settings.get("lanes", []):
            options = ", ".join(f"{k}={v!r}" for k, v in lane["options"].items())
            lines.append(f"- lane {lane['name']}: schema {lane['schema']}, "
                         f"WorkerConfig({options})")
        lines += [
            f"- pgbaton: {settings.get('pgbaton_path')} at {settings.get('pgbaton_commit')}",
            f"- server: embedded PostgreSQL {settings.get('server_version')}, autovacuum "
            f"{settings.get('autovacuum')} (naptime {settings.get('autovacuum_naptime')}, "
            f"scale factor {settings.get('autovacuum_vacuum_scale_factor')}, workers "
            f"{settings.get('autovacuum_max_workers')}), shared_buffers "
            f"{settings.get('shared_buffers')}, synchronous_commit "
            f"{settings.get('synchronous_commit')}",
            f"- machine: {_cpus()} CPUs; load average at the start "
            f"{settings.get('load_at_start')}",
            "",
            "## Item 5: steady for half an hour" + (", each lane" if len(soaks) > 1 else ""),
            "",
        ]
        for soak in soaks:
            if len(soaks) > 1:
                lines += [f"### Lane {soak.lane} (schema {soak.schema}, retention mode "
                          f"{soak.mode})", ""]
            lines += ["| criterion | measured | verdict |", "|---|---|---|"]
            lines += [f"| {c.name} | {c.measured} | {'pass' if c.passed else 'FAIL'} |"
                      for c in soak.criteria()]
            lines += ["", *[f"- {line}" for line in soak.context()], "",
                      f"**Lane {soak.lane}: "
                      f"{'no drift' if soak.passed() else 'drift or failure'}**", ""]
        if len(soaks) > 1:
            lines += self.comparison_markdown()
        lines += [f"**Verdict (item 5): {'no drift' if self.passed() else 'drift or failure'}"
                  + (" in every lane" if len(soaks) > 1 and self.passed() else "") + "**", ""]
        return "\n".join(lines)

    def comparison_markdown(self) -> list[str]:
        soaks = self.soaks
        first = soaks[0]
        compared = compare(soaks)
        header = ("| measure | " + " | ".join(s.lane for s in soaks) + " | "
                  + " | ".join(f"{s.lane}/{first.lane}" for s in soaks[1:]) + " | better |")
        lines = [
            "## Item 6: retention without bloat, side by side",
            "",
            f"Every figure from this one soak: the lanes ran at the same time on the same "
            f"server, so they met the same machine minute by minute. Vacuum figures are "
            f"cumulative over the soak (pg_stat_user_tables' autovacuum_count and "
            f"total_autovacuum_time; a history partition counted at its last values "
            f"before it was dropped). Lower is better, except the lines marked context; "
            f"within {EVEN_BAND:.0%} is even.",
            "",
            header,
            "|---|" + "---|" * (2 * len(soaks)),
        ]
        for item in compared:
            measure = item.measure
            values = [_format(v, measure.digits) + measure.unit for v in item.values]
            ratios = [_format_ratio(r) for r in item.ratios]
            better = "; ".join(b for b in item.better if b) or "context"
            label = f"**{measure.label}**" if measure.headline else measure.label
            lines.append(f"| {label} | " + " | ".join(values) + " | " + " | ".join(ratios)
                         + f" | {better} |")
        lines.append("")
        for index, soak in enumerate(soaks[1:]):
            wins = {name: [c.measure.label for c in compared if c.better[index] == name]
                    for name in (soak.lane, first.lane, "even")}
            headline = [c for c in compared if c.measure.headline]
            scored = {name: sum(1 for c in headline if c.better[index] == name)
                      for name in (soak.lane, first.lane)}
            lines += [
                f"- {soak.lane} is better on: {'; '.join(wins[soak.lane]) or 'nothing'}",
                f"- {first.lane} is better on: {'; '.join(wins[first.lane]) or 'nothing'}",
                f"- even: {'; '.join(wins['even']) or 'nothing'}",
                f"- on item 6's own measures (table size, dead tuples, vacuum work; bold "
                f"above): {soak.lane} {scored[soak.lane]}, {first.lane} "
                f"{scored[first.lane]}, even "
                f"{len(headline) - scored[soak.lane] - scored[first.lane]} of {len(headline)}"
                + _winner(scored, len(headline)),
            ]
        wal = _finite(row.get("wal_mb_per_s", math.nan) for row in first.rows) or [math.nan]
        total = (_number(first.rows[-1].get("wal_bytes_total"))
                 - _number(first.rows[0].get("wal_bytes_total"))) / MB
        lines += [
            f"- WAL, the whole server (pg_stat_wal; the lanes share it, it cannot be split "
            f"between them): {total:.0f} MB from the first sample to the last, "
            f"{statistics.mean(wal):.2f} MB/s mean of samples, {max(wal):.2f} max",
            "",
        ]
        return lines


def _winner(scored: dict[str, int], of: int) -> str:
    """A lane wins item 6 when it is better on more than half of its measures; fewer
    (the rest even, or split) is no clear winner: an A/A soak of two identical lanes
    differs by more than the even band on a measure or two."""
    for name, count in scored.items():
        if count > of / 2:
            return f": **{name} wins**"
    return ": **no clear winner** (better on more than half of them is needed)"


def _format(value: float, digits: int) -> str:
    if math.isnan(value):
        return "n/a"
    return f"{value:,.{digits}f}"


def _format_ratio(ratio: float) -> str:
    if math.isnan(ratio):
        return "n/a"
    if math.isinf(ratio):
        return "(from 0)"
    return f"{ratio:.2f}x"


def _cpus() -> int:
    import os

    return os.cpu_count() or 0


# Each panel: its y label, its lines (label, column, divisor), and an optional series on
# a right-hand axis. Every lane gets a column of these panels, the same y range per row.
PANELS: list[tuple[str, list[tuple[str, str, float]], tuple[str, str, float] | None]] = [
    ("sizes (MB)", [("jobs table (pg_total_relation_size)", "total_bytes", MB),
                    ("jobs heap", "heap_bytes", MB),
                    ("jobs indexes (pg_indexes_size)", "index_bytes", MB),
                    ("history table, all partitions", "history_total_bytes", MB),
                    ("jobs + history", "retained_bytes", MB)],
     ("history partitions", "history_partitions", 1)),
    ("tuples", [("dead, jobs", "dead_tuples", 1), ("dead, history", "history_dead_tuples", 1),
                ("live, jobs", "live_tuples", 1), ("live, history", "history_live_tuples", 1)],
     None),
    ("autovacuum time (s, cumulative)",
     [("jobs + history", "autovacuum_ms_all", 1000), ("jobs", "autovacuum_ms_total", 1000),
      ("history partitions", "history_autovacuum_ms_total", 1000)],
     ("autovacuum runs (jobs + history)", "autovacuum_count_all", 1)),
    ("claim (ms)", [("p99, worker's side", "claim_p99_ms", 1),
                    ("p50, worker's side", "claim_p50_ms", 1),
                    ("server mean (pg_stat_statements)", "claim_server_mean_ms", 1)],
     ("buffers touched per claim", "claim_blocks_per_call", 1)),
    ("enqueue call (ms)", [("p99", "enqueue_p99_ms", 1), ("p50", "enqueue_p50_ms", 1)], None),
    ("worker RSS (MB)", [("RSS", "worker_rss_bytes", MB)],
     ("worker CPU (%)", "worker_cpu_pct", 1)),
    ("jobs/s", [("done per second", "done_per_s", 1),
                ("enqueued per second", "enqueued_per_s", 1)],
     ("load average (1 min)", "load1", 1)),
    ("machine CPU (%)", [("busy", "cpu_busy_pct", 1),
                         ("waiting for the disk", "cpu_iowait_pct", 1)],
     ("WAL, whole server (MB/s)", "wal_mb_per_s", 1)),
]


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    """One column of panels per lane, side by side, each row of panels on the same
    y axis (and the same right-hand axis), so the lanes compare at a glance."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    lanes = by_lane(rows)

    def series(lane_rows: list[dict[str, Any]], column: str, divide: float) -> list[float]:
        return [_number(row.get(column)) / divide for row in lane_rows]

    def top(values: Iterable[float]) -> float:
        finite = [v for v in _finite(values) if not math.isinf(v)]
        return max(finite, default=0.0) * 1.05 or 1.0

    figure, axes = plt.subplots(len(PANELS), len(lanes), figsize=(8 * len(lanes), 22),
                                sharex=True, sharey="row", squeeze=False)
    for column, (name, lane_rows) in enumerate(lanes.items()):
        minutes = [row["elapsed_s"] / 60 for row in lane_rows]
        for row_index, (ylabel, lines, right) in enumerate(PANELS):
            axis = axes[row_index][column]
            for label, key, divide in lines:
                axis.plot(minutes, series(lane_rows, key, divide), label=label)
            axis.set_ylim(0, top(v for rs in lanes.values() for _, key, divide in lines
                                 for v in series(rs, key, divide)))
            axis.grid(alpha=0.3)
            if column == 0:
                axis.set_ylabel(ylabel)
            handles, labels = axis.get_legend_handles_labels()
            if right is not None:
                twin = axis.twinx()
                twin.plot(minutes, series(lane_rows, right[1], right[2]), color="grey",
                          linestyle=":", label=right[0])
                twin.set_ylim(0, top(v for rs in lanes.values()
                                     for v in series(rs, right[1], right[2])))
                if column == len(lanes) - 1:
                    twin.set_ylabel(right[0])
                more_handles, more_labels = twin.get_legend_handles_labels()
                handles, labels = handles + more_handles, labels + more_labels
            axis.legend(handles, labels, loc="upper left", fontsize="x-small")
        first = lane_rows[0]
        axes[0][column].set_title(f"lane {name}: schema {first['schema']}, "
                                  f"retention mode {first['mode']}")
        axes[-1][column].set_xlabel("minutes")
    figure.suptitle("pgbaton soak: steady load, pruner on, embedded PostgreSQL, one sample "
                    "every 10 s" + (", the lanes side by side on one server"
                                    if len(lanes) > 1 else ""))
    figure.tight_layout(rect=(0, 0, 1, 0.98))
    figure.savefig(path, dpi=70)
    plt.close(figure)


if __name__ == "__main__":
    if len(sys.argv) != 2 or not Path(sys.argv[1]).is_file():
        sys.exit("usage: python -m benchmarks.soak_report PATH.csv (an existing soak CSV)")
    source = Path(sys.argv[1])
    samples = read_csv(source)
    plot(samples, source.with_suffix(".png"))
    print(f"drew {source.with_suffix('.png')}")
    for lane, lane_rows in by_lane(samples).items():
        rate = lane_rows[-1]["enqueued_total"] / lane_rows[-1]["elapsed_s"]
        print(f"lane {lane}: " + ("; ".join(overload_lines(lane_rows, rate))
                                  or "never behind by 10 s of load"))
