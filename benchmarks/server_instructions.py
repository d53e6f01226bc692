"""The instructions a PostgreSQL server spends on a job's claim and on its completion,
counted by callgrind: the same count every run to within a few instructions a job (the
totals of one setup run twice matched to the last digit), where this machine's wall-clock rates
move by 15% (docs/explanation/performance.md, "The claim's work a job, counted").

    python -m benchmarks.server_instructions [--base REF] [--try FILE ...] [--jobs 2048]

A scratch server (the binaries of `pg_config --bindir`, or --bindir) runs under
`valgrind --tool=callgrind`, every backend counted. A queue with a pool of one
connection enqueues the jobs, claims them the worker's way (128 a claim, 32 of them
starting at once) and completes them 32 a statement, after a warm-up that prepares the
statements and an ANALYZE; then enqueues 256 jobs one a call and 2,000 1,000 a call, and
claims 256 one a claim and completes them one a statement (an idle worker's statements,
whose cost is mostly what a statement pays before its first row). A `SELECT pg_sleep(0)`
on that connection marks each phase: callgrind dumps its counts each time the backend
enters pg_sleep, so each phase's counts are its own. Printed: instructions a job of each
phase, and of the server functions that say where they go, inclusive of what they call.

With --base REF the same runs first with pgbaton at that git ref (benchmarks/base_tree.py),
on the same server: two columns, one run. Each --try FILE adds a column: this checkout
with FILE's SQL run after the migration (`__schema__` stands for the schema), to price a
change of the schema (a trigger or a constraint dropped, say) before making it.

Callgrind counts the server's own instructions, not the kernel's: a system call (a read
of /dev/urandom by a server built without OpenSSL, a write of WAL) counts as the few
instructions that make it. Needs valgrind (Debian's package) and the server's binaries;
started as root, the server runs as the user `postgres`. About 25 s a column for 2,048
jobs.
"""

from __future__ import annotations

import argparse
import json
import os
import pwd
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from . import base_tree

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = "counted"
CLAIM, STARTING, COMPLETE = 128, 32, 32
ONE_BY_ONE, IN_BULK = 256, 2_000  # the enqueues counted: one a call, then 1,000 a call
SINGLES = 256  # jobs claimed one a claim and completed one a statement (an idle worker's)
# The server functions that show where a phase's instructions go (inclusive counts).
PARTS = [
    ("ExecutorStart", "executor start (each statement)"),
    ("stringToNode", "parsing stored expressions (each statement)"),
    ("ExecInsertIndexTuples", "index entries"),
    ("heap_update", "row update"),
    ("ExecConstraints", "CHECK constraints"),
    ("ExecARUpdateTriggers", "row triggers (AFTER UPDATE)"),
    ("index_getnext_slot", "index scans"),
    ("heap_lock_tuple", "row locks (FOR UPDATE)"),
    ("gen_random_uuid", "gen_random_uuid()"),
    ("uuid_in", "text to uuid"),
    ("array_get_slice", "array slices"),
    ("XLogInsert", "WAL records"),
    ("heap_insert", "row insert"),
    ("heap_multi_insert", "rows inserted by COPY"),
    ("plpgsql_exec_trigger", "PL/pgSQL trigger functions"),
]
SUMMARY = re.compile(r"^summary: (\d+)$", re.MULTILINE)
# The phases counted, in the order they run; None: as many jobs as --jobs.
PHASES = {"claim": None, "completion": None, "enqueue, one a call": ONE_BY_ONE,
          "enqueue, 1,000 a call": IN_BULK, "claim, one a call": SINGLES,
          "completion, one a call": SINGLES}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", help="also count pgbaton at this git ref, first")
    parser.add_argument("--jobs", type=int, default=2048)
    parser.add_argument("--bindir", help="the server's binaries (default: pg_config --bindir)")
    parser.add_argument("--keep", help="keep callgrind's files in this folder")
    parser.add_argument("--try", dest="tries", action="append", default=[], metavar="FILE",
                        help="also count this checkout with FILE's SQL run after the "
                        "migration (__schema__ stands for the schema): a column each")
    parser.add_argument("--phases", metavar="DSN", help=argparse.SUPPRESS)  # the child's part
    parser.add_argument("--setup", help=argparse.SUPPRESS)  # the child's --try FILE
    return parser.parse_args(argv)


def server_user() -> str | None:
    """The user the server runs as: this one, or `postgres` for root (initdb refuses
    root)."""
    if os.geteuid() != 0:
        return None
    try:
        pwd.getpwnam("postgres")
    except KeyError:
        sys.exit("run as root, this needs a user `postgres` to run the server as")
    return "postgres"


