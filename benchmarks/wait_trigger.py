"""What the wait trigger (jobs_status_changed since migration 28, jobs_notify_ended before;
docs/howto/waiting.md) costs the drain.

    python -m benchmarks.wait_trigger [--dsn DSN] [--jobs 10000] [--rounds 5]

One process drains jobs with the data plane's own claim and completion (claim 50,
complete_many), in a schema of its own (wait_bench), in three cases: nobody waits
(the trigger's WHEN is false), the triggers disabled (the schema before migration
12), and every job awaited (a NOTIFY per job). Rounds alternate the cases; prints
each case's median jobs per second, and the statements the drain sent, which are
the same in every case (the trigger adds none).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import psycopg

import pgbaton

SCHEMA = "wait_bench"
CLAIM = 50
CASES = ("nobody waits", "triggers off", "every job awaited")


def _fill(queue: pgbaton.Queue, dsn: str, case: str, jobs: int) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"TRUNCATE {SCHEMA}.jobs")
        state = "DISABLE" if case == "triggers off" else "ENABLE"
        for trigger in ("jobs_status_changed", "jobs_notify_ended_by_delete"):
            conn.execute(f"ALTER TABLE {SCHEMA}.jobs {state} TRIGGER {trigger}")  # type: ignore[arg-type]
    queue.enqueue_many([{"task": "t"} for _ in range(jobs)])
    if case == "every job awaited":
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f"UPDATE {SCHEMA}.jobs SET awaited = true")
            conn.execute(f"VACUUM ANALYZE {SCHEMA}.jobs")


def _drain(queue: pgbaton.Queue) -> tuple[float, int]:
    started, statements, done = time.perf_counter(), 0, 0
    while True:
        claims = queue.claim("bench", limit=CLAIM)
        statements += 1
        if not claims:
            return done / (time.perf_counter() - started), statements
        queue.complete_many([(claim, None) for claim in claims])
        statements += 1
        done += len(claims)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", default=os.environ.get("PGBATON_DSN"))
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=5)
    options = parser.parse_args()
    print("load:", os.getloadavg())
    with psycopg.connect(options.dsn, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA IF EXISTS {SCHEMA} CASCADE")
    queue = pgbaton.Queue(options.dsn, schema=SCHEMA)
    queue.migrate()
    rates: dict[str, list[float]] = {case: [] for case in CASES}
    sent: dict[str, int] = {}
    for _ in range(options.rounds):
        for case in CASES:
            _fill(queue, options.dsn, case, options.jobs)
            rate, sent[case] = _drain(queue)
            rates[case].append(rate)
    for case in CASES:
        print(f"{case:>18}: {statistics.median(rates[case]):8.0f} jobs/s, "
              f"{sent[case]} statements; rounds {[round(r) for r in rates[case]]}")
    queue.close()


if __name__ == "__main__":
    main()
