"""Where an enqueue's time goes, on the server and in the client, by interleaved A/B.

    .venv/bin/python -m benchmarks.enqueue_cost [--dsn DSN] [--rounds 15] [--calls 2000]
        [--parts copy,single,client,single_client]

Each server variant is a scratch schema migrated by pgbaton and then changed in ONE way
(a trigger dropped or replaced, an index or a check dropped, fillfactor 100), or a COPY
of the base schema that sends fewer columns or binary; `raw` is the minimal table of
benchmarks/systems/raw_system.py. The variants take turns, in a rotating order, within
each round, and every figure is the median over rounds with its spread (p25 to p75);
"vs base" is the median of the per-round paired differences with the base schema, so
that a slow moment of the machine lands on both sides of each difference.

copy:    per row, a COPY of 1,000 rows (three per round) and of 20,000 rows (one per
         round) of pgbaton's job_copy columns, pre-encoded once (no Python in the timing
         but the write), autocommit (the commit's flush included), into a table
         truncated before each round.
single:  per call, one job_insert (prepared, generic plan, as pgbaton's pool runs it) or
         the raw loop's INSERT, each its own transaction, one connection per variant.
client:  AsyncQueue.enqueue_many of 1,000 and 20,000 jobs against its parts (the
         Python checks and encoding alone, job_ids_reserve alone, the COPY of bytes
         alone), and against the candidate encodings.
single_client: Task.enqueue_async against its layers (the pool's checkout alone,
         job_params alone, job_insert on a bare connection).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import io
import json
import os
import re
import statistics
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from typing import Any

import psycopg
import psycopg_pool
from psycopg.copy import FileWriter

import pgbaton
from pgbaton import _sql
from pgbaton._checks import JOB_DEFAULTS, job_params, many_job_params
from pgbaton._copy_rows import plain_copy_rows
from pgbaton._encoding import to_json

from .systems.raw_system import INSERT_ONE, SCHEMA_SQL

# -- the COPY path before the branch wt-bulk, kept as the reference its A/Bs compare
# against: each job's args encoded by to_json, then one psycopg write_row per job, its
# columns in COPY_COLUMNS' order (main's job_copy then).

def copy_job_rows(rows: Sequence[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """The rows of many_job_params(encode=False) with JOB_DEFAULTS filled in, each job's
    args encoded alone: queue, task, args, priority, run_at, delay, key, max_attempts,
    limit_key."""
    return [
        (row.get("queue", JOB_DEFAULTS["queue"]), row["task"], to_json(row["args"], "args"),
         row.get("priority", JOB_DEFAULTS["priority"]), row.get("run_at"),
         row.get("delay", JOB_DEFAULTS["delay"]), row.get("key"),
         row.get("max_attempts", JOB_DEFAULTS["max_attempts"]), row.get("limit_key"))
        for row in rows
    ]


def copy_values(
    ids: Sequence[int], rows: Sequence[Any], meta: str | None, now: dt.datetime | None
) -> Iterator[tuple[Any, ...]]:
    """The values of COPY_COLUMNS for each job, or with now the scheduled columns (run_at
    after priority)."""
    due_now = "" if now is None else now.isoformat()
    for job_id, (queue, task, args, priority, run_at, delay, key, attempts, limit_key) in zip(
        ids, rows, strict=True
    ):
        if now is None:
            yield (job_id, queue, task, args, priority, key, attempts, meta, limit_key)
        else:
            yield (job_id, queue, task, args, priority, _due(now, due_now, run_at, delay),
                   key, attempts, meta, limit_key)


# -- the COPY text built in Python, tried on the branch wt-enqcost and dropped: the
# client's CPU fell by 0.2 to 0.5 us a job, the end-to-end time did not move
# (results/enqueue-server-cost.md). Kept here so that the A/B can be run again.

def _due(now: dt.datetime, due_now: str, run_at: str | None, delay: float) -> str:
    """A job's run_at for job_copy_scheduled: its own, else now plus its delay, rounded
    to the microsecond as PostgreSQL's make_interval rounds it."""
    if run_at is not None:
        return run_at
    if delay:
        return (now + dt.timedelta(microseconds=round(delay * 1_000_000))).isoformat()
    return due_now


# COPY's text format: a backslash, the column delimiter (tab), newline and carriage
# return must be escaped; the other control characters psycopg's own COPY escapes too.
_COPY_SPECIAL = re.compile(r"[\\\t\n\r\b\f\v]")
_COPY_ESCAPES = {
    ord("\\"): "\\\\", ord("\t"): "\\t", ord("\n"): "\\n", ord("\r"): "\\r",
    ord("\b"): "\\b", ord("\f"): "\\f", ord("\v"): "\\v",
}
# Rows per piece of COPY text handed to the connection: the server parses one piece
# while the next is built.
COPY_CHUNK_ROWS = 500


def _copy_field(value: str | None) -> str:
    """A text value as a field of COPY's text format (None: NULL)."""
    if value is None:
        return "\\N"
    if _COPY_SPECIAL.search(value):
        return value.translate(_COPY_ESCAPES)
    return value


