"""`make bench`: every case, every system, each run in a fresh database, in one command.

    python -m benchmarks.run            # the full measurement (its length: benchmarks/README.md)
    python -m benchmarks.run --quick    # a couple of minutes: checks that the harness works
    python -m benchmarks.run --base main   # also pgbaton at main, compared with the checkout

Each run is a child process (python -m benchmarks.case) on a database created for it and
dropped after it. Repeats are interleaved (every system runs repeat 1 of a case before
any runs repeat 2, in a rotating order) so that a slow minute of a busy machine does not
land on one system only. Results go to benchmarks/results/latest.json and latest.md.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import platform
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import psutil

from . import base_tree, report
from .common import (
    create_database,
    database_name,
    drop_database,
    drop_leftover_databases,
    find_server,
    fresh_database,
    server_facts,
)
from .held_xmin import READERS, TICK_S, WINDOW_S
from .systems import AT_BASE, SYSTEMS

ROOT = Path(__file__).resolve().parents[1]
RESULTS = Path(__file__).resolve().parent / "results"
INSTALL_FAILURES = ROOT / ".venv-bench" / "install-failures.txt"
# The requirement line of requirements-peers.txt that brings each peer.
REQUIREMENTS = {"procrastinate": "procrastinate", "pgqueuer": "pgqueuer", "chancy": "chancy",
                "awa": "awa-pg", "graphile": "graphile-worker",
                "graphile_b": "graphile-worker"}


@dataclass
class Plan:
    mode: str
    jobs: int
    bulk_batch: int
    concurrency: list[int]
    time_cap: float
    latency_jobs: int
    latency_concurrency: int
    latency_gap: tuple[float, float]
    latency_warmup: int
    claim_rows: list[int]
    claim_pending: int
    claims: int
    repeats: int
    claim_blocked: tuple[int, ...] = (0, 100_000)
    # The held-xmin cell (issue 27): the rate offered, the hold and the warm-up before it
    # (seconds), and its runs per system (each one is as long as its hold and more).
    xmin_rate: int = 2_000
    xmin_hold: float = 90.0
    xmin_warmup: float = 15.0
    xmin_repeats: int = 1
    # The readers' max_parallel_workers_per_gather (held_xmin_readers); None: the server's.
    xmin_reader_parallel: int | None = None
    # A concurrency limit on the cell's queue (the flow claim's cell); None: no limit.
    xmin_queue_limit: int | None = None


FULL = Plan(
    mode="full", jobs=20_000, bulk_batch=1_000, concurrency=[1, 8, 32, 128], time_cap=60.0,
    latency_jobs=60, latency_concurrency=8, latency_gap=(0.05, 0.15), latency_warmup=5,
    claim_rows=[0, 1_000_000, 10_000_000], claim_pending=1_000, claims=500, repeats=3,
)
QUICK = Plan(
    mode="quick", jobs=1_000, bulk_batch=1_000, concurrency=[1, 8, 32, 128], time_cap=5.0,
    latency_jobs=10, latency_concurrency=8, latency_gap=(0.05, 0.15), latency_warmup=3,
    claim_rows=[0, 10_000, 100_000], claim_pending=500, claims=100, repeats=1,
    xmin_hold=20.0, xmin_warmup=10.0,
)
# Every case, in the order they run (held_xmin_readers: the held-xmin cell with scanning
# readers in place of the idle holder).
CASES = ["enqueue_single", "enqueue_bulk", "drain", "latency", "claim_time", "claim_blocked",
         "held_xmin", "held_xmin_readers"]


@dataclass
class Run:
    case_id: str
    case: str
    system: str
    repeat: int
    params: dict[str, Any]
    timeout: float


def case_runs(plan: Plan, cases: list[str], systems: dict[str, dict[str, Any]]) -> list[Run]:
    """Every run of the measurement, in the order it happens."""
    groups: list[tuple[str, str, dict[str, Any], float, int]] = []
    if "enqueue_single" in cases:
        groups.append(("enqueue_single", "enqueue_single",
                       {"jobs": plan.jobs, "time_cap": plan.time_cap}, plan.time_cap + 120,
                       plan.repeats))
    if "enqueue_bulk" in cases:
        groups.append(("enqueue_bulk", "enqueue_bulk",
                       {"jobs": plan.jobs, "batch": plan.bulk_batch}, 120 + plan.jobs / 100,
                       plan.repeats))
    if "drain" in cases:
        for c in plan.concurrency:
            params: dict[str, Any] = {"jobs": plan.jobs, "batch": plan.bulk_batch,
                                      "concurrency": c, "time_cap": plan.time_cap,
                                      "timeout": 120.0}
            groups.append((f"drain_c{c}", "drain", params, plan.time_cap + 240 + plan.jobs / 100,
                           plan.repeats))
    if "latency" in cases:
        lo, hi = plan.latency_gap
        params = {"jobs": plan.latency_jobs, "concurrency": plan.latency_concurrency,
                  "gap_min": lo, "gap_max": hi, "warmup": plan.latency_warmup}
        groups.append(("latency", "latency", params, 120 + plan.latency_jobs * 3,
                       plan.repeats))
    for case_id, readers in (("held_xmin", 0), ("held_xmin_readers", READERS)):
        if case_id in cases:
            params = {"rate": plan.xmin_rate, "hold": plan.xmin_hold,
                      "warmup": plan.xmin_warmup, "window": WINDOW_S, "tick": TICK_S,
                      "concurrency": 32, "readers": readers, "drain_timeout": 300.0}
            if readers and plan.xmin_reader_parallel is not None:
                params["reader_parallel"] = plan.xmin_reader_parallel
            if plan.xmin_queue_limit is not None:
                params["queue_limit"] = plan.xmin_queue_limit
            groups.append((case_id, "held_xmin", params,
                           plan.xmin_warmup + plan.xmin_hold + 420, plan.xmin_repeats))
    runs: list[Run] = []
    names = list(systems)
    for case_id, case, params, timeout, repeats in groups:
        able = [s for s in names if case in systems[s].get("cases", [])
                and runs_at(systems[s], params.get("concurrency"))]
        for repeat in range(repeats):
            shift = repeat % len(able) if able else 0
            for system in able[shift:] + able[:shift]:
                runs.append(Run(case_id, case, system, repeat, params, timeout))
    if "claim_blocked" in cases:
        for blocked in plan.claim_blocked:
            params = {"blocked": blocked, "pending": plan.claim_pending, "claims": plan.claims,
                      "rounds": plan.repeats}
            for system in names:
                if "claim_blocked" in systems[system].get("cases", []):
                    runs.append(Run(f"claim_blocked_{blocked}", "claim_blocked", system, 0,
                                    params, 300 + blocked / 5_000))
    if "claim_time" in cases:
        for rows in plan.claim_rows:
            params = {"rows": rows, "pending": plan.claim_pending, "claims": plan.claims,
                      "rounds": plan.repeats}
            for system in names:
                if "claim_time" in systems[system].get("cases", []):
                    runs.append(Run(f"claim_{rows}", "claim_time", system, 0, params,
                                    300 + rows / 5_000))
    return runs


def runs_at(system: dict[str, Any], concurrency: int | None) -> bool:
    """Whether a system is run at a drain concurrency (raw SQL, LIMIT 1 needs one
    connection per job in flight, and the server allows only so many)."""
    highest = system.get("max_concurrency")
    return concurrency is None or highest is None or concurrency <= highest


def child(argv: list[str], timeout: float, prefix: list[str] | None = None,
          env: dict[str, str] | None = None) -> dict[str, Any]:
    """Run `python -m benchmarks.case ...` (in `env`, else this process's environment);
    its RESULT line, or {"error": ...}."""
    command = [*(prefix or []), sys.executable, "-m", "benchmarks.case", *argv]
    try:
        done = subprocess.run(
            command, cwd=ROOT, capture_output=True, text=True, timeout=timeout, check=False,
            env=env,
        )
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:.0f} s"}
    for line in reversed(done.stdout.splitlines()):
        if line.startswith("RESULT "):
            result: dict[str, Any] = json.loads(line[len("RESULT "):])
            return result
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    reason = lines[-1].strip() if lines else f"exit status {done.returncode}, no output"
    return {"error": reason[:400], "stderr_tail": lines[-15:]}


def check_systems(names: list[str],
                  envs: dict[str, dict[str, str]]) -> dict[str, dict[str, Any]]:
    """Which systems can be imported here, their versions, and why the others cannot
    (`envs`: the environment of a system's processes, when it is not this one's)."""
    failures: dict[str, str] = {}
    if INSTALL_FAILURES.exists():
        for line in INSTALL_FAILURES.read_text().splitlines():
            requirement, _, reason = line.partition("\t")
            failures[requirement] = reason
    systems = {}
    for name in names:
        info = child([name, "--check"], 120, env=envs.get(name))
        if "error" in info:
            pins = [r for r in failures if r.startswith(REQUIREMENTS.get(name, name))]
            why = f"not installed ({failures[pins[0]]})" if pins else info["error"]
            info = {"name": name, "error": f"cannot be imported here: {why}", "cases": []}
        systems[name] = info
    return systems


def prepare_templates(server_dsn: str, systems: dict[str, dict[str, Any]],
                      envs: dict[str, dict[str, str]]) -> dict[str, str]:
    """One database per system with its schema installed; every run's fresh database is a
    copy of it, so that a slow migration (awa's takes seconds) is paid once. pgbaton at
    the base and the checkout's each install their own schema in their own template."""
    templates: dict[str, str] = {}
    for name, info in systems.items():
        if "error" in info:
            continue
        template = database_name(f"template_{name}")
        url = create_database(server_dsn, template)
        result = child([name, "--prepare", "--dsn", url], 300, env=envs.get(name))
        if "error" in result:
            drop_database(server_dsn, template)
            info.update(error=f"its schema could not be installed: {result['error']}", cases=[])
            print(f"  {name}: {info['error']}", flush=True)
            continue
        info["install_seconds"] = round(result["install_seconds"], 2)
        templates[name] = template
    return templates


def machine_facts() -> dict[str, Any]:
    return {
        "cpus": os.cpu_count(),
        "memory_gb": round(psutil.virtual_memory().total / 1024**3, 1),
        "load_average_at_start": [round(x, 2) for x in os.getloadavg()],
        "python": platform.python_version(),
        "platform": platform.platform(),
    }


def describe(run: Run, result: dict[str, Any], seconds: float) -> str:
    if "error" in result:
        return f"FAILED: {result['error']}"
    metrics = result["metrics"]
    parts = []
    for key, value in metrics.items():
        shown = value if isinstance(value, list) else [value]
        parts.append(f"{key}=" + "/".join(f"{v:,.1f}" for v in shown))
    if result.get("info", {}).get("capped"):
        parts.append(f"(time cap, {result['info']['jobs']} jobs)")
    return " ".join(parts) + f"  [{seconds:.1f} s]"


def profile_pgbaton(server_dsn: str, template: str, plan: Plan, out: Path) -> dict[str, Any]:
    """A py-spy profile of pgbaton's worker draining at the concurrency of the memory
    row (32, else the highest)."""
    c = report.load_concurrency(asdict(plan))
    stem = out / f"profile-pgbaton-drain-c{c}"
    params = {"jobs": plan.jobs, "batch": plan.bulk_batch, "concurrency": c,
              "time_cap": plan.time_cap, "timeout": 120.0}
    py_spy = Path(sys.executable).with_name("py-spy")
    outputs = {}
    for fmt, suffix in (("raw", ".folded"), ("flamegraph", ".svg")):
        with fresh_database(server_dsn, "profile", template) as url:
            prefix = [str(py_spy), "record", "--rate", "250", "--format", fmt,
                      "-o", str(stem) + suffix, "--"]
            result = child(["pgbaton", "drain", "--dsn", url, "--params", json.dumps(params)],
                           plan.time_cap + 300, prefix)
        if "error" in result:
            return {"error": result["error"]}
        outputs[fmt] = os.path.relpath(str(stem) + suffix, ROOT)
    return {"files": outputs, "top": report.folded_top(Path(str(stem) + ".folded"))}


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.run", description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--quick", action="store_true",
                        help="fewer jobs, one repeat, small tables: checks the harness works")
    parser.add_argument("--dsn", help="server (default PGBATON_BENCH_DSN, else "
                        "postgresql://postgres@127.0.0.1:5432/test, else the embedded server)")
    parser.add_argument("--systems", help=f"comma-separated subset of {','.join(SYSTEMS)}")
    parser.add_argument("--cases", help=f"comma-separated subset of {','.join(CASES)}")
    parser.add_argument("--jobs", type=int, help="jobs per enqueue/drain run")
    parser.add_argument("--repeats", type=int, help="runs of each case (claim time: rounds)")
    parser.add_argument("--concurrency", help="drain concurrencies, e.g. 1,8,32")
    parser.add_argument("--time-cap", type=float,
                        help="seconds after which a slow enqueue/drain run is measured over "
                        "the jobs done so far")
    parser.add_argument("--latency-jobs", type=int, help="jobs in each latency run (>= 50)")
    parser.add_argument("--claim-rows", help="done rows for the claim-time case, e.g. "
                        "0,1000000,10000000")
    parser.add_argument("--base", default=os.environ.get("PGBATON_BENCH_BASE") or None,
                        help="a git ref (main, a tag, a commit): also run pgbaton at that "
                        "ref (pgbaton_base, pgbaton_base_b) beside the checkout's, and "
                        "compare them (default PGBATON_BENCH_BASE)")
    parser.add_argument("--xmin-rate", type=int,
                        help="jobs a second the held-xmin producer offers (default 2000)")
    parser.add_argument("--xmin-hold", type=float,
                        help="seconds the held-xmin case holds the horizon (default 90, "
                        "--quick 20)")
    parser.add_argument("--xmin-reader-parallel", type=int,
                        help="max_parallel_workers_per_gather in the held_xmin_readers "
                        "case's reader sessions (default: the server's setting)")
    parser.add_argument("--xmin-queue-limit", type=int,
                        help="a concurrency limit on the held-xmin cells' queue, so the "
                        "worker claims through the flow claim (default: none)")
    parser.add_argument("--profile", action="store_true",
                        help="also record a py-spy profile of pgbaton's drain")
    parser.add_argument("--out", type=Path, default=RESULTS, help="results folder")
    parser.add_argument("--loop", choices=("default", "asyncio", "uvloop"),
                        default="default",
                        help="the event loop every Python system runs on (default: the "
                             "enqueue cases on asyncio's, as an application's; the others "
                             "on the one each system's worker command picks: uvloop for "
                             "pgbaton and PgQueuer, asyncio's for the rest)")
    return parser.parse_args()


def build_plan(args: argparse.Namespace) -> Plan:
    plan = Plan(**asdict(QUICK if args.quick else FULL))
    if args.jobs:
        plan.jobs = args.jobs
    if args.repeats:
        plan.repeats = args.repeats
    if args.concurrency:
        plan.concurrency = [int(c) for c in args.concurrency.split(",")]
    if args.time_cap:
        plan.time_cap = args.time_cap
    if args.latency_jobs:
        plan.latency_jobs = args.latency_jobs
    if args.claim_rows:
        plan.claim_rows = [int(float(r)) for r in args.claim_rows.split(",")]
    if args.xmin_rate:
        plan.xmin_rate = args.xmin_rate
    if args.xmin_hold:
        plan.xmin_hold = args.xmin_hold
    if args.xmin_reader_parallel is not None:
        plan.xmin_reader_parallel = args.xmin_reader_parallel
    if args.xmin_queue_limit is not None:
        plan.xmin_queue_limit = args.xmin_queue_limit
    return plan


def take_stop_signals() -> None:
    """SIGTERM ends the run through main's cleanup (the templates dropped, the base's
    folder removed), as Ctrl-C does: its default would kill the harness where it
    stands. The first signal raises; a second one does not cut the cleanup short."""

    def stop(signum: int, frame: Any) -> None:
        for taken in (signal.SIGTERM, signal.SIGINT):
            signal.signal(taken, signal.SIG_IGN)
        raise SystemExit(f"stopped by {signal.Signals(signum).name}")

    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, stop)