def as_server(user: str | None, command: list[str]) -> list[str]:
    return ["runuser", "-u", user, "--", *command] if user else command


def bindir(given: str | None) -> Path:
    if given:
        return Path(given)
    if shutil.which("pg_config") is None:
        sys.exit("no pg_config on PATH: give --bindir, the folder of initdb and postgres")
    return Path(subprocess.run(["pg_config", "--bindir"], check=True, capture_output=True,
                               text=True).stdout.strip())


class Server:
    """A scratch cluster whose postmaster, and so every backend, runs under callgrind."""

    def __init__(self, folder: Path, binaries: Path, user: str | None) -> None:
        self.folder, self.binaries, self.user = folder, binaries, user
        self.data = folder / "data"
        self.process: subprocess.Popen[bytes] | None = None
        with socket.socket() as probe:  # a port nothing listens on now
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]

    @property
    def dsn(self) -> str:
        user = self.user or pwd.getpwuid(os.geteuid()).pw_name
        return f"postgresql://{user}@127.0.0.1:{self.port}/postgres"

    def start(self) -> None:
        if self.user:
            shutil.chown(self.folder, self.user)
        subprocess.run(as_server(self.user, [str(self.binaries / "initdb"), "-D", str(self.data),
                                             "-A", "trust", "--no-sync"]),
                       check=True, capture_output=True)
        with (self.data / "postgresql.conf").open("a") as conf:
            conf.write(f"port = {self.port}\nlisten_addresses = '127.0.0.1'\n"
                       f"unix_socket_directories = '{self.folder}'\n"
                       # Nothing but the phases' statements in the counts: no autovacuum,
                       # no checkpoint, no JIT.
                       "autovacuum = off\ncheckpoint_timeout = 1h\nmax_wal_size = 10GB\n"
                       "jit = off\n")
        log = (self.folder / "server.log").open("wb")
        self.process = subprocess.Popen(as_server(self.user, [
            "valgrind", "--tool=callgrind", "--vgdb=no", "--trace-children=yes",
            "--dump-before=pg_sleep", f"--callgrind-out-file={self.folder}/out.%p",
            str(self.binaries / "postgres"), "-D", str(self.data)]),
            stdout=log, stderr=subprocess.STDOUT)
        import psycopg
        deadline = time.monotonic() + 120
        while True:
            try:
                psycopg.connect(self.dsn, connect_timeout=5).close()
                return
            except psycopg.OperationalError:
                if time.monotonic() > deadline or self.process.poll() is not None:
                    raise SystemExit(f"the server under callgrind did not start: "
                                     f"{self.folder / 'server.log'}") from None
                time.sleep(1)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            subprocess.run(as_server(self.user, [str(self.binaries / "pg_ctl"), "-D",
                                                 str(self.data), "stop", "-m", "fast"]),
                           check=False, capture_output=True)
            self.process.wait(60)


def count(server: Server, jobs: int, env: dict[str, str],
          setup: str | None = None) -> dict[str, dict[str, int]]:
    """Run the phases in a process of their own (with the base's pgbaton when env says
    so, after `setup`'s SQL when given) and read their counts."""
    for old in server.folder.glob("out.*"):
        old.unlink()
    subprocess.run([sys.executable, "-m", "benchmarks.server_instructions", "--jobs",
                    str(jobs), "--phases", server.dsn, *(["--setup", setup] if setup else [])],
                   check=True, env=env, cwd=ROOT)
    # Only the queue's connection calls pg_sleep: its dumps end the warm-up, then each
    # phase.
    dumps = sorted(server.folder.glob("out.*.*"), key=lambda p: int(p.suffix[1:]))
    if len(dumps) != 1 + len(PHASES) or len({p.stem for p in dumps}) != 1:
        sys.exit(f"callgrind wrote {[p.name for p in dumps]}: not {1 + len(PHASES)} dumps "
                 "of one backend")
    return {phase: read(dump) for phase, dump in zip(PHASES, dumps[1:], strict=True)}


def read(dump: Path) -> dict[str, int]:
    total = int(SUMMARY.search(dump.read_text())[1])
    listing = subprocess.run(["callgrind_annotate", "--inclusive=yes", "--threshold=100",
                              str(dump)], check=True, capture_output=True, text=True).stdout
    counts = {"total": total}
    for name, _ in PARTS:
        found = re.search(rf"^\s*([\d,]+) \([^)]*\)\s+\S*:{name} \[", listing, re.MULTILINE)
        counts[name] = int(found[1].replace(",", "")) if found else 0
    return counts


