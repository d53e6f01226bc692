"""`pgbaton worker MODULE:APP`: run a worker until SIGTERM or SIGINT, once its database
answers (wait_for_database, within --connect-timeout)."""

from __future__ import annotations

import asyncio
import logging
import os
import sys

import click

from .. import logs
from .._cli_common import (
    NUMBER,
    WHOLE_NUMBER,
    AutoOrWholeNumber,
    NumberRange,
    WholeNumberRange,
    connection_options,
    given_on_command_line,
    resolve_dsn,
)
from .._transient import when_reachable
from ..dsn import normalize_dsn, with_application_name
from ..errors import ConnectionFailed
from ..limits import INT4_MAX
from ..maintenance.services import DEFAULT_RETENTION_MODE, RETENTION_MODES
from ..queue_async import AsyncQueue
from ..worker.loop import EVENT_LOOPS, loop_factory
from .app_spec import _app_schema, load_app

logger = logging.getLogger("pgbaton.cli")


@click.command()
@click.argument("app_spec", metavar="MODULE:APP")
@connection_options
@click.option("--queues", default=None, help="Comma-separated queues to work [all].")
@click.option("--concurrency", type=WHOLE_NUMBER, default=10, show_default=True,
              help="Jobs at once per process.")
@click.option("--processes", type=WHOLE_NUMBER, default=1, show_default=True,
              help="Worker processes.")
@click.option("--claim-ahead", type=AutoOrWholeNumber(), default="auto", show_default=True,
              help="Jobs to claim beyond the free slots, waiting in the worker for one. "
                   "auto: while a backlog waits, about what the worker runs in 50 ms "
                   "(none without a backlog, or for limited or rate-limited queues); "
                   "N: always N; 0: none.")
@click.option("--loop", "event_loop", type=click.Choice(EVENT_LOOPS), default="auto",
              show_default=True, envvar="PGBATON_EVENT_LOOP",
              help="The event loop of each worker process: auto is uvloop where it is "
                   "installed (with pgbaton on Linux and macOS), else asyncio's own "
                   "[or PGBATON_EVENT_LOOP].")
@click.option("--lease", type=NUMBER, default=30.0, show_default=True, help="Lease in seconds.")
@click.option("--poll-interval", type=NUMBER, default=2.0, show_default=True,
              help="Seconds between polls.")
@click.option("--shutdown-grace", type=NUMBER, default=30.0, show_default=True,
              help="Seconds running jobs get to finish on SIGTERM.")
@click.option("--no-maintenance", is_flag=True, help="Never act as the maintenance leader.")
@click.option("--listen-dsn", default=None, envvar="PGBATON_LISTEN_DSN",
              help="A direct connection to PostgreSQL for LISTEN and the leader's lock, "
                   "when --dsn goes through PgBouncer in transaction mode "
                   "[or PGBATON_LISTEN_DSN].")
@click.option("--connect-timeout", type=NumberRange(min=0), default=60.0,
              show_default=True,
              help="Seconds to keep retrying, with backoff, while the database cannot be "
                   "reached at start-up, by each worker process, restarted ones too "
                   "(0: give up at once).")
@click.option("--log-level", type=click.Choice(logs.LEVELS, case_sensitive=False),
              default="INFO", show_default=True, envvar="PGBATON_LOG_LEVEL",
              help="Least severe log records shown [or PGBATON_LOG_LEVEL].")
@click.option("--metrics-port", type=WholeNumberRange(1, 65535), default=None,
              help="Serve this worker's Prometheus metrics on 127.0.0.1:PORT (with "
                   "--processes, process N on PORT+N; needs pgbaton[web]).")
@click.option("--stats-file", type=click.Path(dir_okay=False), default=None,
              help="Write the worker's final statistics there as JSON when it stops "
                   "(with --processes, one file per process: FILE.0, FILE.1, ...).")
@click.option("--log-format", type=click.Choice(logs.FORMATS), default="text",
              show_default=True, envvar="PGBATON_LOG_FORMAT",
              help="text for people, json (one object a line) for log collectors "
                   "[or PGBATON_LOG_FORMAT].")
@click.option("--retention-mode", type=click.Choice(RETENTION_MODES),
              default=DEFAULT_RETENTION_MODE, show_default=True,
              help="How the leader's pruner takes finished jobs out of the jobs table: "
                   "delete them, or move done ones to jobs_history first "
                   "(docs/explanation/retention.md).")
@click.option("--vacuum-dead-tuples", type=WholeNumberRange(0, INT4_MAX), default=50_000,
              show_default=True,
              help="The leader VACUUMs the jobs table once it counts this many dead row "
                   "versions (and 5% of the live ones), so that claims do not read over "
                   "them (docs/explanation/scaling.md).")
