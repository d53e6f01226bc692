"""benchmarks/report.py's verdicts on issue 16's targets, the checkout against the
--base ref, issue 27's held xmin, and the raw-SQL loops' shape, judged on results made
for each test."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from benchmarks.held_xmin import Window, judge
from benchmarks.report import (
    compare_with_base,
    evaluate_targets,
    held_xmin_rows,
    render,
    summarize_results,
)
from benchmarks.run import QUICK, case_runs
from benchmarks.systems.raw_system import RawSQL100, RawSQLInFlight

ROLES = {"pgbaton": "subject", "pgbaton_b": "option", "pgbaton_p2": "option",
         "pgqueuer": "peer", "graphile": "peer", "graphile_b": "peer", "raw1": "ceiling",
         "raw100": "ceiling"}
PLAN = {"mode": "full", "jobs": 1000, "bulk_batch": 1000, "concurrency": [32],
        "claim_rows": [], "claim_blocked": [], "time_cap": 60.0, "repeats": 1}


def results(medians: dict[tuple[str, str, str], float]) -> dict[str, Any]:
    """One run per (case_id, system, metric): value."""
    systems = {name: {"role": role, "python": not name.startswith("graphile"),
                      "label": name} for name, role in ROLES.items()}
    runs = [{"case_id": case_id, "case": case_id.split("_c")[0], "system": system,
             "metrics": {metric: value}, "info": {}}
            for (case_id, system, metric), value in medians.items()]
    made = {"meta": {"plan": PLAN}, "systems": systems, "runs": runs}
    made["summary"] = summarize_results(made)
    return made


def verdicts(made: dict[str, Any]) -> dict[str, tuple[Any, Any, Any]]:
    """Target, by its metric, threshold and reference: met at the defaults, met by the
    best configuration, which one that is."""
    out = {}
    for target in evaluate_targets(made, made["summary"]):
        defaults, best = target["defaults"], target["best"]
        key = f"{target['metric']} {target['threshold']} {target['reference']}"
        out[key] = (defaults and defaults["met"], best and best["met"],
                    best and best["system"])
    return out


def test_drain_targets_judge_the_defaults_and_the_best_configuration() -> None:
    made = results({
        ("drain_c32", "pgbaton", "jobs_per_s"): 10_000,
        ("drain_c32", "pgbaton_b", "jobs_per_s"): 30_000,
        ("drain_c32", "graphile_b", "jobs_per_s"): 35_000,
        ("drain_c32", "pgqueuer", "jobs_per_s"): 4_000,
        ("drain_c32", "raw100", "jobs_per_s"): 40_000,
    })
    got = verdicts(made)
    # 10,000 / 35,000 = 0.29, 30,000 / 35,000 = 0.86 of Graphile Worker tuned
    assert got["jobs_per_s 0.8 graphile_b"] == (False, True, "pgbaton_b")
    # 30,000 / 40,000 = 0.75 of the batched raw ceiling
    assert got["jobs_per_s 0.8 raw100"] == (False, False, "pgbaton_b")
    # 4x the best Python peer (PgQueuer, not Graphile Worker): 2.5x and 7.5x
    assert got["jobs_per_s 4.0 pgqueuer"] == (False, True, "pgbaton_b")


def test_a_target_whose_reference_was_not_run_is_not_measured() -> None:
    made = results({("drain_c32", "pgbaton", "jobs_per_s"): 10_000})
    for target in evaluate_targets(made, made["summary"]):
        if target["case_id"] == "drain_c32" and target["metric"] == "jobs_per_s":
            assert target["defaults"] == {"system": "pgbaton", "value": None, "met": None}


def by_title(made: dict[str, Any], words: str) -> dict[str, Any]:
    (target,) = [t for t in evaluate_targets(made, made["summary"]) if words in t["target"]]
    return target


def test_issue_34s_targets_one_process_and_cpu_against_graphile_tuned() -> None:
    """The best configuration may be several processes; "one process" may not. Worker
    CPU is lower-is-better against Graphile Worker tuned, never its defaults."""
    made = results({
        ("drain_c32", "pgbaton", "jobs_per_s"): 30_000,
        ("drain_c32", "pgbaton_p2", "jobs_per_s"): 45_000,
        ("drain_c32", "graphile", "jobs_per_s"): 20_000,
        ("drain_c32", "graphile_b", "jobs_per_s"): 40_000,
        ("drain_c32", "pgbaton", "cpu_us_per_job"): 15.0,
        ("drain_c32", "graphile", "cpu_us_per_job"): 10.0,
        ("drain_c32", "graphile_b", "cpu_us_per_job"): 16.0,
    })
    best = by_title(made, "best configuration \u2265 1.0")
    assert best["reference"] == "graphile_b"
    assert (best["best"]["system"], best["best"]["met"]) == ("pgbaton_p2", True)
    assert best["defaults"]["met"] is False  # 0.75x
    one = by_title(made, "one process")
    assert (one["best"]["system"], one["best"]["met"]) == ("pgbaton", False)  # 0.75x
    cpu = by_title(made, "Worker CPU")
    assert cpu["reference"] == "graphile_b"  # not Graphile Worker's defaults' 10 µs
    assert cpu["defaults"]["met"] is True and round(cpu["defaults"]["value"], 4) == 0.9375


def test_latency_targets_are_the_milliseconds_themselves() -> None:
    made = results({("latency", "pgbaton", "ack_p50_ms"): 0.9,
                    ("latency", "pgbaton", "ack_p99_ms"): 5.0})
    got = verdicts(made)
    assert got["ack_p50_ms 1.0 None"][0] is True
    assert got["ack_p99_ms 5.0 None"][0] is False  # under 5 ms, not at it


def test_the_in_flight_ceiling_holds_at_most_n_jobs_and_the_batched_one_32_loops() -> None:
    in_flight = RawSQLInFlight("postgresql://unused")
    for n in (1, 8, 32, 100, 101, 128, 250):
        limits = in_flight.loop_limits(n)
        assert sum(limits) == n and max(limits) <= 100
        assert len(limits) == -(-n // 100)
    batched = RawSQL100("postgresql://unused")
    assert batched.loop_limits(8) == [100] * 8
    assert batched.loop_limits(128) == [100] * 32


# -- against the base, and issue 27's held xmin --------------------------------------

BASE_ROLES = {"pgbaton": ("subject", None), "pgbaton_base": ("base", "pgbaton"),
              "pgbaton_b": ("option", None), "pgbaton_base_b": ("base", "pgbaton_b")}
BASE_META = {
    "plan": {**PLAN, "concurrency": [8, 32], "repeats": 3, "claim_rows": [],
             "latency_concurrency": 8, "latency_warmup": 5, "latency_jobs": 60,
             "latency_gap": [0.05, 0.15], "claim_pending": 1000, "claims": 500,
             "xmin_rate": 2000},
    "started_at": "2026-12-05T23:00:00+00:00", "duration_seconds": 600,
    "machine": {"cpus": 2, "memory_gb": 8, "python": "3.11", "load_average_at_start": [0.1]},
    "server": "test", "server_settings": {"server_version": "15"},
    "command": "python -m benchmarks.run --base main",
    "checkout": {"commit": "c" * 40, "subject": "this", "uncommitted_changes": False},
    "base": {"ref": "main", "commit": "b" * 40, "subject": "the base"},
}


def based(values: dict[tuple[str, str, str], list[float]],
          extra_runs: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """Results of a run with --base: one run per value, its repeats as given."""
    systems = {name: {"role": role, "base_of": base_of, "label": name, "python": True,
                      "concurrency_meaning": "N slots.", "settings": "defaults."}
               for name, (role, base_of) in BASE_ROLES.items()}
    runs = [{"case_id": case_id, "case": case_id.split("_c")[0], "system": system,
             "repeat": n, "metrics": {metric: value}, "info": {}}
            for (case_id, system, metric), repeats in values.items()
            for n, value in enumerate(repeats)]
    made = {"meta": BASE_META, "systems": systems, "runs": runs + (extra_runs or []),
            "profile": None}
    made["summary"] = summarize_results(made)
    return made


def by_row(made: dict[str, Any]) -> dict[tuple[str, str, str], dict[str, Any]]:
    return {(r["case_id"], r["metric"], r["checkout"]): r
            for r in compare_with_base(made, made["summary"])}


def test_the_checkout_within_3_percent_of_the_base_or_not_each_way() -> None:
    """Throughput may be at most 3% lower, latency at most 3% higher; better is within."""
    made = based({
        ("drain_c32", "pgbaton", "jobs_per_s"): [9_800, 9_700, 9_900],
        ("drain_c32", "pgbaton_base", "jobs_per_s"): [10_000, 9_000, 11_000],
        ("drain_c8", "pgbaton", "jobs_per_s"): [9_000],
        ("drain_c8", "pgbaton_base", "jobs_per_s"): [10_000],
        ("enqueue_single", "pgbaton", "jobs_per_s"): [1_200],
        ("enqueue_single", "pgbaton_base", "jobs_per_s"): [1_000],
        ("latency", "pgbaton", "p50_ms"): [1.05],
        ("latency", "pgbaton_base", "p50_ms"): [1.0],
        ("latency", "pgbaton", "ack_p50_ms"): [0.5],
        ("latency", "pgbaton_base", "ack_p50_ms"): [0.6],
        ("drain_c32", "pgbaton_base_b", "jobs_per_s"): [20_000],
    })
    rows = by_row(made)
    c32 = rows["drain_c32", "jobs_per_s", "pgbaton"]
    assert c32["base"] == "pgbaton_base"
    assert round(c32["ratio"], 3) == 0.98 and c32["within"] is True
    # Half the range of the repeats, in percent of the median: ±1% and ±10%.
    assert round(c32["checkout_noise_pct"]) == 1 and round(c32["base_noise_pct"]) == 10
    assert rows["drain_c8", "jobs_per_s", "pgbaton"]["within"] is False  # 10% slower
    assert rows["drain_c8", "jobs_per_s", "pgbaton"]["checkout_noise_pct"] is None  # one run
    assert rows["enqueue_single", "jobs_per_s", "pgbaton"]["change_pct"] == pytest.approx(20)
    assert rows["latency", "p50_ms", "pgbaton"]["within"] is False  # 5% later to start
    assert rows["latency", "ack_p50_ms", "pgbaton"]["within"] is True
    # The checkout's claiming ahead was not run: not measured, never within; where
    # neither side of that pair ran, there is no row.
    b = rows["drain_c32", "jobs_per_s", "pgbaton_b"]
    assert b["base"] == "pgbaton_base_b" and b["ratio"] is None and b["within"] is None
    assert ("drain_c8", "jobs_per_s", "pgbaton_b") not in rows
    assert ("enqueue_single", "jobs_per_s", "pgbaton_b") not in rows


def test_the_against_the_base_section_renders_ratios_verdicts_and_noise() -> None:
    made = based({
        ("drain_c32", "pgbaton", "jobs_per_s"): [9_800, 9_700, 9_900],
        ("drain_c32", "pgbaton_base", "jobs_per_s"): [10_000, 9_000, 11_000],
        ("enqueue_single", "pgbaton", "jobs_per_s"): [900],
        ("enqueue_single", "pgbaton_base", "jobs_per_s"): [1_000],
        ("drain_c32", "pgbaton_base_b", "jobs_per_s"): [20_000],
    })
    text = render(made)
    section = text.split("## Against the base", 1)[1].split("\n## ", 1)[0]
    assert "`main` (bbbbbbbbbb" in section and "checkout (cccccccccc)" in section
    drain = next(line for line in section.splitlines()
                 if line.startswith("| Drain 1,000 no-op jobs, concurrency 32 (jobs/s), pgbaton |"))
    assert "| 0.980\u00d7 | -2.0% | **yes** | ±1% / ±10% |" in drain
    single = next(line for line in section.splitlines()
                  if line.startswith("| Enqueue, one job per call (jobs/s), pgbaton |"))
    assert "| 0.900\u00d7 | -10.0% | no | one run: unknown |" in single
    b = next(line for line in section.splitlines()
             if "concurrency 32 (jobs/s), pgbaton_b |" in line)
    assert "not measured" in b


def test_without_a_base_the_report_has_no_such_section() -> None:
    made = based({("drain_c32", "pgbaton", "jobs_per_s"): [10_000]})
    made["meta"] = {k: v for k, v in BASE_META.items() if k != "base"}
    assert "Against the base" not in render(made)


def xmin_run(system: str, case_id: str, **metrics: float) -> dict[str, Any]:
    return {"case_id": case_id, "case": "held_xmin", "system": system, "repeat": 0,
            "metrics": metrics, "info": {"rate": 2000, "hold_seconds": 90.0}}


def test_the_held_xmin_section_judges_each_system_as_the_test_does() -> None:
    """Completions: the worst window of the hold at 90% of offered or more; wait p99:
    never two windows in a row at 1 s or past it."""
    good = {"offered_per_s": 1990.0, "hold_done_ratio": 0.99, "hold_done_ratio_min": 0.95,
            "hold_wait_p50_ms": 12.0, "hold_wait_p99_ms": 240.0,
            "hold_wait_p99_max_ms": 1100.0, "hold_wait_p99_streak": 1,
            "dead_tuples_end": 180_000, "table_mb_end": 61.5}
    made = based({}, [
        xmin_run("pgbaton", "held_xmin", **good),
        xmin_run("pgbaton_base", "held_xmin",
                 **{**good, "hold_done_ratio_min": 0.4, "hold_wait_p99_streak": 6}),
        xmin_run("pgbaton", "held_xmin_readers", **{**good, "hold_done_ratio_min": 0.9}),
        {"case_id": "held_xmin_readers", "case": "held_xmin", "system": "pgbaton_base",
         "repeat": 0, "error": "pgbaton_base worker stopped unexpectedly"},
    ])
    rows = {(r["case_id"], r["system"]): r for r in held_xmin_rows(made)}
    assert (rows["held_xmin", "pgbaton"]["done_met"], rows["held_xmin", "pgbaton"]["wait_met"]
            ) == (True, True)
    assert (rows["held_xmin", "pgbaton_base"]["done_met"],
            rows["held_xmin", "pgbaton_base"]["wait_met"]) == (False, False)
    assert rows["held_xmin_readers", "pgbaton"]["done_met"] is True  # 90% is enough
    assert "error" in rows["held_xmin_readers", "pgbaton_base"]
    section = render(made).split("## Issue 27's held xmin", 1)[1].split("\n## ", 1)[0]
    assert "offers 2,000 jobs/s" in section
    lines = section.splitlines()
    assert ("| idle holder | pgbaton | 1,990 of 2,000 | 99% (95%) | **met** | "
            "12 / 240 ms (1,100 ms) | **met** | 180,000 | 61.5 |") in lines
    assert any(line.startswith("| idle holder | pgbaton_base |") and "| missed |" in line
               for line in lines)
    assert any(line.startswith("| scanning readers | pgbaton_base | failed: pgbaton_base "
                               "worker stopped") for line in lines)


def test_the_readers_parallel_setting_reaches_the_case_and_names_its_row() -> None:
    """--xmin-reader-parallel N: the readers' case runs with max_parallel_workers_per_gather
    N in their sessions (docs/explanation/scaling.md, "A held xmin"), the idle holder's does
    not, and the report says which setting the readers' row was measured with."""
    systems = {"pgbaton": {"cases": ["held_xmin"]}}
    cases = ["held_xmin", "held_xmin_readers"]
    serial_plan = dataclasses.replace(QUICK, xmin_reader_parallel=0)
    params = {run.case_id: run.params for run in case_runs(serial_plan, cases, systems)}
    assert params["held_xmin_readers"]["reader_parallel"] == 0
    assert "reader_parallel" not in params["held_xmin"]
    default = {run.case_id: run.params for run in case_runs(QUICK, cases, systems)}
    assert "reader_parallel" not in default["held_xmin_readers"]

    good = {"offered_per_s": 2000.0, "hold_done_ratio": 1.0, "hold_done_ratio_min": 0.98,
            "hold_wait_p50_ms": 30.0, "hold_wait_p99_ms": 180.0,
            "hold_wait_p99_max_ms": 206.0, "hold_wait_p99_streak": 0,
            "dead_tuples_end": 17_000, "table_mb_end": 82.5}
    serial = xmin_run("pgbaton", "held_xmin_readers", **good)
    serial["info"]["reader_parallel"] = 0
    section = render(based({}, [serial])).split("## Issue 27's held xmin", 1)[1]
    assert "| scanning readers (max_parallel_workers_per_gather 0) | pgbaton |" in section
    plain = render(based({}, [xmin_run("pgbaton", "held_xmin_readers", **good)]))
    assert "| scanning readers | pgbaton |" in plain