def phases(dsn: str, jobs: int, setup: str | None) -> None:
    """The child's part: the statements whose counts are read, each phase ended by a
    mark on the queue's one connection."""
    import psycopg

    import pgbaton

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA IF EXISTS {SCHEMA} CASCADE")
    queue = pgbaton.Queue(dsn, schema=SCHEMA, pool_size=1)
    queue.migrate()
    if setup:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(Path(setup).read_text().replace("__schema__", SCHEMA))  # type: ignore[arg-type]

    def enqueue(n: int) -> None:
        for start in range(0, n, 1000):
            queue.enqueue_many([{"task": "noop", "args": {"seq": s}}
                                for s in range(start, min(n, start + 1000))])

    def claim(n: int, limit: int = CLAIM, starting: int = STARTING) -> list[pgbaton.Claim]:
        claims: list[pgbaton.Claim] = []
        while len(claims) < n:
            batch = queue.engine.claim_batch("counted", limit=limit, lease=600,
                                             starting=starting).claims
            if not batch:
                break
            claims += batch
        if len(claims) != n:
            sys.exit(f"claimed {len(claims)} jobs of {n}")
        return claims

    def complete(claims: list[pgbaton.Claim], each: int = COMPLETE) -> None:
        for start in range(0, len(claims), each):
            done = queue.engine.complete_many([(c, None) for c in claims[start:start + each]])
            if not all(done):
                sys.exit("a completion was refused")

    def mark() -> None:  # callgrind dumps the counts so far as pg_sleep begins
        with queue.engine._db._connection() as conn:
            conn.execute("SELECT pg_sleep(0)")

    # The warm-up prepares each statement on the connection; the ANALYZE gives the plans
    # the table's size, and the claims after it plan them anew.
    enqueue(1024)
    complete(claim(1024))
    enqueue(jobs + CLAIM)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"ANALYZE {SCHEMA}.jobs")
        complete(claim(CLAIM))
        conn.execute("CHECKPOINT")
    for seq in range(8):  # the single insert prepared too
        queue.enqueue("noop", {"seq": seq})
    mark()
    claims = claim(jobs)
    mark()
    complete(claims)
    mark()
    for seq in range(ONE_BY_ONE):
        queue.enqueue("noop", {"seq": seq})
    mark()
    enqueue(IN_BULK)
    mark()
    claims = claim(SINGLES, limit=1, starting=1)
    mark()
    complete(claims, each=1)
    mark()
    queue.close()


def render(columns: dict[str, dict[str, dict[str, int]]], jobs: int) -> str:
    names = list(columns)
    lines = ["| per job | " + " | ".join(names) + " |",
             "|---|" + "--:|" * len(names)]
    for phase, count in PHASES.items():
        per = count or jobs
        lines.append(f"| **{phase}, all** | " + " | ".join(
            f"**{columns[n][phase]['total'] / per:,.0f}**" for n in names) + " |")
        for name, label in PARTS:
            values = [columns[n][phase][name] for n in names]
            if any(values):
                lines.append(f"| {phase}: {label} (`{name}`) | " + " | ".join(
                    f"{v / per:,.0f}" for v in values) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.phases:
        phases(args.phases, args.jobs, args.setup)
        return
    for tool in ("valgrind", "callgrind_annotate"):
        if shutil.which(tool) is None:
            sys.exit(f"{tool} is not installed (Debian: apt-get install valgrind)")
    user = server_user()
    folder = Path(tempfile.mkdtemp(prefix="pgbaton-instructions-"))
    server = Server(folder, bindir(args.bindir), user)
    columns: dict[str, dict[str, dict[str, int]]] = {}
    try:
        server.start()
        if args.base:
            with base_tree.exported(args.base) as base:
                columns[f"at {base.commit[:10]}"] = count(server, args.jobs, base.env())
        columns["this checkout"] = count(server, args.jobs, dict(os.environ))
        for tried in args.tries:
            columns[f"with {Path(tried).name}"] = count(server, args.jobs, dict(os.environ),
                                                        str(Path(tried).resolve()))
    finally:
        server.stop()
        if args.keep:
            shutil.copytree(folder, args.keep, dirs_exist_ok=True)
        shutil.rmtree(folder, ignore_errors=True)
    print(f"Server instructions a job (callgrind; {args.jobs} jobs claimed 128 a claim, 32 "
          f"starting, and completed 32 a statement; {ONE_BY_ONE} enqueued one a call, "
          f"{IN_BULK:,} 1,000 a call):\n")
    print(render(columns, args.jobs))
    print("\n" + json.dumps(columns))


if __name__ == "__main__":
    main()
