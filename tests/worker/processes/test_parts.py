"""Each part of the worker on its own, against a real database, with faults injected:
the registry's slots, the executor's judging of outcomes, the heartbeat's extension and
its loss detection, the completer's fenced writes and its retry of a cancelled write."""

from __future__ import annotations

import asyncio
import sys
import threading
import time
import uuid

import psycopg
import psycopg.conninfo

import pgbaton
from pgbaton.worker.completer import Completer
from pgbaton.worker.executor import Executor
from pgbaton.worker.heartbeat import Heartbeat
from pgbaton.worker.held import HeldJobs, Outcome
from pgbaton.worker.producer import Producer


def ignore(*_: object, **__: object) -> None:
    pass


async def claims_of(aqueue: pgbaton.AsyncQueue, tasks: list[str], lease: float = 30):
    for task in tasks:
        await aqueue.enqueue(task)
    return await aqueue.claim("parts-test", limit=len(tasks), lease=lease)


async def run_all(aqueue, app, claims, concurrency=4):
    """Start the claims on an Executor and wait until every handler has ended."""
    held = HeldJobs(concurrency)
    executor = Executor(held=held, tasks=app.tasks, middlewares=app.middlewares,
                        worker_id="parts-test", claim_lease=30,
                        extend_one=_never_extend, start_ahead=_never_start,
                        notify=ignore, on_dropped=ignore)
    executor.start(claims, time.monotonic())
    await asyncio.gather(*(r.handler for r in held if r.handler), return_exceptions=True)
    executor.shutdown()
    return held


async def _never_start(_running) -> bool:
    raise AssertionError("these claims start at once: none is claimed ahead")


async def _never_extend(_context) -> bool:
    return False


async def test_executor_turns_every_kind_of_handler_end_into_one_outcome(aqueue):
    app = pgbaton.App(aqueue.dsn, schema=aqueue.schema)

    @app.task
    async def fine() -> dict:
        return {"ok": True}

    @app.task
    async def unstorable() -> object:
        return {1, 2}

    @app.task
    def exits() -> None:
        sys.exit(4)

    @app.task
    async def interrupted() -> None:
        raise KeyboardInterrupt

    names = ["fine", "unstorable", "exits", "interrupted", "missing"]
    claims = await claims_of(aqueue, names)
    held = await run_all(aqueue, app, claims, concurrency=8)
    by_task = {o.claim.task: o for o in held.outcomes}
    assert set(by_task) == set(names)
    assert by_task["fine"].ok and by_task["fine"].result == {"ok": True}
    assert not by_task["unstorable"].ok
    assert "result of task 'unstorable'" in str(by_task["unstorable"].error)
    assert type(by_task["exits"].error).__name__ == "HandlerExit"
    assert "SystemExit" in str(by_task["exits"].error)
    assert "KeyboardInterrupt" in str(by_task["interrupted"].error)
    assert type(by_task["missing"].error).__name__ == "UnknownTask"
    assert held.executing == 0 and held.unwritten == len(names)


def test_held_jobs_counts_slots_and_stray_threads():
    held = HeldJobs(concurrency=2)
    assert held.free_slots() == 2
    held.executing = 2
    assert held.free_slots() == 0
    held.executing = 0
    held.thread_strayed()
    assert held.free_slots() == 1  # a thread that outlived its job still takes a slot
    held.thread_returned()
    assert held.free_slots() == 2


async def test_heartbeat_extends_held_leases_and_detects_a_lost_claim(aqueue, db):
    claims = await claims_of(aqueue, ["a", "b"], lease=5)
    held = HeldJobs(4)
    app = pgbaton.App(aqueue.dsn, schema=aqueue.schema)

    @app.task
    async def a() -> None:
        await asyncio.sleep(3600)

    @app.task
    async def b() -> None:
        await asyncio.sleep(3600)

    executor = Executor(held=held, tasks=app.tasks, middlewares=[], worker_id="parts-test",
                        claim_lease=5, extend_one=_never_extend,
                        start_ahead=_never_start, notify=ignore, on_dropped=ignore)
    executor.start(claims, time.monotonic())
    heartbeat = Heartbeat(aqueue, held, default_lease=60, notify=ignore)
    before = {r["id"]: r["lease_until"] for r in db.execute("SELECT id, lease_until FROM jobs")}
    await aqueue.cancel(claims[1].id)  # an operator takes b away
    await heartbeat.extend(list(held))
    after = {r["id"]: r["lease_until"] for r in db.execute("SELECT id, lease_until FROM jobs")}
    assert after[claims[0].id] > before[claims[0].id]  # 5 s lease became 60 s
    lost = [r for r in held if r.lost]
    assert [r.claim.id for r in lost] == [claims[1].id]
    # Told why: an operator cancelled it (not a lease that ran out).
    assert lost[0].context.should_stop and lost[0].context.stop_reason == "cancelled"
    assert lost[0].lost_detail == "it was cancelled"
    await asyncio.sleep(0)
    assert lost[0].handler.cancelled() or lost[0].handler.cancelling()
    for running in held:
        running.handler.cancel()
    await asyncio.gather(*(r.handler for r in held), return_exceptions=True)
    executor.shutdown()


