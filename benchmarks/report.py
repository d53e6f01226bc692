"""The report: medians and spreads of the repeats, ratios to the best peer and to the
raw-SQL ceiling, as one markdown table plus the facts needed to read it.

    python -m benchmarks.report [benchmarks/results/latest.json]   # re-render latest.md
"""

from __future__ import annotations

import json
import re
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from .common import summarize
from .held_xmin import DONE_FLOOR, WAIT_P99_CEILING_S

HIGHER, LOWER = "higher", "lower"
DASH, TIMES = "\u2013", "\u00d7"  # escaped: ruff flags the literal characters


def load_concurrency(plan: dict[str, Any]) -> int:
    """The drain whose memory peak is "RSS under load" and whose profile is recorded:
    concurrency 32, the issue's, when the run has it; else the highest."""
    return 32 if 32 in plan["concurrency"] else max(plan["concurrency"])


def summary_rows(plan: dict[str, Any]) -> list[dict[str, Any]]:
    """The rows of the summary table: (case, metric) pairs in reading order."""
    rows = [
        ("enqueue_single", "jobs_per_s", "Enqueue, one job per call", "jobs/s", HIGHER),
        ("enqueue_bulk", "jobs_per_s",
         f"Enqueue in bulk, {plan['bulk_batch']:,} jobs per call", "jobs/s", HIGHER),
    ]
    for c in plan["concurrency"]:
        rows.append((f"drain_c{c}", "jobs_per_s",
                     f"Drain {plan['jobs']:,} no-op jobs, concurrency {c}", "jobs/s", HIGHER))
    for c in plan["concurrency"]:
        rows.append((f"drain_c{c}", "cpu_us_per_job",
                     f"Worker CPU per job, drain at concurrency {c}", "\u00b5s", LOWER))
    # What a job costs the server, enqueue (in bulk) and claim + complete (the drain).
    load = load_concurrency(plan)
    rows += [
        ("enqueue_bulk", "server_cpu_us_per_job", "Server CPU per job, enqueue in bulk",
         "\u00b5s", LOWER),
        ("enqueue_bulk", "wal_bytes_per_job", "WAL per job, enqueue in bulk", "B", LOWER),
        (f"drain_c{load}", "server_cpu_us_per_job",
         f"Server CPU per job, drain at concurrency {load}", "\u00b5s", LOWER),
        (f"drain_c{load}", "wal_bytes_per_job",
         f"WAL per job, drain at concurrency {load}", "B", LOWER),
    ]
    rows += [
        ("latency", "p50_ms", "Enqueue-to-start latency at an idle worker, p50", "ms", LOWER),
        ("latency", "p99_ms", "Enqueue-to-start latency at an idle worker, p99", "ms", LOWER),
        ("latency", "ack_p50_ms",
         "Latency from the acknowledged enqueue (call returned) to start, p50", "ms", LOWER),
        ("latency", "ack_p99_ms",
         "Latency from the acknowledged enqueue (call returned) to start, p99", "ms", LOWER),
        ("latency", "rss_idle_mb", "Worker RSS, idle", "MB", LOWER),
        (f"drain_c{load_concurrency(plan)}", "rss_peak_mb",
         f"Worker RSS under load (peak, drain at concurrency {load_concurrency(plan)})",
         "MB", LOWER),
    ]
    for n in plan["claim_rows"]:
        rows.append((f"claim_{n}", "claim_p50_ms",
                     f"Claim of one job with {n:,} done rows in the table, p50", "ms", LOWER))
        rows.append((f"claim_{n}", "claim_p99_ms",
                     f"Claim of one job with {n:,} done rows in the table, p99", "ms", LOWER))
    for n in plan.get("claim_blocked", []):
        rows.append((f"claim_blocked_{n}", "claim_p50_ms",
                     f"Claim of one job behind {n:,} jobs of a paused queue, p50", "ms",
                     LOWER))
    return [dict(zip(("case_id", "metric", "title", "unit", "better"), r, strict=True))
            for r in rows]


def _best(cells: dict[str, dict[str, Any]], names: list[str], better: str) -> str | None:
    measured = [n for n in names if "median" in cells.get(n, {})]
    if not measured:
        return None
    pick = max if better == HIGHER else min
    return pick(measured, key=lambda n: cells[n]["median"])


def is_python(name: str, info: dict[str, Any]) -> bool:
    # Runs recorded before systems said so: Graphile Worker is the one that is not Python.
    return bool(info.get("python", not name.startswith("graphile")))