def copy_text(
    ids: Sequence[int], rows: Sequence[Any], meta: str | None, now: dt.datetime | None
) -> Iterator[str]:
    """copy_values' rows as COPY's text format, in pieces of COPY_CHUNK_ROWS lines, for
    the connection to encode and send as they come: psycopg's write_row formats the
    same fields, but value by value through its adapters. A queue or task name is
    escaped once per batch; a job's args are JSON, which holds no raw control character
    (the encoder escapes them), so only its backslashes need doubling."""
    names: dict[str, str] = {}
    meta_field = _copy_field(meta)
    due_now = "" if now is None else now.isoformat()
    lines: list[str] = []
    for job_id, (queue, task, args, priority, run_at, delay, key, attempts, limit_key) in zip(
        ids, rows, strict=True
    ):
        queue_field = names.get(queue)
        if queue_field is None:
            queue_field = names[queue] = _copy_field(queue)
        task_field = names.get(task)
        if task_field is None:
            task_field = names[task] = _copy_field(task)
        args_field = args.replace("\\", "\\\\") if "\\" in args else args
        when = "" if now is None else _due(now, due_now, run_at, delay) + "\t"
        key_field = "\\N" if key is None else _copy_field(key)
        limit_field = "\\N" if limit_key is None else _copy_field(limit_key)
        lines.append(
            f"{job_id}\t{queue_field}\t{task_field}\t{args_field}\t{priority}\t{when}"
            f"{key_field}\t{attempts}\t{meta_field}\t{limit_field}\n"
        )
        if len(lines) >= COPY_CHUNK_ROWS:
            yield "".join(lines)
            lines = []
    if lines:
        yield "".join(lines)



PREFIX = "ec_"
CHECKS = [
    "jobs_status_known", "jobs_waiting_for_parents", "jobs_token_while_held",
    "jobs_attempts_in_range", "jobs_args_is_object",
]
# The partial indexes a new pending job without a key does not enter (their predicates
# are still evaluated for it).
UNENTERED = [
    "jobs_held", "jobs_key_unfinished", "jobs_one_running_per_key",
    "jobs_key_held_after_cancel", "jobs_task_idempotency_key_unique",
    "jobs_idempotency_key_unique", "jobs_finished", "jobs_failed",
    "jobs_limit_key_held",
]


def _trigger(body: str, transition: bool = True) -> str:
    referencing = "REFERENCING NEW TABLE AS inserted_jobs" if transition else ""
    return f"""
DROP TRIGGER jobs_notify_inserted ON S.jobs;
CREATE OR REPLACE FUNCTION S.jobs_notify_variant() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    queue_name text;
BEGIN
{body}
    RETURN NULL;
END;
$$;
CREATE TRIGGER jobs_notify_inserted AFTER INSERT ON S.jobs {referencing}
    FOR EACH STATEMENT EXECUTE FUNCTION S.jobs_notify_variant();
"""


# name -> SQL that changes the freshly migrated schema S in one way.
SERVER_VARIANTS: dict[str, str] = {
    "base": "",
    "no NOTIFY trigger": "DROP TRIGGER jobs_notify_inserted ON S.jobs",
    "trigger without transition table (notifies 'default', reads nothing)": _trigger(
        "    PERFORM pg_notify(TG_TABLE_SCHEMA || '_jobs', 'default');", transition=False),
    "transition table kept, not read (notifies 'default')": _trigger(
        "    PERFORM pg_notify(TG_TABLE_SCHEMA || '_jobs', 'default');"),
    "trigger: one PERFORM over SELECT DISTINCT (no loop)": _trigger(
        "    PERFORM pg_notify(TG_TABLE_SCHEMA || '_jobs', d.queue)\n"
        "    FROM (SELECT DISTINCT queue FROM inserted_jobs WHERE run_at <= now()) AS d;"),
    "trigger: min/max queue in one pass, DISTINCT only when they differ": _trigger(
        """    DECLARE lo text; hi text;
    BEGIN
        SELECT min(queue COLLATE "C"), max(queue COLLATE "C") INTO lo, hi
        FROM inserted_jobs WHERE run_at <= now();
        IF lo = hi THEN
            PERFORM pg_notify(TG_TABLE_SCHEMA || '_jobs', lo);
        ELSIF lo IS NOT NULL THEN
            FOR queue_name IN
                SELECT DISTINCT queue FROM inserted_jobs WHERE run_at <= now()
            LOOP
                PERFORM pg_notify(TG_TABLE_SCHEMA || '_jobs', queue_name);
            END LOOP;
        END IF;
    END;"""),
    "trigger: pg_notify per row, no DISTINCT (PostgreSQL folds repeats)": _trigger(
        "    PERFORM pg_notify(TG_TABLE_SCHEMA || '_jobs', queue)\n"
        "    FROM inserted_jobs WHERE run_at <= now();"),
    "row-level AFTER trigger WHEN (NEW.run_at <= now())": """
DROP TRIGGER jobs_notify_inserted ON S.jobs;
CREATE FUNCTION S.jobs_notify_row() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify(TG_TABLE_SCHEMA || '_jobs', NEW.queue);
    RETURN NULL;
END;
$$;
CREATE TRIGGER jobs_notify_inserted AFTER INSERT ON S.jobs FOR EACH ROW
    WHEN (NEW.run_at <= now()) EXECUTE FUNCTION S.jobs_notify_row();
""",
    "no jobs_queue_claimable": "DROP INDEX S.jobs_queue_claimable",
    'jobs_queue_claimable on queue COLLATE "C"': """
DROP INDEX S.jobs_queue_claimable;
CREATE INDEX jobs_queue_claimable ON S.jobs (queue COLLATE "C", priority DESC, run_at, id)
    WHERE status = 'pending' AND queue <> '';
""",
    "no jobs_claimable (for scale: the other claimable index)": "DROP INDEX S.jobs_claimable",
    **{f"no CHECK {name}": f"ALTER TABLE S.jobs DROP CONSTRAINT {name}" for name in CHECKS},
    "no CHECKs at all": ";".join(f"ALTER TABLE S.jobs DROP CONSTRAINT {n}" for n in CHECKS),
    "fillfactor 100": "ALTER TABLE S.jobs SET (fillfactor = 100)",
    "no partial indexes a pending job does not enter (10)": ";".join(
        f"DROP INDEX S.{name}" for name in UNENTERED),
}
RAW = "raw minimal table (raw_system.py)"
FEWER = "base, COPY of (id, task, args) only (the rest by defaults)"
BINARY = "base, binary COPY of job_copy's columns"
COPY_COLUMNS = "(id, queue, task, args, priority, key, max_attempts, meta, limit_key)"
BINARY_TYPES = ["int8", "text", "text", "jsonb", "int4", "text", "int4", "jsonb", "text"]


