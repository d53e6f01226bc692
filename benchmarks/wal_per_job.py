"""The WAL a job writes on the server: enqueue, claim and complete of no-op jobs.

    python -m benchmarks.wal_per_job [--dsn DSN] [--jobs 10000] [--batch 100] [--rounds 3]

Each round migrates a fresh schema of its own (autovacuum off on its jobs table),
takes a CHECKPOINT when it may (so that the round's full-page images are alike), then
enqueues `--jobs` jobs (enqueue_many, 1,000 a call), and claims and completes them
`--batch` at a time (claim, then complete_many: the worker's statements, without its
timing). pg_current_wal_insert_lsn() is read around each statement, so each phase's
bytes are its own statements' (their commits included). Prints each phase's bytes a
job per round and their medians; with pg_walinspect (created when the role may), also
the records a job writes by type, which names what differs between two trees.

WAL is the whole server's: the numbers are exact only on a server nothing else writes
to (a private `initdb`, docs/explanation/performance.md says how the published ones were
taken). Run it from another checkout (PYTHONPATH) to compare two trees: this file uses
only the public Queue.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
from collections import Counter
from typing import Any

import psycopg

import pgbaton

PHASES = ("enqueue", "claim", "complete")


def insert_lsn(watch: psycopg.Connection[Any]) -> str:
    row = watch.execute("SELECT pg_current_wal_insert_lsn()::text").fetchone()
    assert row is not None
    return str(row[0])


def wal_between(watch: psycopg.Connection[Any], start: str, end: str) -> int:
    row = watch.execute("SELECT pg_wal_lsn_diff(%s::pg_lsn, %s::pg_lsn)::bigint",
                        (end, start)).fetchone()
    assert row is not None
    return int(row[0])


def records_between(watch: psycopg.Connection[Any], start: str, end: str) -> Counter[str]:
    """WAL records by resource manager and type between two positions (pg_walinspect);
    empty when it is not there. The range must be flushed: a synchronous commit ends it."""
    try:
        rows = watch.execute(
            "SELECT \"resource_manager/record_type\", count FROM pg_get_wal_stats("
            "%s::pg_lsn, %s::pg_lsn, true) WHERE count > 0", (start, end)).fetchall()
    except psycopg.Error:
        return Counter()
    return Counter({str(name): int(count) for name, count in rows})


def one_round(dsn: str, schema: str, jobs: int, batch: int) -> tuple[dict[str, int],
                                                                     Counter[str]]:
    with psycopg.connect(dsn, autocommit=True) as watch:
        watch.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')  # type: ignore[arg-type]
        with pgbaton.Queue(dsn, schema=schema) as queue:
            queue.migrate()
            # Its own vacuum would write WAL in the middle of a phase.
            watch.execute(f'ALTER TABLE "{schema}".jobs SET (autovacuum_enabled = false)')  # type: ignore[arg-type]
            # Not a superuser (nor pg_checkpoint): the images fall where they fall.
            with contextlib.suppress(psycopg.Error):
                watch.execute("CHECKPOINT")
            spent = dict.fromkeys(PHASES, 0)
            first = insert_lsn(watch)
            for start in range(0, jobs, 1000):
                before = insert_lsn(watch)
                queue.enqueue_many([{"task": "noop"}] * min(1000, jobs - start))
                spent["enqueue"] += wal_between(watch, before, insert_lsn(watch))
            finished = 0
            while finished < jobs:
                before = insert_lsn(watch)
                claims = queue.claim("wal-bench", limit=batch)
                spent["claim"] += wal_between(watch, before, insert_lsn(watch))
                assert claims, "a claim found nothing before every job was done"
                before = insert_lsn(watch)
                written = queue.complete_many([(claim, None) for claim in claims])
                spent["complete"] += wal_between(watch, before, insert_lsn(watch))
                assert all(written)
                finished += len(claims)
            records = records_between(watch, first, insert_lsn(watch))
        watch.execute(f'DROP SCHEMA "{schema}" CASCADE')  # type: ignore[arg-type]
    return spent, records


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", default=os.environ.get("PGBATON_DSN"))
    parser.add_argument("--schema", default="wal_bench")
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    options = parser.parse_args()
    with psycopg.connect(options.dsn, autocommit=True) as conn:
        try:
            conn.execute("CREATE EXTENSION IF NOT EXISTS pg_walinspect")
        except psycopg.Error:
            print("no pg_walinspect: bytes only")
        version = conn.execute("SHOW server_version").fetchone()
    print(f"pgbaton from {os.path.dirname(pgbaton.__file__)}, PostgreSQL {version[0]}"  # type: ignore[index]
          f" {options.jobs} jobs, claimed and completed {options.batch} at a time")
    per_job: dict[str, list[float]] = {phase: [] for phase in (*PHASES, "total")}
    records: Counter[str] = Counter()
    for round_number in range(options.rounds):
        spent, round_records = one_round(options.dsn, options.schema, options.jobs,
                                         options.batch)
        records = round_records  # the last round's (the rounds are alike)
        for phase in PHASES:
            per_job[phase].append(spent[phase] / options.jobs)
        per_job["total"].append(sum(spent.values()) / options.jobs)
        print(f"round {round_number + 1}: " + ", ".join(
            f"{phase} {per_job[phase][-1]:.1f}" for phase in per_job) + " bytes a job")
    print("median: " + ", ".join(
        f"{phase} {statistics.median(values):.1f}" for phase, values in per_job.items())
        + " bytes a job")
    if records:
        print("WAL records a job (last round), by type:")
        for name, count in sorted(records.items(), key=lambda item: -item[1]):
            if count >= options.jobs // 100:
                print(f"  {name:32} {count / options.jobs:6.2f}")


if __name__ == "__main__":
    main()