async def test_a_lost_claim_is_told_whether_it_was_taken_deleted_or_requeued(aqueue, db):
    """The heartbeat reads why each claim it found gone was lost, in one statement: taken
    by another worker once the lease ran out (named), deleted, or back to pending."""
    claims = await claims_of(aqueue, ["a", "b", "c"], lease=5)
    taken, deleted, requeued = claims
    db.execute("UPDATE jobs SET claim_token = gen_random_uuid(), worker_id = 'other-7'"
               " WHERE id = %s", (taken.id,))
    db.execute("DELETE FROM jobs WHERE id = %s", (deleted.id,))
    db.execute("UPDATE jobs SET status = 'pending', claim_token = NULL, lease_until = NULL,"
               " worker_id = NULL WHERE id = %s",
               (requeued.id,))
    held = HeldJobs(4)
    app = pgbaton.App(aqueue.dsn, schema=aqueue.schema)
    for name in ("a", "b", "c"):
        app.task(name=name)(_sleep_forever)
    executor = Executor(held=held, tasks=app.tasks, middlewares=[], worker_id="parts-test",
                        claim_lease=5, extend_one=_never_extend,
                        start_ahead=_never_start, notify=ignore, on_dropped=ignore)
    executor.start(claims, time.monotonic())
    await Heartbeat(aqueue, held, default_lease=60, notify=ignore).extend(list(held))
    told = {r.claim.id: (r.context.stop_reason, r.lost_detail) for r in held}
    assert told == {
        taken.id: ("lost", "its lease ran out and worker other-7 took it"),
        deleted.id: ("lost", "the job was deleted"),
        requeued.id: ("lost", "its lease ran out and it is pending again"),
    }
    for running in held:
        running.handler.cancel()
    await asyncio.gather(*(r.handler for r in held), return_exceptions=True)
    executor.shutdown()


async def _sleep_forever() -> None:
    await asyncio.sleep(3600)


async def test_completer_writes_fenced_and_retries_a_cancelled_statement(aqueue, db, dsn):
    claims = await claims_of(aqueue, ["x", "y"])
    stale = claims[1]
    await aqueue.cancel(stale.id)
    held = HeldJobs(4)
    written: list[tuple[int, bool]] = []
    completer = Completer(aqueue, held, lambda o, ok: written.append((o.claim.id, ok)))
    held.outcomes = [Outcome(claims[0], ok=True, result=1), Outcome(stale, ok=True)]
    held.outcome_ready.set()
    with psycopg.connect(dsn) as locker:
        locker.execute(f'LOCK TABLE "{aqueue.schema}".jobs IN ACCESS EXCLUSIVE MODE')
        run = asyncio.create_task(completer.run())
        with psycopg.connect(dsn, autocommit=True) as canceller:
            for _ in range(100):  # cancel the completer's statement once it waits
                row = canceller.execute(
                    "SELECT count(*) FILTER (WHERE pg_cancel_backend(pid))"
                    " FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                    " AND datname = current_database()").fetchone()
                if row[0]:
                    break
                await asyncio.sleep(0.05)
            assert row[0] >= 1
        locker.rollback()
    for _ in range(200):
        if len(written) == 2:
            break
        await asyncio.sleep(0.05)
    run.cancel()
    await asyncio.gather(run, return_exceptions=True)
    assert sorted(written) == [(claims[0].id, True), (stale.id, False)]
    assert db.execute("SELECT status FROM jobs WHERE id = %s",
                      (claims[0].id,)).fetchone()["status"] == "done"


async def test_producer_claims_only_free_slots(aqueue):
    for _ in range(10):
        await aqueue.enqueue("t")
    held = HeldJobs(3)
    started: list[int] = []
    stopping = asyncio.Event()

    def start(claims, _sent):
        started.extend(c.id for c in claims)
        held.executing += len(claims)  # they run for ever: no slot frees
        stopping.set()

    producer = Producer(aqueue, held, worker_id="parts-test", lease=30, queues=None, tasks=None,
                        poll_interval=0.1, start=start, stopping=stopping)
    await asyncio.wait_for(producer.run(), 10)
    assert len(started) == 3


def test_another_thread_reads_the_shortest_lease_while_the_loop_changes_the_held_jobs():
    """The loop watchdog asks HeldJobs.shortest_lease() from its own thread while the
    loop adds and forgets claims: it must never see the registry change under it."""
    import threading
    import types
    import uuid

    held = HeldJobs(4)
    for _ in range(1000):  # a long iteration, so that a thread switch lands inside it
        held.by_token[uuid.uuid4()] = types.SimpleNamespace(lease=30.0)  # type: ignore[assignment]
    errors: list[BaseException] = []
    done = threading.Event()
    switch_interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)

    def ask() -> None:
        try:
            while not done.is_set():
                held.shortest_lease(30.0)
        except BaseException as error:  # what killed the watchdog's thread
            errors.append(error)

    reader = threading.Thread(target=ask)
    reader.start()
    try:
        for _ in range(50_000):
            token = uuid.uuid4()
            held.by_token[token] = types.SimpleNamespace(lease=30.0)  # type: ignore[assignment]
            del held.by_token[token]
    finally:
        done.set()
        reader.join()
        sys.setswitchinterval(switch_interval)
    assert errors == []


