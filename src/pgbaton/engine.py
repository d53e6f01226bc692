# WARNING: generated from engine_async.py by tools/async_to_sync.py: DO NOT EDIT.
# Change engine_async.py and run `make generate`.
"""The engine of pgbaton: the worker's and the leader's statements (generated sync twin).

A worker claims, heartbeats, starts, and writes outcomes, progress and logs in batches
(the *_many calls, each row fenced by its claim's token); its handlers' durable steps are
stored here; the maintenance leader reaps, prunes, moves history, vacuums and ages
priorities. The queue is the face users call (queue_async.py); `queue.engine` is this,
over the queue's own pool (_database_async.py), and the queue's names for these calls
delegate here. engine.py is the generated sync twin.

Only I/O is here: each statement's parameters are built, and its rows read, by
_engine_base.py, which both twins import.
"""

from __future__ import annotations

import datetime as dt
import math
import time
import uuid
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import psycopg
from psycopg import sql

from . import history
from ._checks import (
    as_claim_list,
    check_int4,
    check_limit,
    check_partition_width,
    check_seconds,
    held_params,
)
from ._database import Database
from ._engine_base import (
    Row,
    changed,
    check_dead_share,
    claim_params,
    complete_params,
    end_params,
    fail_params,
    lease_params,
    logs_params,
    progress_params,
    read_claim_batch,
    release_params,
    renew_leases,
    snooze_params,
    statuses,
)
from .claim_marks import ClaimMarks
from .errors import ConfigurationError
from .flow import ClaimBatch
from .integrations.connections import CallerConnection
from .models import Claim
from .outcomes import Snooze

# How often a queue re-reads whether any queue is paused or limited (one tiny
# statement): a setting made elsewhere reaches this queue's claims within this time,
# and until then its jobs are only held back (docs/explanation/flow_control.md).
FLOW_RECHECK_SECONDS = 1.0

# How long drop_history waits for a lock on jobs_history (a reader's, a mover's) before
# it leaves a partition for its next call: a DROP queued behind a long reader would hold
# up every reader queued behind it.
HISTORY_LOCK_WAIT_SECONDS = 0.5

# vacuum(grown=): a table of fewer live rows than this is read whole cheaply whatever
# plan its statements got; past it, a plan made when the table was nearly empty costs.
GROWN_MIN_ROWS = 1_000