def summarize_results(results: dict[str, Any]) -> list[dict[str, Any]]:
    systems = results["systems"]
    peers = [n for n, s in systems.items() if s.get("role") == "peer"]
    python_peers = [n for n in peers if is_python(n, systems[n])]
    ceilings = [n for n, s in systems.items() if s.get("role") == "ceiling"]
    summary = []
    for row in summary_rows(results["meta"]["plan"]):
        cells: dict[str, dict[str, Any]] = {}
        for name in systems:
            runs = [r for r in results["runs"]
                    if r["case_id"] == row["case_id"] and r["system"] == name]
            if not runs:
                continue
            values: list[float] = []
            errors = [r["error"] for r in runs if "error" in r]
            capped = False
            for r in runs:
                if "error" in r or row["metric"] not in r["metrics"]:
                    continue  # failed, or recorded before the harness measured it
                value = r["metrics"][row["metric"]]
                values += value if isinstance(value, list) else [value]
                # The cap shortens the timed work; a memory peak is still a peak.
                if row["metric"] == "jobs_per_s":
                    capped = capped or bool(r.get("info", {}).get("capped"))
            if values:
                cells[name] = {**summarize(values), "capped": capped, "failed_runs": len(errors)}
            elif errors:
                cells[name] = {"error": errors[0]}
        if not cells:
            continue  # the case was not run
        best_peer = _best(cells, peers, row["better"])
        best_python_peer = _best(cells, python_peers, row["better"])
        ceiling = _best(cells, ceilings, row["better"])
        subject = cells.get("pgbaton", {}).get("median")
        summary.append({
            **row,
            "cells": cells,
            "best_peer": best_peer,
            "best_python_peer": best_python_peer,
            "ceiling": ceiling,
            "pgbaton_vs_best_peer": (subject / cells[best_peer]["median"]
                                     if subject and best_peer else None),
            "pgbaton_vs_best_python_peer": (subject / cells[best_python_peer]["median"]
                                            if subject and best_python_peer else None),
            "pgbaton_vs_ceiling": (subject / cells[ceiling]["median"]
                                   if subject and ceiling else None),
        })
    return summary


# -- markdown ----------------------------------------------------------------------------


def number(value: float) -> str:
    if abs(value) >= 100:
        return f"{value:,.0f}"
    if abs(value) >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


def cell_text(cell: dict[str, Any] | None, notes: list[str], where: str) -> str:
    if cell is None:
        return DASH
    if "error" in cell:
        notes.append(f"{where}: {cell['error']}")
        return f"failed [{len(notes)}]"
    text = number(cell["median"])
    if cell["n"] > 1:
        text += f" ±{cell['spread_pct'] / 2:.0f}%"
    if cell["capped"]:
        text += " †"
    if cell["failed_runs"]:
        notes.append(f"{where}: {cell['failed_runs']} of the runs failed (see latest.json)")
        text += f" [{len(notes)}]"
    return text


def ratio_text(ratio: float | None, name: str | None, labels: dict[str, str]) -> str:
    if ratio is None or name is None:
        return DASH
    return f"{ratio:.2f}{TIMES} ({labels[name]})"