def main() -> int:
    args = parse_args()
    plan = build_plan(args)
    os.environ["PGBATON_BENCH_LOOP"] = args.loop  # read by each run's process (case.py)
    everyone = [n for n in SYSTEMS if args.base or n not in AT_BASE]
    names = args.systems.split(",") if args.systems else everyone
    unknown = [n for n in names if n not in SYSTEMS]
    if unknown:
        sys.exit(f"unknown systems: {', '.join(unknown)} (known: {', '.join(SYSTEMS)})")
    if not args.base and (asked := [n for n in names if n in AT_BASE]):
        sys.exit(f"{', '.join(asked)} run pgbaton at a base ref: give --base REF "
                 "(or PGBATON_BENCH_BASE)")
    cases = args.cases.split(",") if args.cases else CASES
    if unknown := [c for c in cases if c not in CASES]:
        sys.exit(f"unknown cases: {', '.join(unknown)} (known: {', '.join(CASES)})")
    take_stop_signals()
    removed = base_tree.drop_leftover_trees()
    if removed:
        print(f"removed {len(removed)} base trees left by an interrupted run", flush=True)
    with contextlib.ExitStack() as stack:
        base = None
        if args.base:
            try:
                base = stack.enter_context(base_tree.exported(args.base))
            except ValueError as error:
                sys.exit(str(error))
            print(f"base: {args.base} = {base.commit[:10]} {base.subject} (in {base.folder})",
                  flush=True)
        return measure(args, plan, names, cases, base)
    return 0  # not reached: mypy cannot tell that ExitStack does not swallow