@click.option("--no-vacuum", is_flag=True,
              help="Leave the jobs table to autovacuum: the leader never VACUUMs it.")
@click.option("--no-job-logs", is_flag=True,
              help="Keep nothing handlers log with their jobs (`pgbaton show ID --logs`); "
                   "the worker's own log is the same either way.")
@click.option("--job-log-level", type=click.Choice(logs.LEVELS, case_sensitive=False),
              default="INFO", show_default=True,
              help="Least severe records kept with each job's attempt.")
def worker(
    app_spec: str, dsn: str | None, schema: str, embedded: bool,
    queues: str | None, concurrency: int, processes: int, claim_ahead: int | str,
    event_loop: str,
    lease: float, poll_interval: float, shutdown_grace: float, no_maintenance: bool,
    listen_dsn: str | None, connect_timeout: float, log_level: str, log_format: str,
    stats_file: str | None, metrics_port: int | None, retention_mode: str,
    vacuum_dead_tuples: int, no_vacuum: bool, no_job_logs: bool, job_log_level: str,
) -> None:
    """Run a worker for the tasks of MODULE:APP until SIGTERM or SIGINT.

    The database is --dsn, else the one the App routes every one of --queues to, else
    the App's own, else PGBATON_DSN, else DATABASE_URL; with none of them the worker
    refuses to start (--embedded runs pgbaton's own server). Without --queues it works
    every queue of that database; queues routed to two databases are refused. The
    schema is --schema, else the App's, else PGBATON_SCHEMA, else pgbaton.
    """
    from ..worker import WorkerConfig, run_worker
    from ..worker.config import default_worker_id
    from ..worker.sessions import plan_sessions

    logs.configure(log_level, log_format)
    loop_factory(event_loop)  # --loop uvloop without uvloop: refused before any wait
    # Worker processes started by --processes inherit the logging settings this way.
    os.environ["PGBATON_LOG_LEVEL"], os.environ["PGBATON_LOG_FORMAT"] = log_level, log_format
    app = load_app(app_spec)
    queue_names = [q for q in queues.split(",") if q] if queues else None
    route = app.database_of(queue_names)  # one database per worker: refuses a mix
    worker_id = default_worker_id() if processes == 1 else None
    name = f"pgbaton worker {worker_id or 'supervisor'}"
    if route is not None and not (given_on_command_line("dsn") or embedded):
        # The queues' database; each worker finds the route itself (config.dsn None).
        dsn, config_dsn = with_application_name(route, name), None
    else:
        dsn = config_dsn = resolve_dsn(dsn, fallback=app.dsn_in_code, embedded=embedded,
                                       application_name=name)
    # A routed worker leaves the App its own database, where its handlers enqueue.
    app.configure(dsn=dsn if route is None else None, schema=_app_schema(app, schema))
    wait_for_database(dsn, app.schema, connect_timeout)
    config = WorkerConfig(
        queues=queue_names,
        concurrency=concurrency, processes=processes, claim_ahead=claim_ahead,
        event_loop=event_loop, lease=lease,
        poll_interval=poll_interval, shutdown_grace=shutdown_grace,
        maintenance=not no_maintenance, dsn=config_dsn, worker_id=worker_id,
        stats_path=stats_file,
        metrics_port=metrics_port,
        listen_dsn=normalize_dsn(listen_dsn, "--listen-dsn") if listen_dsn else None,
        connect_timeout=connect_timeout,
        retention_mode=retention_mode,
        vacuum_dead_tuples=None if no_vacuum else vacuum_dead_tuples,
        job_logs=not no_job_logs, job_log_level=job_log_level,
    )
    if processes > 1:  # a refusal is one line here, not one per worker process
        plan_sessions(config, dsn)
    sys.exit(run_worker(app, config, app_spec=app_spec))


def wait_for_database(dsn: str, schema: str, timeout: float) -> None:
    """Return once the server answers and the schema is current; while the server cannot
    be reached (or goes away during these first statements), retry with jittered backoff
    for up to `timeout` seconds (a deploy that starts workers beside a database still
    starting up). Other errors are not retried."""

    async def attempt() -> None:
        async with AsyncQueue(dsn, schema=schema) as queue:
            await queue.open()

    def gave_up(error: Exception) -> Exception:
        return ConnectionFailed(f"{error} (gave up after --connect-timeout {timeout:g} s)")

    asyncio.run(when_reachable(attempt, timeout, logger, gave_up=gave_up))