def render(results: dict[str, Any]) -> str:
    meta, systems = results["meta"], results["systems"]
    plan = meta["plan"]
    summary = results.get("summary") or summarize_results(results)
    names = list(systems)
    labels = {n: systems[n].get("label", n) for n in names}
    machine = meta["machine"]
    lines = [
        "# pgbaton beside its peers",
        "",
        f"Mode **{plan['mode']}**, {meta['started_at']}, {meta['duration_seconds'] // 60} min. "
        f"Machine: {machine['cpus']} cores, {machine['memory_gb']} GB, Python "
        f"{machine['python']}, load average at start {machine['load_average_at_start']}. "
        f"Server: PostgreSQL {meta['server_settings'].get('server_version')} "
        f"({meta['server']}; shared_buffers {meta['server_settings'].get('shared_buffers')}, "
        f"synchronous_commit {meta['server_settings'].get('synchronous_commit')}). "
        f"Command: `{meta['command']}`.",
        "",
    ]
    if plan["mode"] == "quick":
        lines += ["> Quick mode: few jobs and one repeat. It shows that the harness works; "
                  "its numbers are not a measurement.", ""]
    notes: list[str] = []
    header = ["Measurement", "better", *[labels[n] for n in names],
              "pgbaton ÷ best peer", "pgbaton ÷ best Python peer", "pgbaton ÷ ceiling"]
    lines.append("| " + " | ".join(header) + " |")
    lines.append("|" + "|".join(["---"] * 2 + ["--:"] * len(names) + ["--:"] * 3) + "|")
    for row in summary:
        cells = [cell_text(row["cells"].get(n), notes, f"{labels[n]}, {row['title']}")
                 for n in names]
        lines.append("| " + " | ".join([
            f"{row['title']} ({row['unit']})", row["better"], *cells,
            ratio_text(row["pgbaton_vs_best_peer"], row["best_peer"], labels),
            ratio_text(row.get("pgbaton_vs_best_python_peer"), row.get("best_python_peer"),
                       labels),
            ratio_text(row["pgbaton_vs_ceiling"], row["ceiling"], labels),
        ]) + " |")
    lines += [
        "",
        "Each cell is the median of the repeats; ± is half their range as a percentage of "
        "the median (repeats: "
        f"{plan['repeats']}; for claim time, rounds on one filled table). A ratio is "
        "pgbaton's median divided by the other's: above 1 is better for throughput, below "
        "1 is better for latency, memory and claim time. The best peer, the best Python "
        "peer (every peer but Graphile Worker, which is Node.js) and the ceiling are "
        "chosen per row; the ceiling is the best of the raw-SQL loops. "
        f"† the run hit the {plan['time_cap']:.0f} s time cap before all "
        f"{plan['jobs']:,} jobs were done; its rate is over the jobs done (drain: started) "
        "by then. "
        f"{DASH} not measured for that system.",
        "",
    ]
    if "base" in meta:
        lines += render_against_base(compare_with_base(results, summary), meta, labels)
    lines += render_targets(evaluate_targets(results, summary), labels)
    lines += render_flow_targets(summary, labels)
    lines += render_held_xmin(held_xmin_rows(results), plan, labels)
    if notes:
        lines.append("Failures:")
        lines.append("")
        lines += [f"{i}. {note}" for i, note in enumerate(notes, 1)]
        lines.append("")
    lines += render_systems(systems)
    lines += ["", "## Method", "", METHOD.format(**plan), ""]
    claims = [r for r in results["runs"] if r["case"] == "claim_time" and "info" in r]
    if claims:
        lines += ["Claim-time tables:", ""]
        for r in claims:
            info = r["info"]
            lines.append(f"- {labels[r['system']]}, {info['done_rows']:,} done rows: table "
                         f"{info['table_mb']:,.0f} MB with indexes, filled in "
                         f"{info['fill_seconds']:.1f} s.")
        lines.append("")
    profile = results.get("profile")
    if profile:
        lines += ["## Where pgbaton's worker spends its time", ""]
        if "error" in profile:
            lines.append(f"The profile failed: {profile['error']}")
        else:
            top = profile["top"]
            lines.append(
                f"py-spy at 250 Hz, drain at concurrency {load_concurrency(plan)}; "
                f"{top['samples']:,} samples with pgbaton's worker code on the stack "
                "(percentages below are of those). Files: "
                + ", ".join(f"`{f}`" for f in profile["files"].values()) + "."
            )
            lines += ["", "By worker task: " + ", ".join(
                f"{task} {pct:.0f}%" for task, pct in top["tasks"].items()) + ".", ""]
            lines += ["| function (innermost frame) | self % | total % |", "|---|--:|--:|"]
            for entry in top["functions"]:
                lines.append(f"| `{entry['function']}` | {entry['self_pct']:.1f} | "
                             f"{entry['total_pct']:.1f} |")
        lines.append("")
    return "\n".join(lines)


def render_systems(systems: dict[str, dict[str, Any]]) -> list[str]:
    lines = ["## Systems", ""]
    for name, info in systems.items():
        if "error" in info:
            lines.append(f"- **{name}**: not measured, {info['error']}")
            continue
        version = f" {info['version']}" if info.get("version") else ""
        lines.append(f"- **{info['label']}{version}**. Concurrency N: "
                     f"{info['concurrency_meaning']} Settings: {info['settings']}")
    return lines


# -- issues 16's and 34's targets ----------------------------------------------------------------

# The raw-SQL loops that claim in batches: "the batched raw ceiling".
BATCHED_CEILINGS = ("raw100", "raw100n")
TARGET_DRAIN = "drain_c32"


def _cells(summary: list[dict[str, Any]], case_id: str, metric: str) -> dict[str, Any]:
    for row in summary:
        if row["case_id"] == case_id and row["metric"] == metric:
            return dict(row["cells"])
    return {}


def _median(cells: dict[str, Any], name: str | None) -> float | None:
    if name is None:
        return None
    value = cells.get(name, {}).get("median")
    return None if value is None else float(value)