def test_the_heartbeat_never_spins_on_a_finished_job_whose_lease_it_was_to_change(queue):
    """A job of a task with a lease of its own asks the heartbeat for a beat at once
    (needs_extend); when its handler ends before that beat, nothing is left to extend.
    The heartbeat once looped without awaiting anything until the job left the held
    jobs, which only the completer, on the same (now frozen) loop, could do: the whole
    worker stopped, SIGTERM included (the soak's worker that did not stop). Run on a
    loop of its own in a thread, so that a frozen loop fails the test instead of
    hanging it."""
    queue.enqueue("short")
    claims = queue.claim("parts-test", limit=1, lease=30)
    report: dict[str, object] = {}

    async def scenario() -> None:
        held = HeldJobs(4)
        app = pgbaton.App(queue.dsn, schema=queue.schema)

        @app.task(lease=5)  # not the claim's 30 s: the heartbeat is to extend it now
        async def short() -> None:
            pass

        executor = Executor(held=held, tasks=app.tasks, middlewares=[], worker_id="parts-test",
                            claim_lease=30, extend_one=_never_extend,
                            start_ahead=_never_start, notify=ignore, on_dropped=ignore)
        executor.start(claims, time.monotonic())
        [running] = list(held)
        await asyncio.gather(*(r.handler for r in held if r.handler))
        report["finished"], report["needs_extend"] = running.finished, running.needs_extend
        async with pgbaton.AsyncQueue(queue.dsn, schema=queue.schema) as aqueue:
            beats = asyncio.create_task(
                Heartbeat(aqueue, held, default_lease=30, notify=ignore).run())
            ticks = 0
            for _ in range(20):
                await asyncio.sleep(0.01)
                ticks += 1
            report["ticks"] = ticks
            beats.cancel()
            await asyncio.gather(beats, return_exceptions=True)
        executor.shutdown()

    thread = threading.Thread(target=asyncio.run, args=(scenario(),), daemon=True)
    thread.start()
    thread.join(20)
    assert not thread.is_alive(), "the heartbeat froze the event loop"
    assert report["finished"] and report["ticks"] == 20, report
class _CountedHeldJobs(HeldJobs):
    """Counts the heartbeat's turns (each asks for the shortest lease once) and stops a
    loop that turns without waiting: a spin would otherwise block the test for ever."""

    turns = 0

    def shortest_lease(self, default: float) -> float:
        self.turns += 1
        if self.turns > 1000:
            raise AssertionError("the heartbeat turned 1000 times without waiting")
        return super().shortest_lease(default)