def setup(dsn: str, names: list[str]) -> dict[str, str]:
    """A scratch schema for each variant; returns variant -> schema."""
    schemas: dict[str, str] = {}
    with psycopg.connect(dsn, autocommit=True) as conn:
        for name in names:
            schema = schemas[name] = f"{PREFIX}{len(schemas)}"
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')  # type: ignore[arg-type]
            if name == RAW:
                conn.execute(f'CREATE SCHEMA "{schema}"')  # type: ignore[arg-type]
                conn.execute(f'SET search_path TO "{schema}"')  # type: ignore[arg-type]
                conn.execute(SCHEMA_SQL)  # type: ignore[arg-type]
                conn.execute("RESET search_path")
                continue
            pgbaton.Queue(dsn, schema=schema).migrate()
            toggle = SERVER_VARIANTS.get(name, "")
            if toggle:
                conn.execute(toggle.replace("S.", f'"{schema}".'))  # type: ignore[arg-type]
    return schemas


def teardown(dsn: str, schemas: dict[str, str]) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        for schema in set(schemas.values()):
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')  # type: ignore[arg-type]


def stats(values: list[float]) -> tuple[float, float, float]:
    values = sorted(values)
    if len(values) == 1:
        return values[0], values[0], values[0]
    q = statistics.quantiles(values, n=4)
    return statistics.median(values), q[0], q[2]


def fmt(values: list[float], unit: str = "") -> str:
    median, p25, p75 = stats(values)
    return f"{median:8.2f}{unit} [{p25:.2f}, {p75:.2f}]"


def load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f} {five:.2f} {fifteen:.2f}"


# -- copy: the server's cost per row -------------------------------------------------


def _jobs(count: int) -> list[dict[str, Any]]:
    return [{"task": "noop", "args": {"seq": n}} for n in range(count)]


def encoded_copy(cur: psycopg.Cursor[Any], first_id: int, count: int, kind: str) -> bytes:
    """What pgbaton's COPY sends for count {"task": "noop", "args": {"seq": n}} jobs, as
    psycopg formats it (write_row), with ids from first_id."""
    buffer = io.BytesIO()
    rows = copy_job_rows(many_job_params(_jobs(count), encode=False)["rows"])
    ids = list(range(first_id, first_id + count))
    with psycopg.Copy(cur, binary=kind == "binary", writer=FileWriter(buffer)) as copy:
        if kind == "binary":
            copy.set_types(BINARY_TYPES)
        for values in copy_values(ids, rows, None, None):
            if kind == "fewer":
                row: tuple[Any, ...] = (values[0], values[2], values[3])
            elif kind == "raw":
                row = (values[3],)
            elif kind == "binary":  # jsonb's binary dumper takes the object
                row = (*values[:3], json.loads(values[3]), *values[4:])
            else:
                row = values
            copy.write_row(row)
    return buffer.getvalue()


def _chosen(names: list[str]) -> list[str]:
    """The variants --variants names (substrings; "base" always), else all."""
    if not CHOSEN:
        return names
    return [n for n in names if n == "base" or any(c in n for c in CHOSEN)]


CHOSEN: list[str] = []