def evaluate_targets(results: dict[str, Any],
                     summary: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Issue 16's targets, each judged from this run's own medians, for pgbaton at its
    defaults and for pgbaton's best configuration in the row (the subject or one of its
    "option" systems: claiming ahead, several processes). A target whose reference was
    not measured in this run is "not measured", never met."""
    systems = results["systems"]
    peers = [n for n, s in systems.items() if s.get("role") == "peer"]
    python_peers = [n for n in peers if is_python(n, systems[n])]
    graphiles = [n for n in peers if not is_python(n, systems[n])]
    pgbatons = [n for n, s in systems.items() if s.get("role") in ("subject", "option")]
    # The worker of several processes is named pgbaton_pN / pgbaton_b_pN.
    one_process = [n for n in pgbatons if "_p" not in n]
    graphile_tuned = [n for n in graphiles if n.endswith("_b")] or graphiles
    specs: list[tuple[str, str, str, str, list[str] | None, str, float, list[str]]] = [
        # (target, case_id, metric, better, references (None: the value itself),
        #  comparison, threshold, the pgbatons the "best" column chooses among)
        ("Drain c32 \u2265 0.8\u00d7 Graphile Worker at its best settings (16, 34)",
         TARGET_DRAIN, "jobs_per_s", HIGHER, graphiles, ">=", 0.8, pgbatons),
        ("Drain c32, best configuration \u2265 1.0\u00d7 Graphile Worker tuned (34)",
         TARGET_DRAIN, "jobs_per_s", HIGHER, graphile_tuned, ">=", 1.0, pgbatons),
        ("Drain c32, one process \u2265 0.8\u00d7 Graphile Worker tuned (34)",
         TARGET_DRAIN, "jobs_per_s", HIGHER, graphile_tuned, ">=", 0.8, one_process),
        ("Worker CPU per job, drain c32 \u2264 Graphile Worker tuned's (34)",
         TARGET_DRAIN, "cpu_us_per_job", LOWER, graphile_tuned, "<=", 1.0, pgbatons),
        ("Drain c32 \u2265 0.8\u00d7 the batched raw ceiling (16)",
         TARGET_DRAIN, "jobs_per_s", HIGHER, list(BATCHED_CEILINGS), ">=", 0.8, pgbatons),
        ("Drain c32 \u2265 4\u00d7 the best Python peer (16)",
         TARGET_DRAIN, "jobs_per_s", HIGHER, python_peers, ">=", 4.0, pgbatons),
        ("Enqueue, one per call \u2265 0.9\u00d7 the raw single-insert loop (16)",
         "enqueue_single", "jobs_per_s", HIGHER, ["raw1"], ">=", 0.9, pgbatons),
        ("Enqueue, one per call, ahead of every peer (16, 34)",
         "enqueue_single", "jobs_per_s", HIGHER, peers, ">", 1.0, pgbatons),
        ("Enqueue in bulk \u2265 1.5\u00d7 the best peer (16)",
         "enqueue_bulk", "jobs_per_s", HIGHER, peers, ">=", 1.5, pgbatons),
        ("Enqueue in bulk \u2265 1.0\u00d7 Graphile Worker's add_jobs (34)",
         "enqueue_bulk", "jobs_per_s", HIGHER, graphiles, ">=", 1.0, pgbatons),
        ("Latency from the acknowledged enqueue, p50 \u2264 1.0 ms (16, 34)",
         "latency", "ack_p50_ms", LOWER, None, "<=", 1.0, pgbatons),
        ("Latency from the acknowledged enqueue, p99 < 5 ms (16)",
         "latency", "ack_p99_ms", LOWER, None, "<", 5.0, pgbatons),
    ]
    out = []
    for title, case_id, metric, better, references, comparison, threshold, among in specs:
        cells = _cells(summary, case_id, metric)
        ratio = references is not None
        reference = _best(cells, references, better) if references else None
        verdicts = [
            _judge(name, cells=cells, ratio=ratio, reference=reference,
                   comparison=comparison, threshold=threshold)
            for name in ("pgbaton" if "pgbaton" in cells else None,
                         _best(cells, among, better))
        ]
        out.append({
            "target": title, "case_id": case_id, "metric": metric,
            "reference": reference, "ratio": ratio, "threshold": threshold,
            "defaults": verdicts[0], "best": verdicts[1],
        })
    return out


def _judge(name: str | None, *, cells: dict[str, Any], ratio: bool, reference: str | None,
           comparison: str, threshold: float) -> dict[str, Any] | None:
    """One system against one target: its median, or its ratio to the reference's."""
    value = _median(cells, name)
    if value is None:
        return None
    if ratio:
        base = _median(cells, reference)
        if not base:
            return {"system": name, "value": None, "met": None}
        value /= base
    met = {">=": value >= threshold, ">": value > threshold,
           "<=": value <= threshold, "<": value < threshold}[comparison]
    return {"system": name, "value": value, "met": met}


