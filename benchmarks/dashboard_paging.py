"""The dashboard's job pages on a table of 10 million jobs: each page's time, by filter.

    python -m benchmarks.dashboard_paging [--dsn DSN] [--rows 10000000] [--keep]

Builds the rows with generate_series in a schema of its own (dashboard_bench): 97% done,
1% failed, 1% cancelled, 1% pending, over 5 queues and 50 tasks (one task rare: one job
in 10,000), then VACUUM ANALYZE. Each case fetches a first page and a page deep in the
table (keyset: `before` = an id in the middle) through the dashboard's own Store and
its named statement dashboard_job_page, 51 rows as the page asks, 20 times; prints the
median and the largest, and the plan of the slowest case. The target is 100 ms a page.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

import psycopg

import pgbaton
from pgbaton import _sql
from pgbaton.job_filter import JobFilter
from pgbaton.web.store import Store

SCHEMA = "dashboard_bench"
CHUNK = 1_000_000
REPEATS = 20
PAGE = 51
TARGET_MS = 100.0

FILL = f"""
INSERT INTO {SCHEMA}.jobs (queue, task, args, status, attempts, run_at, worker_id,
                           created_at, started_at, finished_at, errors)
SELECT 'q' || (g %% 5), CASE WHEN g %% 10000 = 7 THEN 'rare_task' ELSE 't' || (g %% 49) END,
       jsonb_build_object('seq', g, 'customer', 'c-' || (g %% 100000)
                          || CASE WHEN g %% 100000 = 3 THEN '-needle' ELSE '' END),
       s.status, 1, t, NULL, t, t, CASE WHEN s.status = 'pending' THEN NULL ELSE t END,
       CASE WHEN s.status = 'failed'
            THEN jsonb_build_array(jsonb_build_object('type', 'RuntimeError',
                                                      'message', 'boom ' || g))
            ELSE '[]'::jsonb END
FROM generate_series(%(start)s::bigint, %(end)s::bigint) AS g,
     LATERAL (SELECT now() - make_interval(secs => (%(rows)s - g) / 100.0) AS t) AS times,
     LATERAL (SELECT CASE g %% 100 WHEN 0 THEN 'failed' WHEN 1 THEN 'cancelled'
                                  WHEN 2 THEN 'pending' ELSE 'done' END AS status) AS s
"""


def cases(middle: int, now_text: str) -> dict[str, tuple[JobFilter, int | None]]:
    import datetime as dt

    now = dt.datetime.fromisoformat(now_text)
    return {
        "no filter, first page": (JobFilter(), None),
        "no filter, deep page": (JobFilter(), middle),
        "status=failed (1%), first page": (JobFilter(status="failed"), None),
        "status=failed (1%), deep page": (JobFilter(status="failed"), middle),
        "status=pending (1%), deep page": (JobFilter(status="pending"), middle),
        "queue=q3 (20%), deep page": (JobFilter(queue="q3"), middle),
        "task=t7 (2%), deep page": (JobFilter(task="t7"), middle),
        "status=failed + task=t7 (0.02%), first page":
            (JobFilter(status="failed", task="t7"), None),
        "task=rare_task (0.01%), first page": (JobFilter(task="rare_task"), None),
        "text 'needle' in args (0.001%), first page": (JobFilter(text="needle"), None),
        "finished in the last hour, first page":
            (JobFilter(since=now - dt.timedelta(hours=1)), None),
    }


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", default="postgresql://postgres@127.0.0.1:5432/test")
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--keep", action="store_true", help="Keep the rows for another run.")
    parser.add_argument("--reuse", action="store_true", help="Use rows kept by --keep.")
    options = parser.parse_args()
    with psycopg.connect(options.dsn, autocommit=True) as conn:
        if not options.reuse:
            conn.execute(f"DROP SCHEMA IF EXISTS {SCHEMA} CASCADE")  # type: ignore[arg-type]
            pgbaton.Queue(options.dsn, schema=SCHEMA).migrate()
            started = time.monotonic()
            for start in range(1, options.rows + 1, CHUNK):
                end = min(start + CHUNK - 1, options.rows)
                conn.execute(FILL, {"start": start, "end": end, "rows": options.rows})  # type: ignore[arg-type]
            conn.execute(f"VACUUM ANALYZE {SCHEMA}.jobs")  # type: ignore[arg-type]
            print(f"filled {options.rows:,} rows in {time.monotonic() - started:.0f} s")
        row = conn.execute(f"SELECT max(id), now()::text FROM {SCHEMA}.jobs").fetchone()  # type: ignore[arg-type]
        assert row is not None
        middle, now_text = int(row[0]) // 2, row[1]
        size = conn.execute(f"SELECT pg_size_pretty(pg_total_relation_size('{SCHEMA}.jobs'))"  # type: ignore[arg-type]
                            ).fetchone()
        print(f"jobs: {row[0]:,} rows, {size[0] if size else '?'}")
    store = Store(options.dsn, SCHEMA)
    worst: tuple[float, str] = (0.0, "")
    print(f"\n| page | median ms | largest ms | rows | under {TARGET_MS:.0f} ms |")
    print("|---|--:|--:|--:|---|")
    try:
        for name, (job_filter, before) in cases(middle, now_text).items():
            times, count = [], 0
            for _ in range(REPEATS):
                began = time.perf_counter()
                count = len(await store.job_page(job_filter, before, PAGE))
                times.append((time.perf_counter() - began) * 1000)
            median, largest = statistics.median(times), max(times)
            worst = max(worst, (median, name))
            print(f"| {name} | {median:.1f} | {largest:.1f} | {count} | "
                  f"{'yes' if median < TARGET_MS else 'NO'} |")
        filter_of_worst, before_of_worst = cases(middle, now_text)[worst[1]]
        params = {**filter_of_worst.params(), "before": before_of_worst, "limit": PAGE}
        plan = await store.fetch_plan("dashboard_job_page", params)
        print(f"\nplan of the slowest page ({worst[1]}):\n" + "\n".join(plan))
    finally:
        await store.close()
        if not options.keep:
            with psycopg.connect(options.dsn, autocommit=True) as conn:
                conn.execute(f"DROP SCHEMA IF EXISTS {SCHEMA} CASCADE")  # type: ignore[arg-type]
    assert _sql  # the statement timed is the package's own, by name


if __name__ == "__main__":
    asyncio.run(main())