def part_copy(dsn: str, rounds: int) -> None:
    names = _chosen([*SERVER_VARIANTS, FEWER, BINARY, RAW])
    schemas = setup(dsn, [n for n in names if n not in (FEWER, BINARY)])
    schemas.setdefault(FEWER, schemas["base"])
    schemas.setdefault(BINARY, schemas["base"])
    conn = psycopg.connect(dsn, autocommit=True)
    cur = conn.cursor()
    kinds = {FEWER: "fewer", BINARY: "binary", RAW: "raw"}
    sizes = {1000: 3, 20000: 1}
    data: dict[tuple[str, int], list[bytes]] = {}
    for kind in ("text", "fewer", "binary", "raw"):
        first = 1
        for size, times in sizes.items():
            data[kind, size] = []
            for _ in range(times):
                data[kind, size].append(encoded_copy(cur, first, size, kind))
                first += size
    statement = {
        name: (
            f'COPY "{schemas[name]}".jobs (args) FROM STDIN' if name == RAW
            else f'COPY "{schemas[name]}".jobs (id, task, args) FROM STDIN' if name == FEWER
            else f'COPY "{schemas[name]}".jobs {COPY_COLUMNS} FROM STDIN'
            + (" (FORMAT binary)" if name == BINARY else "")
        )
        for name in names
    }
    per_row: dict[tuple[str, int], list[float]] = {(n, s): [] for n in names for s in sizes}
    print(f"copy: {len(names)} variants, {rounds} rounds; {load()}", flush=True)
    for turn in range(rounds + 1):  # round 0 warms up, not counted
        order = names[turn % len(names):] + names[: turn % len(names)]
        for name in order:
            # The raw table's identity is GENERATED ALWAYS: RESTART keeps its ids alike.
            conn.execute(
                f'TRUNCATE "{schemas[name]}".jobs RESTART IDENTITY'  # type: ignore[arg-type]
            )
            for size in sizes:
                for block in data[kinds.get(name, "text"), size]:
                    before = time.perf_counter()
                    with cur.copy(statement[name]) as copy:  # type: ignore[arg-type]
                        copy.write(block)
                    elapsed = time.perf_counter() - before
                    if turn:
                        per_row[name, size].append(elapsed / size * 1e6)
    print(f"copy done; {load()}")
    print("| variant | COPY 1,000: µs/row | vs base | COPY 20,000: µs/row | vs base |")
    print("|---|--:|--:|--:|--:|")
    for name in names:
        cells = []
        for size in sizes:
            mine, base = per_row[name, size], per_row["base", size]
            diffs = [a - b for a, b in zip(mine, base, strict=True)]
            cells += [fmt(mine), fmt(diffs)]
        print(f"| {name} | " + " | ".join(cells) + " |")
    conn.close()
    teardown(dsn, schemas)


# -- single: the server's cost per call ----------------------------------------------


def part_single(dsn: str, calls: int) -> None:
    names = _chosen([*SERVER_VARIANTS, "base, plain INSERT (task, args)", RAW])
    schemas = setup(dsn, [n for n in names if n != "base, plain INSERT (task, args)"])
    if "base, plain INSERT (task, args)" in names:
        schemas["base, plain INSERT (task, args)"] = schemas["base"]
    conns: dict[str, psycopg.Connection[Any]] = {}
    statements: dict[str, str] = {}
    params: dict[str, Any] = {}
    job = {**job_params("noop", {"seq": 1}), "meta": None}
    for name in names:
        conns[name] = psycopg.connect(
            dsn, autocommit=True, options="-c plan_cache_mode=force_generic_plan"
        )
        schema = schemas[name]
        if name == RAW:
            statements[name] = INSERT_ONE.replace("INTO jobs", f'INTO "{schema}".jobs')
            params[name] = ('{"seq": 1}',)
        elif name.startswith("base, plain"):
            statements[name] = (
                f"INSERT INTO \"{schema}\".jobs (task, args) VALUES ('noop', %s::jsonb)"
            )
            params[name] = ('{"seq": 1}',)
        else:
            statements[name] = _sql.queries(schema)["job_insert"]
            params[name] = job
    times: dict[str, list[float]] = {name: [] for name in names}
    print(f"single: {len(names)} variants, {calls} calls each; {load()}", flush=True)
    for turn in range(calls + 20):  # 20 warm-up turns (prepared after 5), not counted
        order = names[turn % len(names):] + names[: turn % len(names)]
        for name in order:
            before = time.perf_counter()
            conns[name].execute(statements[name], params[name], prepare=True)  # type: ignore[arg-type]
            elapsed = time.perf_counter() - before
            if turn >= 20:
                times[name].append(elapsed * 1e6)
    print(f"single done; {load()}")
    print("| variant | µs per call | vs base (paired per turn) |")
    print("|---|--:|--:|")
    for name in names:
        diffs = [a - b for a, b in zip(times[name], times["base"], strict=True)]
        print(f"| {name} | {fmt(times[name])} | {fmt(diffs)} |")
    for conn in conns.values():
        conn.close()
    teardown(dsn, schemas)


# -- client: enqueue_many and its parts ------------------------------------------------

def _old_copy(queue: pgbaton.AsyncQueue) -> str:
    """job_copy as it was before wt-bulk: its columns in COPY_COLUMNS' order."""
    return f'COPY "{queue.schema}".jobs {COPY_COLUMNS} FROM STDIN'