def test_a_run_without_the_held_xmin_case_has_no_such_section() -> None:
    made = based({("drain_c32", "pgbaton", "jobs_per_s"): [10_000]})
    assert held_xmin_rows(made) == []
    assert "held xmin" not in render(made)


def test_the_hold_is_judged_on_its_windows() -> None:
    """judge(): the worst window's completions, the longest run of windows whose wait
    p99 is at or past 1 s; a window with jobs offered and none started counts as past."""
    def window(phase: str, finished: int, p99: float | None) -> Window:
        return Window(0.0, phase, finished, 1000, 0, 0.01, p99, 0)

    verdict = judge([window("warmup", 0, None), window("hold", 950, 1.2),
                     window("hold", 890, 0.2), window("hold", 0, None),
                     window("hold", 900, 1.0), window("after", 0, 9.0)])
    assert verdict["done_ratio_min"] == 0.0 and verdict["done_met"] is False
    assert verdict["wait_p99_streak"] == 2 and verdict["wait_met"] is False
    assert verdict["windows"] == 4
    calm = judge([window("hold", 950, 1.5), window("hold", 900, 0.3),
                  window("hold", 1000, 1.1)])
    assert calm["done_met"] is True and calm["wait_met"] is True
    assert calm["wait_p99_max_s"] == 1.5