async def test_the_heartbeat_waits_when_a_handler_cancelled_its_own_job_and_returned(aqueue):
    """A task whose lease differs from the claim's wants a beat at once; its handler
    cancels its own job and returns before that beat. The finished claim (or, told to
    stop, the lost one) is no beat's to extend: the heartbeat waits, it does not turn
    for ever (counted in its turns and its statements, not timed; the test above runs
    a finished job's case on a loop of its own)."""
    [claim] = await claims_of(aqueue, ["selfcancel"], lease=30)
    app = pgbaton.App(aqueue.dsn, schema=aqueue.schema)

    @app.task(name="selfcancel", lease=90)
    async def selfcancel() -> str:
        await aqueue.cancel(claim.id)
        return "returned"

    held = _CountedHeldJobs(4)
    executor = Executor(held=held, tasks=app.tasks, middlewares=[], worker_id="parts-test",
                        claim_lease=30, extend_one=_never_extend,
                        start_ahead=_never_start, notify=ignore, on_dropped=ignore)
    executor.start([claim], time.monotonic())
    [running] = list(held)
    assert running.needs_extend and running.handler is not None
    await running.handler  # returned: its outcome waits for the completer
    assert running.finished and held.outcomes
    beats = 0
    heartbeat_many = aqueue.heartbeat

    async def counted(*args, **kwargs):
        nonlocal beats
        beats += 1
        return await heartbeat_many(*args, **kwargs)

    aqueue.heartbeat = counted  # type: ignore[method-assign]
    heartbeat = Heartbeat(aqueue, held, default_lease=30, notify=ignore)
    beating = asyncio.create_task(heartbeat.run())
    for _ in range(20):  # the loop turns 20 times: a waiting heartbeat turns once at most
        await asyncio.sleep(0)
    assert not beating.done(), beating.exception()
    assert held.turns <= 2 and beats == 0
    # The same for a claim told to stop before its first beat, whose handler has not
    # ended yet (the heartbeat found it cancelled, or the fence stopped it).
    running.finished, running.needs_extend = False, True
    held.lose(running, "cancelled")
    held.changed.set()
    for _ in range(20):
        await asyncio.sleep(0)
    assert not beating.done(), beating.exception()
    assert held.turns <= 4 and beats == 0
    beating.cancel()
    await asyncio.gather(beating, return_exceptions=True)
    executor.shutdown()


async def test_a_failing_beat_for_a_lease_to_change_is_retried_after_a_pause(
        aqueue, dsn, db):
    """A job whose task's lease differs from its claim's asks for a beat at once. When
    that beat fails with a passing error (here: the job's row locked by another session
    past the role's lock_timeout, as fast as the server can say so), the flag stays set:
    the heartbeat once sent the next beat at once, again and again, tens of thousands a
    second. It now waits the probe interval between tries."""
    role = f"pgbaton_beat_{uuid.uuid4().hex[:8]}"
    db.execute(f'CREATE ROLE "{role}" LOGIN SUPERUSER')
    db.execute(f"ALTER ROLE \"{role}\" SET lock_timeout = '5ms'")
    await aqueue.enqueue("slow")
    claims = await aqueue.claim("parts-test", limit=1, lease=30)
    app = pgbaton.App(aqueue.dsn, schema=aqueue.schema)

    @app.task(lease=5)  # not the claim's 30 s: a beat is due at once
    async def slow() -> None:
        await asyncio.sleep(3600)

    held = HeldJobs(4)
    executor = Executor(held=held, tasks=app.tasks, middlewares=[], worker_id="parts-test",
                        claim_lease=30, extend_one=_never_extend,
                        start_ahead=_never_start, notify=ignore, on_dropped=ignore)
    locker = await psycopg.AsyncConnection.connect(dsn)
    timed = pgbaton.AsyncQueue(psycopg.conninfo.make_conninfo(dsn, user=role),
                               schema=aqueue.schema)
    try:
        await locker.execute(
            f'SELECT 1 FROM "{aqueue.schema}".jobs WHERE id = %s FOR UPDATE',  # type: ignore[arg-type]
            (claims[0].id,))
        executor.start(claims, time.monotonic())
        beats = 0
        beat = timed.engine.heartbeat

        async def counted(*args, **kwargs):
            nonlocal beats
            beats += 1
            return await beat(*args, **kwargs)

        timed.engine.heartbeat = counted  # the real statement, counted
        heartbeat = asyncio.create_task(
            Heartbeat(timed, held, default_lease=30, notify=ignore).run())
        await asyncio.sleep(1.5)
        heartbeat.cancel()
        await asyncio.gather(heartbeat, return_exceptions=True)
        assert not held.heartbeat_ok.is_set()  # the beats did fail
        assert 1 <= beats <= 4, f"{beats} beats in 1.5 s"
    finally:
        for running in held:
            if running.handler is not None:
                running.handler.cancel()
        await asyncio.gather(*(r.handler for r in held if r.handler), return_exceptions=True)
        executor.shutdown()
        await locker.rollback()
        await locker.close()
        await timed.close()
        db.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s",
                   (role,))
        for _ in range(50):
            if not db.execute("SELECT 1 FROM pg_stat_activity WHERE usename = %s",
                              (role,)).fetchone():
                break
            await asyncio.sleep(0.1)
        db.execute(f'DROP ROLE "{role}"')
