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
from pgbaton.job_filter import JobFilter
from pgbaton.web.store import STATEMENT_TIMEOUT_MS, Store

SCHEMA = "dashboard_bench"
CHUNK = 1_000_000
REPEATS = 20
GIVE_UP_MS = 1000.0  # a case slower than this once is timed once more, not 20 times

# Indexes the dashboard would like on large tables, measured with --with-indexes or
# --indexes; migration 6 adds jobs_failed, and docs/howto/dashboard-metrics-traces.md
# says why not the others.
PROPOSED_INDEXES = (
    f"CREATE INDEX IF NOT EXISTS jobs_task_id ON {SCHEMA}.jobs (task, id)",
    f"CREATE INDEX IF NOT EXISTS jobs_failed ON {SCHEMA}.jobs (id) INCLUDE (queue) "
    "WHERE status = 'failed'",
    f"CREATE INDEX IF NOT EXISTS jobs_pending_by_queue ON {SCHEMA}.jobs (queue, run_at) "
    "WHERE status = 'pending'",
    f"CREATE INDEX IF NOT EXISTS jobs_finished_by_time ON {SCHEMA}.jobs (finished_at) "
    "INCLUDE (queue, status, started_at, run_at) "
    "WHERE status IN ('done', 'failed', 'cancelled')",
)
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
    parser.add_argument("--with-indexes", action="store_true",
                        help="Add PROPOSED_INDEXES first (and keep them).")
    parser.add_argument("--indexes", default=None, metavar="NAME,...",
                        help="Only these of PROPOSED_INDEXES (dropping the others), to "
                             "measure what each buys; '' for none of them.")
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
        if options.with_indexes or options.indexes is not None:
            wanted = set(filter(None, (options.indexes or "").split(",")))
            for statement in PROPOSED_INDEXES:
                name = statement.split(" ON ")[0].split()[-1]
                if options.with_indexes or name in wanted:
                    conn.execute(statement)  # type: ignore[arg-type]
                else:
                    conn.execute(f"DROP INDEX IF EXISTS {SCHEMA}.{name}")  # type: ignore[arg-type]
            conn.execute(f"ANALYZE {SCHEMA}.jobs")  # type: ignore[arg-type]
        row = conn.execute(f"SELECT max(id), now()::text FROM {SCHEMA}.jobs").fetchone()  # type: ignore[arg-type]
        assert row is not None
        middle, now_text = int(row[0]) // 2, row[1]
        size = conn.execute(f"SELECT pg_size_pretty(pg_total_relation_size('{SCHEMA}.jobs'))"  # type: ignore[arg-type]
                            ).fetchone()
        print(f"jobs: {row[0]:,} rows, {size[0] if size else '?'}")
    store = Store(options.dsn, SCHEMA)
    print(f"\n| page | median ms | largest ms | rows | under {TARGET_MS:.0f} ms |")
    print("|---|--:|--:|--:|---|")
    try:
        await time_overview(store)
        worst = await time_pages(store, cases(middle, now_text))
        filter_of_worst, before_of_worst = cases(middle, now_text)[worst]
        params = {**filter_of_worst.params(), "before": before_of_worst, "limit": PAGE}
        plan = await store.fetch_plan("dashboard_job_page", params)
        print(f"\nplan of the slowest page ({worst}):\n" + "\n".join(plan))
    finally:
        await store.close()
        if not options.keep:
            with psycopg.connect(options.dsn, autocommit=True) as conn:
                conn.execute(f"DROP SCHEMA IF EXISTS {SCHEMA} CASCADE")  # type: ignore[arg-type]


def row(name: str, times: list[float], count: int) -> None:
    median = statistics.median(times)
    print(f"| {name} | {median:.1f} | {max(times):.1f} | {count} | "
          f"{'yes' if median < TARGET_MS else 'NO'} |")


async def time_overview(store: Store) -> None:
    for name, statement, params in (
            ("overview: queue counts", "dashboard_queue_counts", None),
            ("overview: the whole last hour", "dashboard_minutes", {"since": None})):
        times, count = [], 0
        for _ in range(5):
            began = time.perf_counter()
            count = len(await store.fetch(statement, params))
            times.append((time.perf_counter() - began) * 1000)
        row(name, times, count)


async def time_pages(store: Store, pages: dict[str, tuple[JobFilter, int | None]]) -> str:
    """Times each page; returns the name of the slowest that finished."""
    worst = (0.0, "")
    for name, (job_filter, before) in pages.items():
        times, count = [], 0
        try:
            for _ in range(REPEATS):
                began = time.perf_counter()
                count = len(await store.job_page(job_filter, before, PAGE))
                times.append((time.perf_counter() - began) * 1000)
                if len(times) >= 2 and times[0] > GIVE_UP_MS:
                    break
        except psycopg.errors.QueryCanceled:
            print(f"| {name} | over the {STATEMENT_TIMEOUT_MS / 1000:.0f} s timeout "
                  "(the page answers 503: narrow the filter) | | | NO |")
            continue
        worst = max(worst, (statistics.median(times), name))
        row(name, times, count)
    return worst[1]

if __name__ == "__main__":
    asyncio.run(main())