def render_targets(targets: list[dict[str, Any]], labels: dict[str, str]) -> list[str]:
    lines = [
        "## Issues 16's and 34's targets in this run",
        "",
        "Each verdict comes from this run's medians: the ratio to the reference named (its "
        "best system in that row), or the latency itself. \"Best configuration\" is "
        "pgbaton's best in that row among its defaults and its worker options measured "
        "(claiming ahead, several processes).",
        "",
        "| target | reference | pgbaton, defaults | | pgbaton, best configuration | |",
        "|---|---|--:|---|--:|---|",
    ]
    for t in targets:
        reference = labels.get(t["reference"], t["reference"]) if t["ratio"] else "\u2013"
        cols = []
        for verdict in (t["defaults"], t["best"]):
            if verdict is None or verdict["value"] is None:
                cols += [DASH, "not measured"]
                continue
            value = (f"{verdict['value']:.2f}{TIMES}" if t["ratio"]
                     else f"{verdict['value']:.2f} ms")
            if verdict is t["best"]:
                value += f" ({labels.get(verdict['system'], verdict['system'])})"
            cols += [value, "**met**" if verdict["met"] else "missed"]
        if t["reference"] is None and t["ratio"]:
            reference = "not measured"
        lines.append("| " + " | ".join([t["target"], reference, *cols]) + " |")
    lines.append("")
    return lines


FLOW_SPECS = (
    # (target, case_id, system, reference system, comparison, threshold)
    ("Queue limit 8: drain at concurrency 8 \u2265 0.8\u00d7 an unlimited worker's",
     "drain_c8", "pgbaton_limit8", "pgbaton", ">=", 0.8),
    ("Claim behind 100,000 jobs of a paused queue \u2264 2\u00d7 a claim behind none "
     "(p50)", "claim_blocked_100000", "pgbaton", "claim_blocked_0", "<=", 2.0),
)


def render_flow_targets(summary: list[dict[str, Any]], labels: dict[str, str]) -> list[str]:
    """Issue 14's two speed targets, from this run's medians: the drain of a queue limited
    to 8 against the unlimited drain, and the claim behind blocked jobs against the claim
    behind none."""
    rows = []
    for title, case_id, system, reference, comparison, threshold in FLOW_SPECS:
        if reference.startswith("claim_blocked_"):
            value = _median(_cells(summary, case_id, "claim_p50_ms"), system)
            base = _median(_cells(summary, reference, "claim_p50_ms"), system)
            against = f"{labels.get(system, system)}, {reference.rsplit('_', 1)[1]} blocked"
        else:
            cells = _cells(summary, case_id, "jobs_per_s")
            value, base = _median(cells, system), _median(cells, reference)
            against = labels.get(reference, reference)
        if value is None or not base:
            rows.append(f"| {title} | {against} | {DASH} | not measured |")
            continue
        ratio = value / base
        met = ratio >= threshold if comparison == ">=" else ratio <= threshold
        rows.append(f"| {title} | {against} | {ratio:.2f}{TIMES} | "
                    f"{'**met**' if met else 'missed'} |")
    return ["## Issue 14's speed targets in this run", "",
            "| target | reference | ratio | |", "|---|---|--:|---|", *rows, ""]


# -- against the base ----------------------------------------------------------------

# "Within 3% of today's": the checkout no worse than the base by more than this.
BASE_TOLERANCE = 0.03
# The rows compared: every drain the run has, the enqueues, latency p50.
BASE_METRICS = (("enqueue_single", "jobs_per_s"), ("enqueue_bulk", "jobs_per_s"),
                ("drain_c", "jobs_per_s"), ("latency", "p50_ms"), ("latency", "ack_p50_ms"))