def measure(args: argparse.Namespace, plan: Plan, names: list[str], cases: list[str],
            base: base_tree.BaseTree | None) -> int:
    # A base system's processes import the base's pgbaton (base_tree.BaseTree.env).
    envs = {name: base.env() for name in names if name in AT_BASE} if base else {}
    started = time.monotonic()
    started_at = dt.datetime.now(dt.UTC)
    server_dsn, embedded_server, server_choice = find_server(args.dsn)
    print(f"server: {server_choice}", flush=True)
    leftovers = drop_leftover_databases(server_dsn)
    if leftovers:
        print(f"dropped {len(leftovers)} databases left by an interrupted run", flush=True)
    systems = check_systems(names, envs)
    for name, info in systems.items():
        state = info.get("error") or f"{info.get('version') or ''} ok".strip()
        where = info.get("source", {}).get("pgbaton_file")
        print(f"  {name}: {state}" + (f" (pgbaton from {where})" if where else ""), flush=True)

    templates = prepare_templates(server_dsn, systems, envs)
    runs = case_runs(plan, cases, systems)
    records: list[dict[str, Any]] = []
    try:
        for number, run in enumerate(runs, 1):
            began = time.monotonic()
            label = f"{run.system}_{run.case_id}"
            with fresh_database(server_dsn, label, templates[run.system]) as url:
                result = child(
                    [run.system, run.case, "--dsn", url, "--params", json.dumps(run.params)],
                    run.timeout, env=envs.get(run.system),
                )
            seconds = time.monotonic() - began
            print(f"[{number}/{len(runs)}] {run.case_id} {run.system} #{run.repeat + 1}: "
                  f"{describe(run, result, seconds)}", flush=True)
            records.append({**asdict(run), **result, "wall_seconds": seconds})
        profile = None
        if args.profile and "pgbaton" in templates:
            args.out.mkdir(parents=True, exist_ok=True)
            profile = profile_pgbaton(server_dsn, templates["pgbaton"], plan, args.out)
    finally:
        for template in templates.values():
            drop_database(server_dsn, template)
    results = {
        "meta": {
            "started_at": started_at.isoformat(timespec="seconds"),
            "duration_seconds": round(time.monotonic() - started),
            "plan": asdict(plan),
            "server": server_choice,
            "server_settings": server_facts(server_dsn),
            "machine": machine_facts(),
            "command": " ".join(["python -m benchmarks.run", *sys.argv[1:]]),
            "checkout": base_tree.checkout_facts(),
            **({"base": base.facts()} if base else {}),
        },
        "systems": systems,
        "runs": records,
        "profile": profile,
    }
    results["summary"] = report.summarize_results(results)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "latest.json").write_text(json.dumps(results, indent=1) + "\n")
    markdown = report.render(results)
    (args.out / "latest.md").write_text(markdown)
    print()
    print(markdown)
    if embedded_server is not None:
        embedded_server.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
