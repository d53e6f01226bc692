"""An operator's actions on jobs by hand: `pgbaton retry ID` and `pgbaton cancel ID`
(their bulk forms, over a filter, are bulk.py's, added where main.py registers them),
and `pgbaton prune` (the leader's retention, run once)."""

from __future__ import annotations

import click

from .._cli_common import NUMBER, WHOLE_NUMBER, NumberRange, _queue, connection_options
from ..actions import refused
from ..errors import PgbatonError
from ..maintenance.services import DEFAULT_RETENTION_MODE, RETENTION_MODES


@click.command()
@click.argument("job_id", type=WHOLE_NUMBER)
@connection_options
def retry(job_id: int, dsn: str | None, schema: str, embedded: bool) -> None:
    """Send a failed or cancelled job back to pending with fresh attempts."""
    with _queue(dsn, schema, embedded) as queue:
        if not queue.retry(job_id):
            raise PgbatonError(refused("retry", job_id, queue.get(job_id), queue.schema))
    click.echo(f"job {job_id} is pending again")


@click.command()
@click.argument("job_id", type=WHOLE_NUMBER)
@connection_options
def cancel(job_id: int, dsn: str | None, schema: str, embedded: bool) -> None:
    """Cancel a pending or running job (its worker loses the claim)."""
    with _queue(dsn, schema, embedded) as queue:
        was = queue.get(job_id)
        if not queue.cancel(job_id):
            raise PgbatonError(refused("cancel", job_id, queue.get(job_id), queue.schema))
    if was is not None and was.status == "running":
        # The row says cancelled now, but the handler runs on until its worker hears.
        click.echo(f"job {job_id} cancelled; its handler on {was.worker_id or 'its worker'} "
                   "is told to stop at once (at that worker's next heartbeat, a third of its "
                   "lease, if it does not listen) and its result will not be written")
        return
    click.echo(f"job {job_id} cancelled")


@click.command()
@click.option("--older-than", type=NUMBER, default=7 * 24 * 3600.0, show_default=True,
              help="Seconds since the job finished: the retention.")
@click.option("--retention-mode", type=click.Choice(RETENTION_MODES),
              default=DEFAULT_RETENTION_MODE, show_default=True,
              help="delete: delete every finished job past --older-than. history: first "
                   "move done jobs without an idempotency key finished --history-after "
                   "seconds ago to jobs_history and drop its partitions past "
                   "--older-than, then delete the rest past --older-than "
                   "(docs/explanation/retention.md).")
@click.option("--history-after", type=NumberRange(min=0), default=3600.0,
              show_default=True, help="With --retention-mode history: seconds since a "
                                      "done job finished before it moves.")
@click.option("--history-partition", type=NUMBER, default=86400.0, show_default=True,
              help="With --retention-mode history: the width in seconds (whole minutes) "
                   "of the partitions it creates.")
@connection_options
def prune(
    older_than: float, retention_mode: str, history_after: float, history_partition: float,
    dsn: str | None, schema: str, embedded: bool,
) -> None:
    """Take out finished jobs: in history mode (the default) move done jobs to
    jobs_history and drop its partitions past the retention; in both modes delete the
    finished jobs past the retention that are left in the jobs table.

    Safe beside a running fleet: its leader does the same every minute, and neither
    waits for nor undoes the other."""
    moved = dropped = total = 0
    with _queue(dsn, schema, embedded) as queue:
        if retention_mode == "history":
            while archived := queue.archive(after=history_after, partition=history_partition):
                moved += archived
            dropped = queue.drop_history(retention=older_than)
            click.echo(f"moved {moved} jobs to jobs_history; dropped {dropped} partitions")
        while pruned := queue.prune(retention=older_than):
            total += pruned
    click.echo(f"pruned {total} jobs")