def compare_with_base(results: dict[str, Any],
                      summary: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each checkout system against its base system (`base_of`) in the rows of
    BASE_METRICS: checkout / base, how much better (+) or worse (-) in percent, whether
    it is within BASE_TOLERANCE (worse by no more; better is within), and both sides'
    noise: half the range of their repeats, in percent of the median (None: one run).
    A row that only one side of a pair has (or failed in) is there, not measured."""
    pairs = [(info["base_of"], name) for name, info in results["systems"].items()
             if info.get("base_of") and info["base_of"] in results["systems"]]
    out = []
    for row in summary:
        if not any(row["case_id"].startswith(case) and row["metric"] == metric
                   and (case != "drain_c" or row["case_id"][len(case):].isdigit())
                   for case, metric in BASE_METRICS):
            continue
        for checkout, base in pairs:
            mine, theirs = row["cells"].get(checkout, {}), row["cells"].get(base, {})
            if not mine and not theirs:
                continue  # neither was run in this row (pgbaton_b has no enqueue case)
            entry: dict[str, Any] = {
                "title": row["title"], "unit": row["unit"], "case_id": row["case_id"],
                "metric": row["metric"], "better": row["better"], "checkout": checkout,
                "base": base, "checkout_median": mine.get("median"),
                "base_median": theirs.get("median"), "ratio": None, "change_pct": None,
                "within": None, "checkout_noise_pct": _noise(mine),
                "base_noise_pct": _noise(theirs),
            }
            if entry["checkout_median"] is not None and entry["base_median"]:
                ratio = entry["checkout_median"] / entry["base_median"]
                # Positive: the checkout is better (faster, or quicker to start).
                change = ratio - 1 if row["better"] == HIGHER else 1 - ratio
                entry.update(ratio=ratio, change_pct=change * 100,
                             within=change >= -BASE_TOLERANCE)
            out.append(entry)
    return out


def _noise(cell: dict[str, Any]) -> float | None:
    if cell.get("n", 0) < 2:
        return None
    return float(cell["spread_pct"]) / 2


def render_against_base(rows: list[dict[str, Any]], meta: dict[str, Any],
                        labels: dict[str, str]) -> list[str]:
    base, checkout = meta["base"], meta.get("checkout", {})
    mine = checkout.get("commit", "?")[:10] + (
        " with uncommitted changes" if checkout.get("uncommitted_changes") else "")
    lines = [
        "## Against the base",
        "",
        f"The checkout ({mine}) against pgbaton at `{base['ref']}` ({base['commit'][:10]}, "
        f"\"{base['subject']}\"), in this run, each in its own template database. A "
        f"ratio is the checkout's median divided by the base's; \"within "
        f"{BASE_TOLERANCE:.0%}\" means the checkout is no more than {BASE_TOLERANCE:.0%} "
        "worse (slower, or later to start); better by any amount is within. Noise is "
        "half the range of each side's repeats (checkout / base): a difference smaller "
        "than it is not one this run can show.",
        "",
        "| measurement | checkout | base | checkout ÷ base | change | "
        f"within {BASE_TOLERANCE:.0%} | noise |",
        "|---|--:|--:|--:|--:|---|--:|",
    ]
    for r in rows:
        who = labels.get(r["checkout"], r["checkout"])
        title = f"{r['title']} ({r['unit']}), {who}"
        mine_text = DASH if r["checkout_median"] is None else number(r["checkout_median"])
        base_text = DASH if r["base_median"] is None else number(r["base_median"])
        if r["ratio"] is None:
            lines.append(f"| {title} | {mine_text} | {base_text} | {DASH} | {DASH} | "
                         f"not measured | {DASH} |")
            continue
        noise = " / ".join(DASH if n is None else f"±{n:.0f}%"
                           for n in (r["checkout_noise_pct"], r["base_noise_pct"]))
        if r["checkout_noise_pct"] is None and r["base_noise_pct"] is None:
            noise = "one run: unknown"
        verdict = "**yes**" if r["within"] else "no"
        lines.append(f"| {title} | {mine_text} | {base_text} | {r['ratio']:.3f}{TIMES} | "
                     f"{r['change_pct']:+.1f}% | {verdict} | {noise} |")
    if not rows:
        lines.append(f"| nothing both measured | {DASH} | {DASH} | {DASH} | {DASH} | "
                     f"{DASH} | {DASH} |")
    lines.append("")
    return lines


# -- issue 27's held xmin --------------------------------------------------------------

HELD_XMIN_CASES = {"held_xmin": "idle holder", "held_xmin_readers": "scanning readers"}


def held_xmin_rows(results: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per (held-xmin case, system): the median of each metric over its runs,
    and the issue's two verdicts from those medians."""
    out = []
    for case_id in HELD_XMIN_CASES:
        for name in results["systems"]:
            runs = [r for r in results["runs"]
                    if r["case_id"] == case_id and r["system"] == name]
            if not runs:
                continue
            good = [r for r in runs if "error" not in r]
            row: dict[str, Any] = {"case_id": case_id, "system": name, "runs": len(runs),
                                   "failed_runs": len(runs) - len(good)}
            if not good:
                row["error"] = runs[0]["error"]
                out.append(row)
                continue
            metrics: dict[str, float] = {}
            for key in {k for r in good for k in r["metrics"]}:
                values = [r["metrics"][key] for r in good if key in r["metrics"]]
                metrics[key] = summarize(values)["median"]
            row["metrics"] = metrics
            row["rate"] = good[0]["info"]["rate"]
            row["hold_seconds"] = good[0]["info"]["hold_seconds"]
            row["reader_parallel"] = good[0]["info"].get("reader_parallel")
            row["queue_limit"] = good[0]["info"].get("queue_limit")
            worst = metrics.get("hold_done_ratio_min")
            streak = metrics.get("hold_wait_p99_streak")
            row["done_met"] = None if worst is None else worst >= DONE_FLOOR
            row["wait_met"] = None if streak is None else streak < 2
            out.append(row)
    return out


def render_held_xmin(rows: list[dict[str, Any]], plan: dict[str, Any],
                     labels: dict[str, str]) -> list[str]:
    if not rows:
        return []
    lines = [
        "## Issue 27's held xmin in this run",
        "",
        f"A paced producer offers {plan.get('xmin_rate', rows[0].get('rate', 0)):,} jobs/s "
        "(a bulk enqueue every 50 ms) to a `pgbaton worker` process at concurrency 32; "
        "after a warm-up one session holds the xmin horizon (`BEGIN; SELECT "
        "txid_current()`, idle) or four REPEATABLE READ sessions scan the jobs table in a "
        "loop, for the hold. The jobs table's timestamps say, per 5 s window, how many "
        "jobs finished and were offered and how long they waited for their claim "
        "(started_at - created_at). Targets: completions at least "
        f"{DONE_FLOOR:.0%} of offered in every window of the hold; claim wait p99 under "
        f"{WAIT_P99_CEILING_S:.0f} s, never two windows in a row past it. Dead tuples and "
        "the jobs table's size (with indexes) are read at the end of the hold, while it "
        "still holds.",
        "",
        "| hold | system | offered (jobs/s) | done ÷ offered, hold (worst window) | "
        f"≥ {DONE_FLOOR:.0%} | claim wait p50 / p99, hold (worst window p99) | "
        f"p99 < {WAIT_P99_CEILING_S:.0f} s | dead tuples | jobs table (MB) |",
        "|---|---|--:|--:|---|--:|---|--:|--:|",
    ]
    for row in rows:
        hold = HELD_XMIN_CASES[row["case_id"]]
        if row.get("reader_parallel") is not None:
            hold += f" (max_parallel_workers_per_gather {row['reader_parallel']})"
        if row.get("queue_limit") is not None:
            hold += f", queue limited to {row['queue_limit']} (the flow claim)"
        head = f"| {hold} | {labels.get(row['system'], row['system'])}"
        if "error" in row:
            lines.append(f"{head} | failed: {row['error'][:200]} | | | | | | |")
            continue
        m = row["metrics"]

        def get(key: str, fmt: str, scale: float = 1.0, metrics: dict[str, float] = m) -> str:
            return DASH if key not in metrics else format(metrics[key] * scale, fmt)

        offered = f"{get('offered_per_s', ',.0f')} of {row['rate']:,}"
        done = f"{get('hold_done_ratio', '.0%', 1)} ({get('hold_done_ratio_min', '.0%')})"
        wait = (f"{get('hold_wait_p50_ms', ',.0f')} / {get('hold_wait_p99_ms', ',.0f')} ms "
                f"({get('hold_wait_p99_max_ms', ',.0f')} ms)")
        verdicts = ["not measured" if met is None else ("**met**" if met else "missed")
                    for met in (row["done_met"], row["wait_met"])]
        failed = f" ({row['failed_runs']} of {row['runs']} runs failed)" if row[
            "failed_runs"] else ""
        lines.append(f"{head}{failed} | {offered} | {done} | {verdicts[0]} | {wait} | "
                     f"{verdicts[1]} | {get('dead_tuples_end', ',.0f')} | "
                     f"{get('table_mb_end', ',.1f')} |")
    lines.append("")
    return lines


METHOD = """\
Every run is a separate process on a database created for it (and dropped after it) on
the same server. Each system is driven through its own client and its own worker,
started in that process on a plain asyncio loop; the job handler is a no-op `async def`
that records `time.perf_counter()` on its first line. Unfinished jobs are counted by the
harness in SQL on its own connection (awa: by its exact queue counters).

- **Enqueue, one job per call**: {jobs} enqueue calls in a row, each its own
  transaction, with no worker running (capped at {time_cap:.0f} s).
- **Enqueue in bulk**: the same jobs through the system's bulk call, {bulk_batch} per call.
- **Drain**: {jobs} jobs enqueued in bulk and ANALYZEd before the worker starts; the time
  runs from the first handler start to the moment the database shows no job pending or
  running, so the worker's start-up is not counted but its last completion writes are
  (a worker of several processes: from the first job of its last process to start, over
  the jobs started from then on). Every run also checks that no job ran twice.
- **Latency**: one worker at concurrency {latency_concurrency}, warmed up with
  {latency_warmup} jobs, then {latency_jobs} single jobs, each enqueued {latency_gap[0]}-\
{latency_gap[1]} s (random) after the previous one is finished in the database, so each
  one arrives at an idle worker. Latency = handler start minus the moment just before the
  enqueue call (one monotonic clock, CLOCK_MONOTONIC, shared by every process): it
  includes the enqueue's round trip and commit, the wake-up (LISTEN/NOTIFY or polling),
  the claim and the dispatch. Latency from the acknowledged enqueue = handler start minus
  the moment the enqueue call returned. p50 and p99 are nearest-rank over the run's jobs.
- **Worker CPU per job**: user and system CPU time of the worker's process (a worker of
  several processes: all of them) from its first handler start to the end of the drain,
  divided by the jobs; an in-process worker's figure includes the harness's probe and
  its RSS sampler. A busy machine moves it less than the rates; the server's CPU is not
  in it.
- **Server CPU and WAL per job**: over the same span (the drain) or the whole bulk
  enqueue, the user and system CPU time of every backend connected to the run's database
  (read from /proc, so 0 when PostgreSQL runs elsewhere; the harness's own connection
  left out), and the server's WAL position moved (`pg_current_wal_lsn()`: the whole
  server's, so a busy server adds to it), divided by the jobs. The drain's figures are
  claim + start + complete; with the enqueue's they are what one job costs the server.
- **Memory**: resident set size of the worker's process (a worker of several processes:
  all of them added up, its supervisor included): idle = after the latency warm-up and
  one quiet second; under load = the peak, sampled every 50 ms, during the drain at
  concurrency 32. An in-process worker's process also holds the harness's small client
  code.
- **Claim time** (pgbaton and raw SQL): the table is filled with N finished jobs by
  generate_series and VACUUM ANALYZEd; each round adds {claim_pending} pending jobs,
  ANALYZEs, makes 10 untimed claims, then times {claims} sequential LIMIT 1 claims, each
  one round trip (pgbaton through AsyncQueue.claim, raw SQL through the bare SKIP LOCKED claim).
- **Raw SQL**: the minimal jobs table, partial index, claim CTE and token-fenced completion, run
  by psycopg 3 loops with no library around them: the ceiling for this machine. The
  batched ceiling is the better of raw SQL, LIMIT 100 (up to 32 loops of 100) and raw
  SQL, LIMIT \u2264 100, N in flight.\
"""


# -- profiles ----------------------------------------------------------------------------


WORKER_TASKS = {
    "Worker._produce": "claiming (producer loop)",
    "Worker._execute": "running handlers",
    "Completer.run": "writing outcomes (completer)",
    "Worker._heartbeat_forever": "heartbeats",
    "Leader.run": "maintenance leader",
    "listen": "LISTEN connection",
}


def folded_top(path: Path, count: int = 20) -> dict[str, Any]:
    """From a py-spy --format raw (folded) file: the samples in which pgbaton's worker
    code is on the stack (the harness's enqueue, imports and sampler thread are left
    out), split by worker task, and the functions with the most of them."""
    own: Counter[str] = Counter()
    total: Counter[str] = Counter()
    tasks: Counter[str] = Counter()
    samples = 0
    for line in path.read_text().splitlines():
        stack, _, n = line.rpartition(" ")
        if not stack or not n.isdigit():
            continue
        frames = [re.sub(r":\d+\)$", ")", frame) for frame in stack.split(";")]
        if not any("pgbaton/worker/" in f or "pgbaton/maintenance/" in f for f in frames):
            continue
        weight = int(n)
        samples += weight
        task = "other"
        for frame in frames:
            name = frame.split(" (", 1)[0]
            task = WORKER_TASKS.get(name, task)
        tasks[task] += weight
        own[frames[-1]] += weight
        for frame in set(frames):
            total[frame] += weight
    if not samples:
        return {"samples": 0, "tasks": {}, "functions": []}
    return {
        "samples": samples,
        "tasks": {task: n * 100 / samples for task, n in tasks.most_common()},
        "functions": [
            {"function": function, "self_pct": own[function] * 100 / samples,
             "total_pct": total[function] * 100 / samples}
            for function, _ in own.most_common(count)
        ],
    }


def main() -> None:
    path = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).parent / "results" / (
        "latest.json")
    results = json.loads(path.read_text())
    results["summary"] = summarize_results(results)
    markdown = render(results)
    path.with_suffix(".md").write_text(markdown)
    print(markdown)


if __name__ == "__main__":
    main()
