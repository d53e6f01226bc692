"""benchmarks/report.py's verdicts on issue 16's targets, and the raw-SQL loops' shape,
judged on results made for each test."""

from __future__ import annotations

from typing import Any

from benchmarks.report import evaluate_targets, summarize_results
from benchmarks.systems.raw_system import RawSQL100, RawSQLInFlight

ROLES = {"pgbaton": "subject", "pgbaton_b": "option", "pgqueuer": "peer",
         "graphile_b": "peer", "raw1": "ceiling", "raw100": "ceiling"}
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
        if target["case_id"] == "drain_c32":
            assert target["defaults"] == {"system": "pgbaton", "value": None, "met": None}


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