async def enqueue_many_copy_text(queue: pgbaton.AsyncQueue, jobs: list[dict[str, Any]]) -> None:
    """The same with the COPY text built by copy_text, in pieces of 500 rows."""
    rows = copy_job_rows(many_job_params(jobs, encode=False)["rows"])
    async with queue._connection() as pooled:
        (reserved,) = await queue._fetch("job_ids_reserve", {"count": len(rows)}, pooled)
        ids = reserved["ids"] or list(range(reserved["first"], reserved["first"] + len(rows)))
        async with (
            pooled.cursor() as cursor,
            cursor.copy(_old_copy(queue)) as copy,  # type: ignore[arg-type]
        ):
            for text in copy_text(ids, rows, None, None):
                await copy.write(text)


async def enqueue_many_as_on_main(queue: pgbaton.AsyncQueue, jobs: list[dict[str, Any]]) -> None:
    """AsyncQueue.enqueue_many's COPY path as it was before wt-bulk (one write_row per
    job), for a due batch on a pooled connection, without the enqueue hook and events
    (no-ops here)."""
    rows = copy_job_rows(many_job_params(jobs, encode=False)["rows"])
    async with queue._connection() as pooled:
        (reserved,) = await queue._fetch("job_ids_reserve", {"count": len(rows)}, pooled)
        ids = reserved["ids"] or list(range(reserved["first"], reserved["first"] + len(rows)))
        async with (
            pooled.cursor() as cursor,
            cursor.copy(_old_copy(queue)) as copy,  # type: ignore[arg-type]
        ):
            for values in copy_values(ids, rows, None, None):
                await copy.write_row(values)


async def part_client(dsn: str, rounds: int) -> None:  # noqa: PLR0915
    schemas = setup(dsn, ["base"])
    schema = schemas["base"]
    queue = pgbaton.AsyncQueue(dsn, schema=schema)
    await queue.open()
    conn = await psycopg.AsyncConnection.connect(dsn, autocommit=True)
    sync = psycopg.connect(dsn, autocommit=True)
    sizes = [1000, 20000]
    jobs = {size: _jobs(size) for size in sizes}
    blocks = {size: encoded_copy(sync.cursor(), size * 10**6, size, "text") for size in sizes}
    reserve = queue._sql["job_ids_reserve"]
    copy_statement = f'COPY "{schema}".jobs {COPY_COLUMNS} FROM STDIN'

    async def enqueue_many(size: int) -> None:
        await queue.enqueue_many(jobs[size])

    async def enqueue_many_write_row(size: int) -> None:
        await enqueue_many_as_on_main(queue, jobs[size])

    async def python_only(size: int) -> None:
        rows = copy_job_rows(many_job_params(jobs[size], encode=False)["rows"])
        buffer = io.BytesIO()
        with psycopg.Copy(sync.cursor(), writer=FileWriter(buffer)) as copy:
            for values in copy_values(range(size), rows, None, None):  # type: ignore[arg-type]
                copy.write_row(values)

    async def python_only_copy_text(size: int) -> None:
        rows = copy_job_rows(many_job_params(jobs[size], encode=False)["rows"])
        for text in copy_text(range(size), rows, None, None):
            text.encode()

    async def encoding_only(size: int) -> None:
        copy_job_rows(many_job_params(jobs[size], encode=False)["rows"])

    async def python_only_now(size: int) -> None:
        rows = plain_copy_rows(jobs[size])
        assert rows is not None
        for text in rows.text(range(size), None, None):  # type: ignore[arg-type]
            text.encode()

    async def checks_only(size: int) -> None:
        many_job_params(jobs[size], encode=False)

    async def reserve_only(size: int) -> None:
        await (await conn.execute(reserve, {"count": size})).fetchall()

    async def select_1(size: int) -> None:
        await (await conn.execute("SELECT 1")).fetchall()

    async def copy_bytes(size: int) -> None:
        # Rows with ids that exist already in no other run: the table is truncated first.
        async with conn.cursor() as cursor, cursor.copy(copy_statement) as copy:  # type: ignore[arg-type]
            await copy.write(blocks[size])

    layers: dict[str, Callable[[int], Awaitable[Any]]] = {
        "AsyncQueue.enqueue_many (this branch)": enqueue_many,
        "enqueue_many as on main (write_row per job)": enqueue_many_write_row,
        "its Python: checks, encoding, write_row (no I/O)": python_only,
        "its Python: checks, encoding, copy_text (no I/O)": python_only_copy_text,
        "its Python now: plain_copy_rows and its text (no I/O)": python_only_now,
        "its Python: many_job_params + copy_job_rows (args to JSON)": encoding_only,
        "its Python: many_job_params alone": checks_only,
        "job_ids_reserve alone": reserve_only,
        "SELECT 1 (one round trip)": select_1,
        "COPY of pre-encoded bytes alone (autocommit)": copy_bytes,
    }
    names = list(layers)
    per_job: dict[tuple[str, int], list[float]] = {(n, s): [] for n in names for s in sizes}
    print(f"client: {len(names)} layers, {rounds} rounds; {load()}", flush=True)
    for turn in range(rounds + 1):
        order = names[turn % len(names):] + names[: turn % len(names)]
        for name in order:
            await conn.execute(f'TRUNCATE "{schema}".jobs')  # type: ignore[arg-type]
            for size in sizes:
                before = time.perf_counter()
                await layers[name](size)
                elapsed = time.perf_counter() - before
                if turn:
                    per_job[name, size].append(elapsed / size * 1e6)
    print(f"client done; {load()}")
    base = "AsyncQueue.enqueue_many (this branch)"
    print("| layer | 1,000 jobs: µs/job | vs current | 20,000 jobs: µs/job | vs current |")
    print("|---|--:|--:|--:|--:|")
    for name in names:
        cells = []
        for size in sizes:
            mine, ref = per_job[name, size], per_job[base, size]
            cells += [fmt(mine), fmt([a - b for a, b in zip(mine, ref, strict=True)])]
        print(f"| {name} | " + " | ".join(cells) + " |")
    await conn.close()
    sync.close()
    await queue.close()
    teardown(dsn, schemas)


