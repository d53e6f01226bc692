"""benchmarks/soak_report.py: the soak's verdict, judged on samples made for each test."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from benchmarks.soak_report import (
    COLUMNS,
    PartitionLedger,
    Report,
    Soak,
    add_derived,
    compare,
    plot,
)

MB = 1024 * 1024


def soak(size_mb: Any = lambda minute: 80, rss_mb: Any = lambda minute: 40,
         claim_ms: Any = lambda minute: 1.0, minutes: float = 30.0) -> Soak:
    """A soak of one sample every 10 s, each quantity a function of the minute."""
    made = Soak(minutes=minutes, rate=1000.0)
    for index in range(1, int(minutes * 6) + 1):
        minute = index / 6
        row = {"elapsed_s": index * 10.0, "total_bytes": size_mb(minute) * MB,
               "index_bytes": size_mb(minute) / 4 * MB, "worker_rss_bytes": rss_mb(minute) * MB,
               "pending": 0, "load1": 1.0, "worker_cpu_pct": 10.0}
        made.add(row, [claim_ms(minute) / 1000] * 100, [0.002] * 10)
    made.worker_exit = 0
    return made


def verdicts(made: Soak) -> dict[str, bool]:
    return {c.name.split(":")[0]: c.passed for c in made.criteria()}


def test_flat_samples_pass_every_criterion() -> None:
    """Sizes, times and memory that do not move pass, and the soak passes."""
    made = soak()
    assert all(verdicts(made).values()), made.criteria()
    assert made.passed()


def test_steady_growth_fails_the_plateau() -> None:
    """A table growing 2% a minute is 1.2x larger in the last 10 minutes: it fails."""
    got = verdicts(soak(size_mb=lambda minute: 80 * 1.02 ** minute))
    assert got["jobs table size (with indexes, TOAST) plateaus"] is False
    assert got["jobs index size plateaus"] is False


def test_growth_within_a_tenth_passes() -> None:
    """Growth of 8% from the 10 minutes before to the last 10 passes."""
    got = verdicts(soak(size_mb=lambda minute: 80 * (1.08 if minute > 20 else 1.0)))
    assert got["jobs table size (with indexes, TOAST) plateaus"] is True


def test_claim_p99_is_judged_on_every_duration_of_the_windows() -> None:
    """Claims 1.3x slower in the last 5 minutes fail; 1.1x slower pass."""
    assert verdicts(soak(claim_ms=lambda m: 1.3 if m > 25 else 1.0))["claim p99"] is False
    assert verdicts(soak(claim_ms=lambda m: 1.1 if m > 25 else 1.0))["claim p99"] is True


def test_rss_growth_in_the_warm_up_is_not_drift() -> None:
    """RSS that doubles in the first 5 minutes and then holds passes; +15% after fails."""
    def warm(minute: float) -> float:
        return 20 + 4 * min(minute, 5)

    assert verdicts(soak(rss_mb=warm))["worker RSS drift"] is True
    assert verdicts(soak(rss_mb=lambda m: warm(m) * (1.15 if m > 25 else 1.0)))[
        "worker RSS drift"] is False


def test_a_worker_that_failed_fails_the_soak() -> None:
    """A worker that exited non-zero fails the soak whatever the samples say."""
    made = soak()
    made.worker_exit = 1
    assert not made.passed()


def leaf(relid: int, level: int = 1, **values: float) -> dict[str, Any]:
    """One leaf of a history table as the sampler reads it."""
    return {"relid": relid, "name": f"pgbaton_history.jobs_history_{relid}", "level": level,
            "total_bytes": 0, "heap_bytes": 0, "index_bytes": 0, "live_tuples": 0,
            "dead_tuples": 0, "inserted_total": 0, "autovacuum_count": 0, "vacuum_count": 0,
            "autovacuum_ms_total": 0.0, "vacuum_ms_total": 0.0, **values}


def test_a_dropped_partition_keeps_its_vacuum_work_in_the_totals() -> None:
    """Sizes count the partitions there now; vacuum work and rows moved count every
    partition seen, a dropped one at its last values."""
    ledger = PartitionLedger()
    ledger.update([leaf(1, total_bytes=MB, autovacuum_count=2, autovacuum_ms_total=50.0,
                        inserted_total=100)])
    got = ledger.update([leaf(1, total_bytes=2 * MB, autovacuum_count=3,
                              autovacuum_ms_total=80.0, inserted_total=150),
                         leaf(2, total_bytes=MB, autovacuum_count=1, autovacuum_ms_total=5.0,
                              inserted_total=40)])
    assert got["history_partitions"] == 2 and got["history_total_bytes"] == 3 * MB
    got = ledger.update([leaf(2, total_bytes=MB, autovacuum_count=1, autovacuum_ms_total=5.0,
                              inserted_total=60)])
    assert got["history_partitions"] == 1 and got["history_partitions_dropped"] == 1
    assert got["history_partitions_seen"] == 2
    assert got["history_total_bytes"] == MB
    assert got["history_autovacuum_count"] == 4
    assert got["history_autovacuum_ms_total"] == 85.0
    assert got["history_inserted_total"] == 210


def test_no_history_table_gives_zeros_and_every_column_is_in_the_csv() -> None:
    """A delete lane has no history table: its history columns are 0, and the columns
    the sampler makes (history and derived) are all CSV columns."""
    row = {"total_bytes": 5 * MB, "dead_tuples": 7, "autovacuum_count": 1,
           "autovacuum_ms_total": 12.0, **PartitionLedger().update([])}
    add_derived(row)
    assert row["history_partitions"] == 0 and row["history_total_bytes"] == 0
    assert row["retained_bytes"] == 5 * MB and row["autovacuum_ms_all"] == 12.0
    assert set(row) <= set(COLUMNS)


def lane(name: str, mode: str, dead: float, size_mb: float, vacuum_s: float) -> Soak:
    """A flat lane of a comparison."""
    made = soak()
    made.lane, made.mode = name, mode
    for row in made.rows:
        row.update({"lane": name, "mode": mode, "schema": f"pgbaton_{name}",
                    "dead_tuples": dead, "live_tuples": 1000, "heap_bytes": size_mb * MB,
                    "total_bytes": size_mb * MB, "history_partitions": 0,
                    "history_total_bytes": 0, "history_live_tuples": 0,
                    "history_dead_tuples": 0, "history_partitions_seen": 0,
                    "history_partitions_dropped": 0, "history_inserted_total": 0,
                    "history_autovacuum_count": 0, "history_vacuum_count": 0,
                    "history_autovacuum_ms_total": 0.0, "history_vacuum_ms_total": 0.0,
                    "autovacuum_ms_total": vacuum_s * 1000, "vacuum_ms_total": 0.0,
                    "autovacuum_count": 3, "autoanalyze_count": 1, "deleted_total": 0,
                    "done_total": 1000, "producer_lag_jobs": 0, "claim_stmt_calls": 10,
                    "claim_stmt_ms_total": 5.0, "claim_stmt_blocks_total": 100,
                    "retention_stmt_ms_total": 1.0, "done_per_s": 1000.0,
                    "claim_p99_ms": 1.0, "enqueue_p99_ms": 2.0, "claim_p50_ms": 1.0,
                    "enqueue_p50_ms": 2.0, "claim_server_mean_ms": 0.5,
                    "claim_blocks_per_call": 10.0, "wal_bytes_total": row["elapsed_s"] * MB,
                    "wal_mb_per_s": 0.1})
        add_derived(row)
    return made


def test_the_comparison_names_the_better_lane_on_each_measure() -> None:
    """Lower is better; within 5% is even; the ratio is the second lane over the first."""
    delete, history = lane("delete", "delete", 1000, 100, 60), lane("history", "history",
                                                                      100, 98, 6)
    found = {c.measure.label: c for c in compare([delete, history])}
    dead = found["dead tuples (jobs + history), max"]
    assert dead.values == [1000, 100] and dead.ratios == [0.1]
    assert dead.better == ["history"]
    assert found["jobs table size, max"].better == ["even"]
    assert found["autovacuum time, jobs + history partitions"].ratios[0] == 0.1
    assert found["jobs done per second, mean of samples"].better == [""]
    text = Report([delete, history], {"rate": 2000.0}).markdown("soak.png")
    assert "## Item 6" in text and "| delete | history | history/delete |" in text
    assert ": **history wins**" in text


def test_one_measure_of_five_is_no_clear_winner() -> None:
    """Identical lanes that differ on one measure (an A/A soak's noise) name no winner."""
    delete, other = lane("delete", "delete", 1000, 100, 60), lane("delete_2", "delete",
                                                                    1010, 101, 50)
    text = Report([delete, other], {"rate": 2000.0}).markdown("soak.png")
    assert "delete_2 1, delete 0, even 4 of 5: **no clear winner**" in text


def test_a_single_lane_has_no_comparison() -> None:
    text = Report([lane("delete", "delete", 1000, 100, 60)], {"rate": 1000.0}).markdown(
        "soak.png")
    assert "## Item 5" in text and "## Item 6" not in text


def test_the_plot_draws_the_lanes_side_by_side(tmp_path: Path) -> None:
    delete, history = lane("delete", "delete", 1000, 100, 60), lane("history", "history",
                                                                      100, 98, 6)
    path = tmp_path / "soak.png"
    plot(delete.rows + history.rows, path)
    assert path.stat().st_size > 10_000


def test_the_lanes_are_named_after_their_modes() -> None:
    from benchmarks.soak import make_lanes

    assert [(x.name, x.schema) for x in make_lanes(["delete", "history"])] == [
        ("delete", "pgbaton"), ("history", "pgbaton_history")]
    assert [(x.name, x.schema) for x in make_lanes(["delete", "delete"])] == [
        ("delete", "pgbaton"), ("delete_2", "pgbaton_delete_2")]


def test_history_mode_on_a_pgbaton_without_it_fails_clearly(monkeypatch: Any) -> None:
    """Without WorkerConfig.retention_mode, delete lanes run as before and a history
    lane stops the soak before it starts, saying why."""
    from benchmarks import soak_processes

    monkeypatch.setattr(soak_processes, "has_retention_modes", lambda: False)
    assert "retention_mode" not in soak_processes.worker_options(32, 600, 1, mode="delete")
    with pytest.raises(SystemExit, match=r"no WorkerConfig\.retention_mode"):
        soak_processes.worker_options(32, 600, 1, mode="history", history_after=30,
                                      history_partition=120)
    monkeypatch.setattr(soak_processes, "has_retention_modes", lambda: True)
    got = soak_processes.worker_options(32, 600, 1, mode="history", history_after=30,
                                        history_partition=120)
    assert got["retention_mode"] == "history" and got["history_partition"] == 120