class Engine:
    """The worker's and the leader's statements, over one database handle's pool (the
    queue's: `queue.engine`). It holds what a claimer keeps between claims: whether any
    queue is paused or limited, which queues are, and the claim's marks."""

    def __init__(self, database: Database) -> None:
        self._db = database
        self._flow_controlled = False
        self._flow_read_at = -math.inf
        self._claim_marks = ClaimMarks()
        # The flow claim's, apart: it reads each queue's range of jobs_queue_claimable,
        # so its marks are per queue even when it names none, where the plain claim's
        # one mark is a place in jobs_claimable across queues; and its statement's time
        # (a function that locks and counts too) is not the plain claim's to compare.
        self._flow_claim_marks = ClaimMarks(by_queue=True)
        # The queues with a concurrency or rate limit, as last read: their completions
        # wake the fleet's workers, who may be waiting for the room they free.
        self.limited_queues: frozenset[str] = frozenset()
        self.rated_queues: frozenset[str] = frozenset()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} over {self._db!r}>"

    # -- claiming -------------------------------------------------------------------

    def claim_batch(
        self,
        worker_id: str,
        *,
        limit: int = 1,
        lease: float = 30.0,
        queues: Iterable[str] | None = None,
        tasks: Iterable[str] | None = None,
        finished: Iterable[uuid.UUID] | None = None,
        starting: int | None = None,
    ) -> ClaimBatch:
        """Claim up to `limit` claimable jobs in one statement, committed at once (the
        queue's claim() is this batch's claims); when a rate-limited queue is full, in
        how many seconds its next start is due. `finished`: the claim tokens of this
        worker's jobs whose handlers have ended and whose outcomes are not written yet;
        they no longer count against their queues' concurrency limits (a worker's own
        bookkeeping: a token of a job still running would let the limit be passed).
        `starting`: how many of the claimed jobs start at once, the first in claim order
        (None: all); the others are claimed ahead, `Claim.started` False, and
        start_many() starts them."""
        params = claim_params(worker_id, limit, lease, queues, tasks, finished=finished,
                              starting=starting)
        if self._flow_is_on():
            statement, marks = "job_claim_flow", self._flow_claim_marks
        elif params["queues"] is None:
            statement, marks = "job_claim_many", self._claim_marks
        else:
            statement, marks = "job_claim_queues", self._claim_marks
        for _ in range(3):
            params["after"] = marks.after(params["queues"], params["tasks"])
            took: list[float] = []  # the statement's own time, not the pool's wait
            try:
                columns, rows = self._db._fetch_tuples(statement, params, took)
            except psycopg.errors.UniqueViolation:
                # jobs_one_running_per_key caught two claims racing for one key whose
                # jobs committed out of id order; the other claim won, try again.
                continue
            batch = read_claim_batch(columns, rows)
            marks.claimed(params["queues"], params["tasks"], after=params["after"],
                          claims=batch.claims, seconds=took[0])
            return batch
        return ClaimBatch([])

    def _flow_is_on(self) -> bool:
        """Whether any queue is paused or limited, re-read at most every
        FLOW_RECHECK_SECONDS. While it is off the plain claim runs, unchanged but for
        leaving such queues alone, so a setting made meanwhile is never overstepped."""
        now = time.monotonic()
        if now - self._flow_read_at >= FLOW_RECHECK_SECONDS:
            (row,) = self._hot_rows("queue_flow_state", {})
            self._flow_controlled = row["controlled"] > 0
            self.limited_queues = frozenset(row["limited"])
            self.rated_queues = frozenset(row["rated"])
            self._flow_read_at = now
        return self._flow_controlled

    def _hot_rows(self, name: str, params: Mapping[str, Any]) -> list[Row]:
        """A statement the worker's claims, starts or outcomes wait on, read as the hot
        path's are (and so bounded in a worker: bound_hot_path), its rows as dicts."""
        names, rows = self._db._fetch_tuples(name, params)
        return [dict(zip(names, row, strict=True)) for row in rows]

    def flow_changed(self) -> None:
        """A queue's pause or limits were just set through this handle: the next claim
        reads the flow state again instead of waiting up to FLOW_RECHECK_SECONDS."""
        self._flow_read_at = -math.inf

    def serves_a_rate(self, queues: Iterable[str] | None) -> bool:
        """Whether a claim of these queues (None: every queue) may take jobs of a
        rate-limited queue. The flow claim logs a start for each job it claims, so such
        jobs must start at once: claimed ahead, they would start later, in a burst that
        passes the rate (docs/explanation/flow_control.md)."""
        self._flow_is_on()
        if queues is None:
            return bool(self.rated_queues)
        return not self.rated_queues.isdisjoint(queues)

    def notify_freed(
        self, claims: Sequence[Claim], *, taken: Sequence[Claim] = ()
    ) -> None:
        """Tell the fleet that these claims' jobs have finished, for those of limited
        queues: room for one more in each, perhaps on another worker that sleeps until
        it hears so (the worker calls this after writing outcomes). `taken`: claims this
        worker made with that room (claim_batch's `finished`); a queue whose room they
        all took wakes nobody."""
        if not self.limited_queues:
            return
        room = Counter(c.queue for c in claims if c.queue in self.limited_queues)
        room.subtract(c.queue for c in taken)
        freed = sorted(queue for queue, count in room.items() if count > 0)
        if freed:
            self._hot_rows("queue_notify_freed",
                           {"channel": self._db.channel, "queues": freed})

    # -- holding --------------------------------------------------------------------

    def heartbeat(
        self, claim_or_claims: Claim | Iterable[Claim], *, lease: float = 30.0
    ) -> list[bool]:
        """Extend the leases of claims still held, in one statement. Returns, for each
        claim in order, whether it is still held; held claims get their new lease_until."""
        claims = as_claim_list(claim_or_claims)
        if not claims:
            return []
        params = lease_params(claims, lease)
        rows = self._db._fetch("job_heartbeat_many", params)
        renew_leases(claims, rows, ran=params["ran"])
        return changed(rows, len(claims))

    def claims_lost(self, claims: Iterable[Claim]) -> list[tuple[str | None, str | None]]:
        """For claims no longer held, in order: the job's status now (None when it is
        gone) and the worker that holds it, if another one does; what a worker says of
        a lost claim."""
        claims = list(claims)
        if not claims:
            return []
        rows = self._db._fetch("job_claims_lost", held_params(claims))
        return [(row["status"], None if row["same_token"] else row["worker_id"])
                for row in rows]

    def start_many(self, claims: Iterable[Claim]) -> list[bool]:
        """Record the start of jobs claimed ahead (claim_batch's `starting`), in one
        statement. Returns, for each claim in order, whether it is still held: a job
        cancelled or taken by another worker since its claim must not start (release
        it). Their leases are left as they are: the heartbeat renews them, and a start
        that writes no indexed column is a HOT update."""
        claims = list(claims)
        if not claims:
            return []
        rows = self._hot_rows("job_start_many", held_params(claims))
        renew_leases(claims, rows, started=True)
        return changed(rows, len(claims))

    def write_progress(
        self, reports: Iterable[tuple[Claim, float | None, str | None]]
    ) -> list[bool]:
        """Write the progress of running jobs (ctx.progress: a fraction in 0..1 or
        None, a note), in one statement, each row fenced by its claim's token. Returns,
        for each in order, whether its job was still held and written."""
        reports = list(reports)
        if not reports:
            return []
        return self._db._changed_positions(
            "job_progress_many", progress_params(reports), len(reports))

    def write_logs(
        self,
        runs: Iterable[tuple[Claim, list[dict[str, Any]], int]],
        *,
        ended: Sequence[str | None] | None = None,
    ) -> list[bool]:
        """Keep what runs logged (job_logs.AttemptLog.take: the lines and how many were
        dropped), one row each, in one statement, each fenced by its claim's token while
        its job runs, and numbered after the job's earlier runs. `ended` says how each
        run ended, in order (job_logs.ENDINGS; None: not said). Returns, for each in
        order, whether it was written (False: the claim was lost, or this run's lines
        were written before)."""
        runs = list(runs)
        if not runs:
            return []
        return self._db._changed_positions(
            "job_logs_insert_many", logs_params(runs, ended), len(runs))

    # -- outcomes -------------------------------------------------------------------

    def complete_many(self, outcomes: Iterable[tuple[Claim, Any]]) -> list[bool]:
        """Mark jobs done in one statement, each row fenced by its own token. For each
        in order, False: that claim was lost and nothing was changed."""
        outcomes = list(outcomes)
        if not outcomes:
            return []
        return self._db._changed_positions(
            "job_complete_many", complete_params(outcomes), len(outcomes))

    def fail_many(
        self, failures: Iterable[tuple[Claim, BaseException | str, float | None]]
    ) -> list[bool]:
        """Record failed attempts in one statement, each row fenced by its own token:
        each retried after its delay (None: its backoff), or `failed` after its last
        attempt."""
        failures = list(failures)
        if not failures:
            return []
        return self._db._changed_positions(
            "job_fail_many", fail_params(failures), len(failures))

    def hold_keys(self, claims: Iterable[Claim], *, lease: float) -> list[bool]:
        """Extend the leases of jobs cancelled under these claims while their handlers'
        threads still run, so their keys stay held (job_hold_key_many). Returns, for each
        claim, whether its job was still so held."""
        claims = list(claims)
        if not claims:
            return []
        return self._db._changed_positions(
            "job_hold_key_many", lease_params(claims, lease), len(claims))

    def release_many(self, claims: Iterable[Claim]) -> list[bool]:
        """Hand jobs back to pending without spending an attempt, in one statement, each
        row fenced by its own token. A job cancelled under its claim is let go."""
        claims = list(claims)
        if not claims:
            return []
        return self._db._changed_positions(
            "job_release_many", release_params(claims), len(claims))

    def snooze_many(
        self, snoozes: Iterable[tuple[Claim, Snooze, int | None]]
    ) -> list[str | None]:
        """Hand jobs back to pending until each Snooze's time without spending an
        attempt, in one statement, each row fenced by its own token; one past its
        max_snoozes ends `failed`. Returns each job's status after, None when its claim
        was lost and nothing was changed."""
        snoozes = list(snoozes)
        if not snoozes:
            return []
        _, rows = self._db._fetch_tuples("job_release_many", snooze_params(snoozes))
        return statuses(rows, len(snoozes))

    def end_many(
        self, ends: Iterable[tuple[Claim, str, BaseException | str]]
    ) -> list[str | None]:
        """End running jobs at once, whatever attempts they have left: each as `failed`
        or `cancelled`, its error (or reason) appended to its errors, in one statement,
        each row fenced by its own token. Returns each job's status after, None when its
        claim was lost and nothing was changed."""
        ends = list(ends)
        if not ends:
            return []
        _, rows = self._db._fetch_tuples("job_end_many", end_params(ends))
        return statuses(rows, len(ends))

    # -- durable steps (docs/howto/durable-steps.md) ----------------------------------

    def step_store(
        self, claim: Claim, seq: int, name: str, result_json: str, seconds: float
    ) -> bool:
        """Store a step's result (JSON text), fenced by the claim. False: claim lost."""
        params = {"id": claim.id, "token": claim.token, "seq": seq, "name": name,
                  "result": result_json, "seconds": seconds,
                  "size": len(result_json.encode())}
        return bool(self._db._fetch("job_step_store", params))

    def step_suspend(
        self, claim: Claim, seq: int, name: str, kind: str, *, until: dt.datetime | None,
        seconds: float, deadline: bool, event: str | None,
    ) -> dt.datetime | None:
        """Suspend a running job until its wake time (a sleep, or a wait for `event`):
        pending again, its attempt given back, its claim released. Returns when it is
        due (now, when the event it waits for was sent already); None: claim lost."""
        params = {"id": claim.id, "token": claim.token, "seq": seq, "name": name,
                  "kind": kind, "until": until, "seconds": seconds, "deadline": deadline,
                  "event": event}
        with self._db._transaction(None) as conn:
            rows = self._db._fetch("job_step_suspend", params, conn)
            if not rows:
                return None
            run_at: dt.datetime = rows[0]["run_at"]
            if event is not None and self._db._fetch(
                "job_event_wake", {"id": claim.id, "event": event,
                                   "channel": self._db.channel}, conn
            ):
                return dt.datetime.now(dt.UTC)
            return run_at

    def step_event_take(self, claim: Claim, seq: int, event: str) -> tuple[bool, Any]:
        """Take the oldest event `event` sent to the job as its wait's result, fenced by
        the claim: (True, the stored result) or (False, None) when none was sent."""
        rows = self._db._fetch("job_event_take", {
            "id": claim.id, "token": claim.token, "seq": seq, "name": event,
            "event": event})
        return (True, rows[0]["result"]) if rows else (False, None)

    def step_pass(self, claim: Claim, seq: int, result_json: str | None) -> bool:
        """Finish a sleep or a wait whose time has come; False: not yet (or lost)."""
        rows = self._db._fetch("job_step_pass", {
            "id": claim.id, "token": claim.token, "seq": seq, "result": result_json})
        return bool(rows)

    # -- the worker's sessions --------------------------------------------------------

    def ping(self, conn: CallerConnection | None = None) -> None:
        """One round trip on conn (or a pooled connection); raises if it fails."""
        self._db._fetch("server_ping", None, conn)

    def listen(self, conn: psycopg.Connection[Any]) -> None:
        """LISTEN on conn (autocommit, kept open) for this schema's new jobs."""
        self._db._fetch("channel_listen", None, conn)

    def listen_cancelled(self, conn: psycopg.Connection[Any]) -> None:
        """LISTEN on conn as well for running jobs cancelled (payload: the job's id)."""
        self._db._fetch("channel_listen_cancelled", None, conn)

    def listen_echo(self, conn: psycopg.Connection[Any], channel: str) -> None:
        """LISTEN on conn as well on a worker's own echo channel (worker/echo.py)."""
        statement = sql.SQL(self._db._sql["channel_listen_echo_ddl"]).format(
            channel=sql.Identifier(channel))
        conn.execute(statement, prepare=False)

    def echo(self, channel: str, payload: str) -> None:
        """NOTIFY `channel` with a worker's echo (worker/echo.py)."""
        self._db._fetch("channel_echo", {"channel": channel, "payload": payload})

    def worker_beat(self, presence: Mapping[str, Any]) -> None:
        """Write a worker's row of the workers table (worker_beat: worker_id, host,
        pid, version, queues, concurrency, held); docs/howto/dashboard-metrics-traces.md,
        "Workers"."""
        self._db._fetch("worker_beat", presence)

    def worker_leave(self, presence: Mapping[str, Any]) -> None:
        """Delete a stopping worker's own row of the workers table."""
        self._db._fetch("worker_leave", presence)

    # -- the leader's chores ----------------------------------------------------------

    def leader_try_acquire(self, conn: psycopg.Connection[Any]) -> bool:
        """Try to become the maintenance leader on `conn`, a connection kept open for as
        long as the leadership should last (the lock dies with the session)."""
        rows = self._db._fetch("leader_try_acquire", {"schema": self._db.schema}, conn)
        return bool(rows[0]["acquired"])

    def reap(self) -> int:
        """Expired leases go back to pending, or to failed with no attempts left."""
        return len(self._db._fetch("job_reap"))

    def prune(self, *, retention: float, limit: int = 10_000) -> int:
        """Delete done, failed and cancelled jobs that finished more than `retention`
        seconds ago, at most `limit` of them; returns how many went."""
        params = {"retention": check_seconds("retention", retention), "limit": check_limit(limit)}
        return len(self._db._fetch("job_prune", params))

    # The history retention mode (docs/explanation/retention.md): done jobs move to
    # jobs_history, partitioned by the time they finished, and leave it a partition at a
    # time.

    def archive(self, *, after: float, partition: float, limit: int = 10_000) -> int:
        """Move done jobs without an explicit idempotency key that finished more than
        `after` seconds ago from jobs to jobs_history, at most `limit` of them, oldest
        first; creates the partitions (`partition` seconds wide, from midnight UTC) they
        need. Returns how many moved. Jobs locked by someone else are skipped, never
        waited for; two callers at once never move a job twice."""
        params = {
            "after": check_seconds("after", after),
            "width": check_partition_width("partition", partition),
            "limit": check_limit(limit),
        }
        fetch = self._db._fetch
        with self._db._transaction(None) as conn:
            fetch("history_lock_share", None, conn)
            (ready,) = fetch("history_prepare", params, conn)
            bins = ready["bins"]
            if not bins:
                return 0
            width = dt.timedelta(seconds=params["width"])
            overlap = {"bins": bins, "width": params["width"]}
            covering = fetch("history_partitions_overlapping", overlap, conn)
            if history.gaps(bins, width, [(p["from_at"], p["to_at"]) for p in covering]):
                fetch("history_lock_create", None, conn)
                # A fresh look, under the lock: another mover may have created them.
                covering = fetch("history_partitions_overlapping", overlap, conn)
                covered = [(p["from_at"], p["to_at"]) for p in covering]
                for from_at, to_at in history.gaps(bins, width, covered):
                    name = history.partition_name(from_at, to_at)
                    for ddl in ("history_partition_create_ddl", "history_partition_attach_ddl"):
                        statement = history.partition_ddl(self._db._sql[ddl], name,
                                                          from_at, to_at)
                        conn.execute(statement, prepare=False)
            (row,) = fetch("job_archive", {**params, "bins": bins}, conn)
            return int(row["moved"])

    def drop_history(
        self, *, retention: float, lock_wait: float = HISTORY_LOCK_WAIT_SECONDS
    ) -> int:
        """Drop the partitions of jobs_history whose whole range ended more than
        `retention` seconds ago; returns how many went. A partition whose lock is not
        granted within `lock_wait` seconds (a reader holds the table) is left for the
        next call, as are the later ones."""
        params = {
            "retention": check_seconds("retention", retention),
            "lock_wait": check_seconds("history_lock_wait", lock_wait, positive=True),
        }
        fetch = self._db._fetch
        # A first look without the lock, which holds up every mover while it is waited
        # for: most runs find nothing to drop.
        if not fetch("history_partitions_expired", params):
            return 0
        dropped = 0
        try:
            with self._db._transaction(None) as conn:
                fetch("history_lock_wait_set", params, conn)
                fetch("history_lock_take", None, conn)
                for row in fetch("history_partitions_expired", params, conn):
                    statement = history.partition_ddl(
                        self._db._sql["history_partition_drop_ddl"], row["name"]
                    )
                    logs = history.partition_ddl(
                        self._db._sql["history_partition_logs_delete_ddl"], row["name"]
                    )
                    try:
                        with conn.transaction():
                            conn.execute(logs, prepare=False)
                            conn.execute(statement, prepare=False)
                    except psycopg.errors.LockNotAvailable:
                        break  # this one and the later ones wait for the next call
                    dropped += 1
        except psycopg.errors.LockNotAvailable:
            return 0  # a mover held the history lock past lock_wait
        return dropped

    def vacuum(
        self, *, min_dead: int = 0, min_dead_share: float = 0.0, grown: float | None = None
    ) -> int:
        """VACUUM the jobs table once the statistics count at least `min_dead` dead row
        versions in it, and at least `min_dead_share` times its live ones
        (docs/explanation/scaling.md, "The claim's dead head"); with `grown`, also once
        it holds GROWN_MIN_ROWS live rows or more and `grown` times the rows the
        planner's statistics last counted (never counted: any). Returns the dead count
        when the VACUUM ran; 0 when it did not, or when another VACUUM or DDL held the
        table (skipped, never waited for). Raises ConfigurationError when this role may
        not vacuum the table, before trying."""
        min_dead = check_int4("min_dead", min_dead, minimum=0)
        min_dead_share = check_dead_share(min_dead_share)
        schema = self._db.schema
        (state,) = self._db._fetch("jobs_vacuum_state", {"schema": schema})
        if not state["allowed"]:
            raise ConfigurationError(
                f"role {state['role']!r} may not VACUUM {schema}.jobs: "
                f"it needs to own the table or the database, or, from PostgreSQL 17, "
                f"GRANT MAINTAIN ON {schema}.jobs"
            )
        dead, live = int(state["dead"]), int(state["live"])
        # A table that grew far past what its planner statistics say: the cached plans
        # of the worker's statements were made for a small table (a claim that finds
        # its candidates by reading the whole table, say) and are kept until the
        # statistics change, which a VACUUM does (docs/explanation/performance.md,
        # "Planned once").
        outgrown = grown is not None and live >= GROWN_MIN_ROWS and (
            live > grown * max(float(state["planned"]), 0.0))
        if not outgrown and (
            dead == 0 or dead < min_dead or dead < min_dead_share * live
        ):
            return 0
        skipped: list[str] = []

        def note(notice: psycopg.errors.Diagnostic) -> None:
            if notice.sqlstate == "55P03":  # lock_not_available: SKIP_LOCKED skipped it
                skipped.append(notice.message_primary or "")

        with self._db._connection() as pooled:
            pooled.add_notice_handler(note)
            try:
                # Not prepared: a utility statement, run every few seconds at most.
                pooled.execute(self._db._sql["jobs_vacuum"], prepare=False)
            finally:
                pooled.remove_notice_handler(note)
        return 0 if skipped else dead

    def age_priorities(self, *, limit: int = 10_000) -> int:
        """One aging pass (the leader runs it): how many jobs gained priority."""
        rows = self._db._fetch("job_age_priority", {"limit": check_limit(limit)})
        return int(rows[0]["aged"])
