"""A hypothesis state machine: simulated workers drive every job transition against a real
database, and the whole jobs table is compared with a Python model after every step.

The workers take turns (the hammers in the processes/ folders prove the races); what
this test explores is the order of operations: stale claims used after a reap, a cancel
or a re-claim, keys blocked by a job waiting for its retry, batches that mix live and
lost claims. Leases expire by moving lease_until into the past in SQL, so no step sleeps.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any, ClassVar

import psycopg
from hypothesis import HealthCheck, note, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)
from psycopg.rows import DictRow

import pgbaton

WORKERS = ("A", "B", "C")
KEYS = ("k1", "k2")
IDEMPOTENCY_KEYS = ("i1", "i2", "i3")
# Far longer than an example runs, so a lease ends only when a step expires it.
LEASE = 300.0
# A retry this far off is never due during the run: the job is pending but not claimable.
RETRY_LATER = 3600.0

keys = st.one_of(st.none(), st.sampled_from(KEYS))
idempotency_keys = st.one_of(st.none(), st.none(), st.sampled_from(IDEMPOTENCY_KEYS))
job_specs = st.fixed_dictionaries(
    {"key": keys, "max_attempts": st.integers(1, 3), "idempotency_key": idempotency_keys}
)


@dataclass
class ModelJob:
    """What the table must hold for one job."""

    id: int
    key: str | None
    max_attempts: int
    idempotency_key: str | None
    # Logical run_at: statements that set run_at to now() draw increasing ticks, and one
    # statement's rows share a tick (ties are broken by id, as in the claim's ORDER BY).
    tick: int
    due: bool = True
    status: str = "pending"
    attempts: int = 0
    token: uuid.UUID | None = None
    worker_id: str | None = None
    expired: bool = False
    started: bool = False
    errors: list[tuple[str, int, str | None]] = field(default_factory=list)
    result: dict[str, Any] | None = None
    snoozes: int = 0


class QueueMachine(RuleBasedStateMachine):
    """Workers A, B, C and an operator against one migrated schema, emptied per example."""

    # Set by the test function from its fixtures: a migrated schema and a connection
    # whose search_path points at it.
    queue: ClassVar[pgbaton.Queue]
    db: ClassVar[psycopg.Connection[DictRow]]

    def __init__(self) -> None:
        super().__init__()
        # Emptying the table instead of migrating a schema per example keeps an example,
        # and above all the hundreds that shrinking a failure runs, cheap (DELETE, not
        # TRUNCATE, which costs 20 times more). Every example gets the ids a fresh schema
        # would, so a printed failing sequence replays as printed.
        self.db.execute("DELETE FROM jobs")
        self.db.execute("SELECT setval(pg_get_serial_sequence('jobs', 'id'), 1, false)")
        self.jobs: dict[int, ModelJob] = {}
        self.by_idempotency_key: dict[str, int] = {}
        # Every claim each worker was ever handed, lost ones included: a stalled worker
        # still believes it holds them, and the fence must turn all of its calls away.
        self.claims: dict[str, list[pgbaton.Claim]] = {w: [] for w in WORKERS}
        self.tokens: set[uuid.UUID] = set()
        self.clock = 0

    # -- model helpers ----------------------------------------------------------------

    def tick(self) -> int:
        self.clock += 1
        return self.clock

    def held(self, claim: pgbaton.Claim) -> bool:
        job = self.jobs[claim.id]
        return job.status == "running" and job.token == claim.token

    def claimable(self, job: ModelJob) -> bool:
        if job.status != "pending" or not job.due:
            return False
        if job.key is None:
            return True
        return not any(
            other.key == job.key
            and (
                other.status == "running"
                or self.held_after_cancel(other)
                or (other.status == "pending" and other.id < job.id)
            )
            for other in self.jobs.values()
        )

    @staticmethod
    def held_after_cancel(job: ModelJob) -> bool:
        """A job cancelled while it ran (and perhaps retried since), whose old holder has
        neither let go nor run out of lease: its handler may still be running, so its key
        stays taken."""
        return (
            job.status in ("cancelled", "pending") and job.token is not None and not job.expired
        )

    def end_attempt(self, job: ModelJob, kind: str) -> None:
        """A failed or reaped attempt: its error is kept, then retry or give up."""
        job.errors.append((kind, job.attempts, job.worker_id))
        job.status = "failed" if job.attempts >= job.max_attempts else "pending"
        job.token = None
        job.worker_id = None

    def has_claims(self) -> bool:
        return any(self.claims.values())

    def pick_claims(self, data: st.DataObject) -> list[pgbaton.Claim]:
        """One worker's claims for a step to act on: live ones, overtaken ones, or any."""
        worker = data.draw(st.sampled_from([w for w in WORKERS if self.claims[w]]), label="worker")
        every = self.claims[worker]
        pools = {
            "live": [c for c in every if self.held(c)],
            # Lost claims of jobs that run again under a newer claim: the stalled worker
            # whom only the token keeps out, since status = 'running' would let it in.
            "overtaken": [
                c for c in every if not self.held(c) and self.jobs[c.id].status == "running"
            ],
            "any": every,
        }
        # Lost claims pile up as a run goes on; choosing the kind first keeps the jobs
        # moving and the fence under test.
        kind = data.draw(st.sampled_from([k for k, pool in pools.items() if pool]), label="kind")
        pool = pools[kind]
        positions = data.draw(
            st.lists(st.sampled_from(range(len(pool))), min_size=1, max_size=4, unique=True),
            label="positions",
        )
        chosen = [pool[i] for i in positions]
        note(f"{worker} acts on (job, token): {[(c.id, c.token.hex[:8]) for c in chosen]}")
        return chosen

    def add(self, job_id: int, spec: dict[str, Any], tick: int) -> None:
        existing = self.by_idempotency_key.get(spec["idempotency_key"] or "")
        if existing is not None:
            assert job_id == existing, "a known idempotency key must return its first job"
            return
        assert job_id not in self.jobs, f"enqueue returned id {job_id}, which already exists"
        self.jobs[job_id] = ModelJob(id=job_id, tick=tick, **spec)
        if spec["idempotency_key"] is not None:
            self.by_idempotency_key[spec["idempotency_key"]] = job_id

    # -- producers ----------------------------------------------------------------------

    @initialize(specs=st.lists(job_specs, min_size=1, max_size=4))
    def start_with_jobs(self, specs: list[dict[str, Any]]) -> None:
        self.enqueue(specs, in_one_statement=True)

    @rule(specs=st.lists(job_specs, min_size=1, max_size=3), in_one_statement=st.booleans())
    def enqueue(self, specs: list[dict[str, Any]], in_one_statement: bool) -> None:
        if in_one_statement:
            ids = self.queue.enqueue_many([{"task": "task", **spec} for spec in specs])
            assert len(ids) == len(specs)
            tick = self.tick()
            for job_id, spec in zip(ids, specs, strict=True):
                self.add(job_id, spec, tick)
        else:
            for spec in specs:
                self.add(self.queue.enqueue("task", {}, **spec), spec, self.tick())

    # -- workers --------------------------------------------------------------------------

    # One argument, not two: hypothesis favours the rules with fewer arguments, and the
    # claim is what keeps jobs running for the other rules to act on.
    @rule(request=st.tuples(st.sampled_from(WORKERS), st.integers(1, 3)))
    def claim(self, request: tuple[str, int]) -> None:
        worker, limit = request
        candidates = sorted(
            (job for job in self.jobs.values() if self.claimable(job)),
            key=lambda job: (job.tick, job.id),
        )
        expected = [job.id for job in candidates[:limit]]
        got = self.queue.claim(worker, limit=limit, lease=LEASE)
        # A batch comes back in claim order: oldest run_at first, then lowest id.
        assert [c.id for c in got] == expected, (
            f"claim(limit={limit}) returned {[c.id for c in got]}, the model expected {expected}"
        )
        for claim in got:
            job = self.jobs[claim.id]
            job.status, job.token, job.worker_id = "running", claim.token, worker
            job.attempts += 1
            job.expired, job.started = False, True
            assert claim.attempts == job.attempts
            assert (claim.key, claim.max_attempts) == (job.key, job.max_attempts)
            assert claim.idempotency_key == (job.idempotency_key or f"pgbaton-job-{job.id}")
            assert claim.token not in self.tokens, "a claim token was handed out twice"
            self.tokens.add(claim.token)
            self.claims[worker].append(claim)

    @precondition(has_claims)
    @rule(data=st.data())
    def heartbeat(self, data: st.DataObject) -> None:
        claims = self.pick_claims(data)
        expected = [self.held(c) for c in claims]
        before = [c.lease_until for c in claims]
        assert self.queue.heartbeat(claims, lease=LEASE) == expected
        for claim, held, old_lease in zip(claims, expected, before, strict=True):
            if held:
                self.jobs[claim.id].expired = False
                [row] = self.db.execute(
                    "SELECT lease_until FROM jobs WHERE id = %s", (claim.id,)
                ).fetchall()
                assert claim.lease_until == row["lease_until"], "the claim missed its new lease"
            else:
                assert claim.lease_until == old_lease, "a lost claim was handed a lease"

    @precondition(has_claims)
    @rule(data=st.data())
    def complete(self, data: st.DataObject) -> None:
        claims = self.pick_claims(data)
        expected = [self.held(c) for c in claims]
        outcomes = [(c, {"token": str(c.token)}) for c in claims]
        if len(outcomes) == 1:
            assert [self.queue.complete(*outcomes[0])] == expected
        else:
            assert self.queue.complete_many(outcomes) == expected
        for (claim, result), held in zip(outcomes, expected, strict=True):
            if held:
                self.finish(claim, result)

    def finish(self, claim: pgbaton.Claim, result: dict[str, Any]) -> None:
        job = self.jobs[claim.id]
        job.status, job.token, job.result = "done", None, result

    @precondition(has_claims)
    @rule(data=st.data())
    def fail(self, data: st.DataObject) -> None:
        """Each claim fails with a retry due at once, or with one not due during this run."""
        claims = self.pick_claims(data)
        retry_ins = data.draw(
            st.lists(
                st.sampled_from([0.0, RETRY_LATER]), min_size=len(claims), max_size=len(claims)
            ),
            label="retry_in",
        )
        expected = [self.held(c) for c in claims]
        failures = [(c, "boom", r) for c, r in zip(claims, retry_ins, strict=True)]
        if len(failures) == 1:
            claim, error, retry_in = failures[0]
            assert [self.queue.fail(claim, error, retry_in=retry_in)] == expected
        else:
            assert self.queue.fail_many(failures) == expected
        tick = self.tick()
        for claim, retry_in, held in zip(claims, retry_ins, expected, strict=True):
            if held:
                job = self.jobs[claim.id]
                self.end_attempt(job, "Error")
                if job.status == "pending":
                    # run_at = now() + retry_in: due at once with 0, not in this run otherwise.
                    job.tick, job.due = tick, retry_in == 0

    @precondition(has_claims)
    @rule(data=st.data())
    def release(self, data: st.DataObject) -> None:
        """Running jobs go back to pending; a job cancelled (and perhaps retried) under the
        claim is let go, and a retried one is due at once."""
        claims = self.pick_claims(data)
        expected = [self.held(c) for c in claims]
        let_go = [
            self.jobs[c.id].status in ("cancelled", "pending") and self.jobs[c.id].token == c.token
            for c in claims
        ]
        tick = self.tick()
        if len(claims) == 1:
            assert [self.queue.release(claims[0])] == expected
        else:
            assert self.queue.release_many(claims) == expected
        for claim, held, cancelled in zip(claims, expected, let_go, strict=True):
            job = self.jobs[claim.id]
            if held:
                job.status, job.token, job.worker_id = "pending", None, None
                job.attempts -= 1
                job.started = False
            elif cancelled:
                job.token, job.expired = None, False
                if job.status == "pending":
                    job.due, job.tick = True, tick

    @precondition(has_claims)
    @rule(data=st.data(), later=st.booleans(), max_snoozes=st.sampled_from([None, 0, 1, 2]))
    def snooze(self, data: st.DataObject, later: bool, max_snoozes: int | None) -> None:
        """A handler's snooze (job_release_many with a run_at and a snooze counted): the
        attempt is given back; past max_snoozes the job fails instead."""
        claims = self.pick_claims(data)
        expected = [
            None if not self.held(c) else
            "failed" if max_snoozes is not None and self.jobs[c.id].snoozes >= max_snoozes
            else "pending"
            for c in claims
        ]
        let_go = [
            self.jobs[c.id].status in ("cancelled", "pending") and self.jobs[c.id].token == c.token
            for c in claims
        ]
        snooze = pgbaton.Snooze(RETRY_LATER if later else 0)
        tick = self.tick()
        assert self.queue.snooze_many([(c, snooze, max_snoozes) for c in claims]) == expected
        for claim, status, cancelled in zip(claims, expected, let_go, strict=True):
            job = self.jobs[claim.id]
            if status == "failed":
                job.errors.append(("SnoozeLimit", job.attempts - 1, job.worker_id))
            if status is not None:
                job.status, job.token, job.worker_id = status, None, None
                job.attempts -= 1
            if status == "pending":
                job.snoozes += 1
                job.started = False
                job.tick, job.due = tick, not later
            elif status is None and cancelled:
                job.token, job.expired = None, False
                if job.status == "pending":
                    job.due, job.tick = True, tick

    @precondition(has_claims)
    @rule(data=st.data(), status=st.sampled_from(["failed", "cancelled"]))
    def end(self, data: st.DataObject, status: str) -> None:
        """A handler's Discard or Cancel (job_end_many): the job ends at once, whatever
        attempts are left; a lost claim changes nothing."""
        claims = self.pick_claims(data)
        expected = [status if self.held(c) else None for c in claims]
        error = pgbaton.Discard("x") if status == "failed" else pgbaton.Cancel("x")
        assert self.queue.end_many([(c, status, error) for c in claims]) == expected
        for claim, ended in zip(claims, expected, strict=True):
            if ended is not None:
                job = self.jobs[claim.id]
                job.errors.append((type(error).__name__, job.attempts, job.worker_id))
                job.status, job.token, job.worker_id = ended, None, None

    # -- time and maintenance ---------------------------------------------------------

    @precondition(lambda self: any(j.token is not None for j in self.jobs.values()))
    @rule(position=st.integers(0, 31))
    def expire(self, position: int) -> None:
        """The holder stalls: its lease runs out without anyone waiting for it (a running
        job's, or that of a job cancelled under its holder)."""
        running = sorted(j.id for j in self.jobs.values() if j.token is not None)
        job_id = running[position % len(running)]
        self.db.execute(
            "UPDATE jobs SET lease_until = now() - interval '1 second' WHERE id = %s",
            (job_id,),
        )
        self.jobs[job_id].expired = True

    # Only once a lease has passed, so that every reap has work; the live leases beside
    # the expired ones must come through it untouched, which the invariant checks.
    @precondition(
        lambda self: any(j.token is not None and j.expired for j in self.jobs.values())
    )
    @rule()
    def reap(self) -> None:
        """Expired running jobs end their attempt; expired holds of cancelled jobs go."""
        expired = [j for j in self.jobs.values() if j.status == "running" and j.expired]
        assert self.queue.reap() == len(expired)
        for job in expired:
            self.end_attempt(job, "LeaseExpired")
        for job in self.jobs.values():
            if job.status != "running" and job.expired:
                job.token, job.expired = None, False  # run_at stays: a retry stays not due

    # -- operator -----------------------------------------------------------------------

    @rule(action=st.sampled_from(["cancel", "retry"]), position=st.integers(0, 31))
    def operator(self, action: str, position: int) -> None:
        ids = sorted(self.jobs)
        job = self.jobs[ids[position % len(ids)]]
        if action == "cancel":
            expected = job.status in ("pending", "running")
            assert self.queue.cancel(job.id) is expected
            if expected:
                # A running job keeps its holder's token: its key stays taken.
                job.status = "cancelled"
        else:
            expected = job.status in ("failed", "cancelled")
            assert self.queue.retry(job.id) is expected
            if expected:
                # A job still held keeps its hold and is due only when the holder lets
                # go (the lease runs out only after this run).
                held = self.held_after_cancel(job)
                if not held:
                    job.token, job.expired = None, False
                job.due = not held
                job.status, job.attempts, job.worker_id = "pending", 0, None
                job.snoozes = 0
                job.tick = self.tick()

    # -- the table against the model --------------------------------------------------

    @invariant()
    def table_matches_model(self) -> None:
        rows = self.db.execute(
            "SELECT id, status, attempts, snoozes, max_attempts, key, idempotency_key,"
            "       claim_token,"
            "       worker_id, errors, result, started_at IS NOT NULL AS started,"
            "       finished_at IS NOT NULL AS finished, lease_until IS NOT NULL AS leased,"
            "       lease_until < now() AS lease_passed, run_at <= now() AS due, run_at"
            " FROM jobs ORDER BY id"
        ).fetchall()
        assert [r["id"] for r in rows] == sorted(self.jobs), "the table's jobs are not the model's"
        for row in rows:
            job = self.jobs[row["id"]]
            where = f"job {job.id}: {row}\nmodel: {job}"
            assert row["status"] == job.status, where
            assert row["attempts"] == job.attempts, where
            assert row["snoozes"] == job.snoozes, where
            assert (row["max_attempts"], row["key"]) == (job.max_attempts, job.key), where
            assert row["idempotency_key"] == job.idempotency_key, where
            assert row["claim_token"] == job.token, where
            assert row["worker_id"] == job.worker_id, where
            assert row["leased"] is (job.token is not None), where
            if job.token is not None:
                assert row["lease_passed"] is job.expired, where
            if job.status == "pending":
                assert row["due"] is job.due, where
            assert row["started"] is job.started, where
            assert row["finished"] is (job.status in ("done", "failed", "cancelled")), where
            assert row["result"] == job.result, where
            errors = [(e["type"], e["attempt"], e["worker_id"]) for e in row["errors"]]
            assert errors == job.errors, where
        # The model's logical clock must order the claimable head as run_at does.
        due = [r for r in rows if r["status"] == "pending" and r["due"]]
        assert [r["id"] for r in sorted(due, key=lambda r: (r["run_at"], r["id"]))] == [
            j.id for j in sorted((self.jobs[r["id"]] for r in due), key=lambda j: (j.tick, j.id))
        ], "run_at order differs from the order of the statements that set it"
        # At most one running job per key is not asserted here: the unique index
        # jobs_one_running_per_key makes any other state impossible to reach.


def test_every_interleaving_of_workers_and_operator_keeps_the_table_equal_to_the_model(
    queue: pgbaton.Queue, db: psycopg.Connection[DictRow]
) -> None:
    """Any sequence of enqueue, claim, heartbeat, expire, reap, complete, fail, release,
    snooze, end, cancel and retry by workers holding live and stale claims leaves every job exactly
    where the model says, and a lost claim never changes a row."""
    QueueMachine.queue, QueueMachine.db = queue, db
    run_state_machine_as_test(
        QueueMachine,
        settings=settings(
            max_examples=50,
            stateful_step_count=50,
            deadline=None,
            # Each step is a database round trip; generating is never the slow part.
            suppress_health_check=[HealthCheck.too_slow],
            # One minimal failing sequence is enough, and shrinking a second one
            # would double the time a red run takes.
            report_multiple_bugs=False,
        ),
    )