async def part_ab_copy(dsn: str, rounds: int) -> None:
    """enqueue_many on this branch against main's (write_row per job), and the Python
    of each alone, paired round by round."""
    schemas = setup(dsn, ["base"])
    schema = schemas["base"]
    queue = pgbaton.AsyncQueue(dsn, schema=schema)
    await queue.open()
    conn = await psycopg.AsyncConnection.connect(dsn, autocommit=True)
    sync = psycopg.connect(dsn, autocommit=True)
    sizes = [1000, 20000]
    jobs = {size: _jobs(size) for size in sizes}

    async def python_write_row(size: int) -> None:
        rows = copy_job_rows(many_job_params(jobs[size], encode=False)["rows"])
        buffer = io.BytesIO()
        with psycopg.Copy(sync.cursor(), writer=FileWriter(buffer)) as copy:
            for values in copy_values(range(size), rows, None, None):  # type: ignore[arg-type]
                copy.write_row(values)

    async def python_copy_text(size: int) -> None:
        rows = copy_job_rows(many_job_params(jobs[size], encode=False)["rows"])
        for text in copy_text(range(size), rows, None, None):  # type: ignore[arg-type]
            text.encode()

    layers: dict[str, Callable[[int], Awaitable[Any]]] = {
        "enqueue_many as on main (write_row per job)":
            lambda size: enqueue_many_as_on_main(queue, jobs[size]),
        "enqueue_many with the COPY text built in Python (copy_text)":
            lambda size: enqueue_many_copy_text(queue, jobs[size]),
        "Python alone, main: checks, encoding, write_row": python_write_row,
        "Python alone, copy_text: checks, encoding, the text": python_copy_text,
    }
    names = list(layers)
    per_job: dict[tuple[str, int], list[float]] = {(n, s): [] for n in names for s in sizes}
    print(f"ab_copy: {len(names)} layers, {rounds} rounds; {load()}", flush=True)
    for turn in range(rounds + 1):
        order = names[turn % len(names):] + names[: turn % len(names)]
        for name in order:
            await conn.execute(f'TRUNCATE "{schema}".jobs')  # type: ignore[arg-type]
            for size in sizes:
                before = time.perf_counter()
                await layers[name](size)
                elapsed = time.perf_counter() - before
                if turn:
                    per_job[name, size].append(elapsed / size * 1e6)
    print(f"ab_copy done; {load()}")
    print("| layer | 1,000 jobs: µs/job | B - A (paired) | 20,000 jobs: µs/job | B - A |")
    print("|---|--:|--:|--:|--:|")
    for n, name in enumerate(names):
        ref = names[n - 1] if n % 2 else name
        cells = []
        for size in sizes:
            mine, other = per_job[name, size], per_job[ref, size]
            cells += [fmt(mine), fmt([a - b for a, b in zip(mine, other, strict=True)])]
        print(f"| {name} | " + " | ".join(cells) + " |")
    await conn.close()
    sync.close()
    await queue.close()
    teardown(dsn, schemas)


async def part_micro(dsn: str, rounds: int) -> None:  # noqa: PLR0915
    """The client's CPU alone, paired call by call (no statement sent): the COPY text of
    main (write_row per job) against copy_text (tried, dropped), and a checkout from the
    pool as main takes it (pool.connection()) against this branch's (getconn, putconn)."""
    schemas = setup(dsn, ["base"])
    queue = pgbaton.AsyncQueue(dsn, schema=schemas["base"])
    await queue.open()
    pool = queue._pool
    assert pool is not None
    sync = psycopg.connect(dsn, autocommit=True)

    @contextlib.asynccontextmanager
    async def main_connection() -> AsyncIterator[Any]:
        """AsyncQueue._connection as main has it."""
        try:
            async with pool.connection(timeout=5.0) as conn:
                yield conn
        except (psycopg.OperationalError, psycopg_pool.PoolTimeout):
            raise

    def python_write_row(size: int) -> None:
        rows = copy_job_rows(many_job_params(_jobs(size), encode=False)["rows"])
        buffer = io.BytesIO()
        with psycopg.Copy(sync.cursor(), writer=FileWriter(buffer)) as copy:
            for values in copy_values(range(size), rows, None, None):  # type: ignore[arg-type]
                copy.write_row(values)

    def python_copy_text(size: int) -> None:
        rows = copy_job_rows(many_job_params(_jobs(size), encode=False)["rows"])
        for text in copy_text(range(size), rows, None, None):  # type: ignore[arg-type]
            text.encode()

    async def checkout_main() -> None:
        async with main_connection():
            pass

    async def checkout_branch() -> None:
        async with queue._connection():
            pass

    async def getconn_putconn() -> None:
        await pool.putconn(await pool.getconn())

    print(f"micro: {rounds} rounds; {load()}", flush=True)
    pairs: dict[str, list[float]] = {}
    for size, repeat in ((1000, rounds), (20000, max(rounds // 10, 5))):
        a_name = f"COPY text of {size:,} jobs, main (write_row), µs/job"
        b_name = f"COPY text of {size:,} jobs, copy_text (dropped), µs/job"
        pairs[a_name], pairs[b_name], diffs = [], [], []
        for turn in range(repeat):
            first, second = ((python_write_row, python_copy_text) if turn % 2
                             else (python_copy_text, python_write_row))
            took = {}
            for fn in (first, second):
                before = time.perf_counter()
                fn(size)
                took[fn] = (time.perf_counter() - before) / size * 1e6
            pairs[a_name].append(took[python_write_row])
            pairs[b_name].append(took[python_copy_text])
            diffs.append(took[python_copy_text] - took[python_write_row])
        pairs[f"  B - A ({size:,})"] = diffs
    layers = {"checkout, main (pool.connection()), µs": checkout_main,
              "checkout, this branch (getconn, putconn), µs": checkout_branch,
              "pool.getconn + putconn bare, µs": getconn_putconn}
    times: dict[str, list[float]] = {name: [] for name in layers}
    names = list(layers)
    for turn in range(rounds * 20):
        for name in names[turn % 3:] + names[: turn % 3]:
            before = time.perf_counter()
            await layers[name]()
            times[name].append((time.perf_counter() - before) * 1e6)
    pairs.update(times)
    pairs["  checkout: this branch - main (paired)"] = [
        b - a for a, b in zip(times[names[0]], times[names[1]], strict=True)]
    app = pgbaton.App(dsn=dsn, schema=schemas["base"])

    @app.task(name="noop")
    async def noop(seq: int) -> None:  # pragma: no cover - never run
        pass

    fast = noop._names_taken
    checks: dict[str, list[float]] = {"Task.check_args, main (dicts and bind()), µs": [],
                                      "Task.check_args, this branch, µs": []}
    for turn in range(rounds * 20):
        for label, names_taken in (((0, None), (1, fast)) if turn % 2 else ((1, fast), (0, None))):
            noop._names_taken = names_taken
            before = time.perf_counter()
            noop.check_args({"seq": 1})
            checks[list(checks)[label]].append((time.perf_counter() - before) * 1e6)
    pairs.update(checks)
    a, b = checks.values()
    pairs["  check_args: this branch - main (paired)"] = [
        y - x for x, y in zip(a, b, strict=True)]
    print(f"micro done; {load()}")
    print("| measurement | median [p25, p75] |")
    print("|---|--:|")
    for name, values in pairs.items():
        print(f"| {name} | {fmt(values)} |")
    sync.close()
    await queue.close()
    teardown(dsn, schemas)


def main_connection(queue: pgbaton.AsyncQueue) -> Callable[[], Any]:
    """AsyncQueue._connection as main has it (pool.connection()), bound to queue."""

    @contextlib.asynccontextmanager
    async def connection() -> AsyncIterator[Any]:
        pool = queue._pool or await queue._open_pool()
        try:
            async with pool.connection(timeout=5.0) as conn:
                yield conn
        except (psycopg.OperationalError, psycopg_pool.PoolTimeout):
            raise

    return connection


async def part_ab_single(dsn: str, calls: int) -> None:
    """Task.enqueue_async on this branch against main's: three Apps on one schema, each
    with its own pool, taking turns call by call; main's pool checkout and main's
    check_args (the two functions changed) are put back into the App of main."""
    schemas = setup(dsn, ["base"])
    tasks: dict[str, Any] = {}
    apps = []
    for label in ("main", "main's check_args, this branch's checkout", "this branch"):
        app = pgbaton.App(dsn=dsn, schema=schemas["base"])

        @app.task(name="noop")
        async def noop(seq: int) -> None:  # pragma: no cover - never run
            pass

        await app.async_queue.open()
        if label == "main":
            app.async_queue._connection = main_connection(app.async_queue)  # type: ignore[method-assign]
        if label != "this branch":
            noop._names_taken = None  # check_args takes main's path: dicts and bind()
        tasks[label] = noop
        apps.append(app)
    names = list(tasks)
    times: dict[str, list[float]] = {name: [] for name in names}
    print(f"ab_single: {len(names)} variants, {calls} calls each; {load()}", flush=True)
    for turn in range(calls + 20):
        for name in names[turn % 3:] + names[: turn % 3]:
            before = time.perf_counter()
            await tasks[name].enqueue_async({"seq": 1})
            elapsed = time.perf_counter() - before
            if turn >= 20:
                times[name].append(elapsed * 1e6)
    print(f"ab_single done; {load()}")
    print("| variant | µs per call | vs main (paired per turn) |")
    print("|---|--:|--:|")
    for name in names:
        diffs = [b - a for a, b in zip(times["main"], times[name], strict=True)]
        print(f"| {name} | {fmt(times[name])} | {fmt(diffs)} |")
    for app in apps:
        await app.async_queue.close()
    teardown(dsn, schemas)


# -- single_client: one enqueue, layer by layer --------------------------------------

async def part_single_client(dsn: str, calls: int) -> None:  # noqa: PLR0915
    schemas = setup(dsn, ["base"])
    schema = schemas["base"]
    app = pgbaton.App(dsn=dsn, schema=schema)

    @app.task(name="noop")
    async def noop(seq: int) -> None:  # pragma: no cover - never run
        pass

    queue = app.async_queue
    await queue.open()
    pool = queue._pool
    assert pool is not None
    bare = await psycopg.AsyncConnection.connect(
        dsn, autocommit=True, options="-c plan_cache_mode=force_generic_plan"
    )
    statement = queue._sql["job_insert"]
    params = {**job_params("noop", {"seq": 1}), "meta": None}

    async def checkout() -> None:
        async with queue._connection():
            pass

    async def getconn_putconn() -> None:
        conn = await pool.getconn()
        await pool.putconn(conn)

    async def checks() -> None:
        job_params("noop", {"seq": 1})

    async def insert_in_connection_cm() -> None:
        params = {**job_params("noop", {"seq": 1}), "meta": None}
        async with queue._connection() as pooled:
            cursor = pooled.statements()
            await cursor.execute(statement, params)  # type: ignore[arg-type]
            await cursor.fetchall()

    async def insert_in_pool_connection() -> None:
        params = {**job_params("noop", {"seq": 1}), "meta": None}
        async with pool.connection() as pooled:
            cursor = pooled.statements()
            await cursor.execute(statement, params)  # type: ignore[arg-type]
            await cursor.fetchall()

    async def insert_getconn_putconn() -> None:
        params = {**job_params("noop", {"seq": 1}), "meta": None}
        pooled = await pool.getconn()
        try:
            cursor = pooled.statements()
            await cursor.execute(statement, params)  # type: ignore[arg-type]
            await cursor.fetchall()
        finally:
            await pool.putconn(pooled)

    async def bare_insert() -> None:
        await (await bare.execute(statement, params, prepare=True)).fetchall()  # type: ignore[arg-type]

    layers: dict[str, Callable[[], Awaitable[Any]]] = {
        "Task.enqueue_async": lambda: noop.enqueue_async({"seq": 1}),
        "AsyncQueue.enqueue": lambda: queue.enqueue("noop", {"seq": 1}),
        "job_insert on a bare connection (prepared)": bare_insert,
        "the pool's checkout and return alone": checkout,
        "pool.getconn + putconn alone (no context managers)": getconn_putconn,
        "job_params + job_insert in pool.connection() (main's _connection)":
            insert_in_pool_connection,
        "job_params + job_insert in queue._connection()": insert_in_connection_cm,
        "job_params + job_insert between getconn and putconn": insert_getconn_putconn,
        "job_params alone": checks,
    }
    names = list(layers)
    times: dict[str, list[float]] = {name: [] for name in names}
    print(f"single_client: {len(names)} layers, {calls} calls each; {load()}", flush=True)
    for turn in range(calls + 20):
        order = names[turn % len(names):] + names[: turn % len(names)]
        for name in order:
            before = time.perf_counter()
            await layers[name]()
            elapsed = time.perf_counter() - before
            if turn >= 20:
                times[name].append(elapsed * 1e6)
    print(f"single_client done; {load()}")
    print("| layer | µs per call | vs Task.enqueue_async (paired) |")
    print("|---|--:|--:|")
    for name in names:
        diffs = [a - b for a, b in zip(times[name], times["Task.enqueue_async"], strict=True)]
        print(f"| {name} | {fmt(times[name])} | {fmt(diffs)} |")
    await bare.close()
    await queue.close()
    teardown(dsn, schemas)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dsn", default=os.environ.get(
        "PGBATON_TEST_DSN", "postgresql://postgres@127.0.0.1:5432/test"))
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--parts", default="copy,single,client,single_client")
    parser.add_argument("--variants", default="",
                        help="server variants to run, as comma-separated substrings")
    args = parser.parse_args()
    CHOSEN.extend(v for v in args.variants.split(",") if v)
    parts = args.parts.split(",")
    print(f"{time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}; {load()}")
    if "copy" in parts:
        part_copy(args.dsn, args.rounds)
    if "single" in parts:
        part_single(args.dsn, args.calls)
    if "client" in parts:
        asyncio.run(part_client(args.dsn, args.rounds))
    if "ab_single" in parts:
        asyncio.run(part_ab_single(args.dsn, args.calls))
    if "micro" in parts:
        asyncio.run(part_micro(args.dsn, args.rounds))
    if "ab_copy" in parts:
        asyncio.run(part_ab_copy(args.dsn, args.rounds))
    if "single_client" in parts:
        asyncio.run(part_single_client(args.dsn, args.calls))


if __name__ == "__main__":
    main()
