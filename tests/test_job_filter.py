"""The job filter means the same jobs in every statement that takes it: the dashboard's
list, the count before a bulk action, and each *_matching action, each compared in
SQL with what JobFilter documents, for many filters over jobs in every state."""

from __future__ import annotations

import datetime as dt
from dataclasses import replace
from typing import Any

import psycopg
import pytest
from psycopg.rows import DictRow, dict_row

import pgbaton
from pgbaton import _sql
from pgbaton.actions import ACTIONS, Action
from pgbaton.limits import INT8_MAX
from pgbaton.models import STATES, STATUSES

HOUR = dt.timedelta(hours=1)


def fill(queue: pgbaton.Queue, db: psycopg.Connection[DictRow]) -> None:
    """Jobs in every state, of several queues, tasks and keys, with args and errors to
    find by text, finished or created at different times, one of them moved to
    jobs_history. Pending jobs are scheduled for later and no job is held but the
    running one: every action's guard is then its states alone."""
    failed = queue.enqueue("charge", {"amount": 5}, queue="charge", key="k1",
                           max_attempts=1)
    (claim,) = queue.claim("w", queues=["charge"])
    assert claim.id == failed and queue.fail(claim, RuntimeError("Card DECLINED"))
    queue.enqueue("send_mail", {"to": "Ann@Example.com"}, queue="mail", key="k1",
                  delay=3600)
    older = queue.enqueue("send_mail", {"to": "bob@example.com"}, queue="mail",
                          delay=3600)
    db.execute("UPDATE jobs SET created_at = now() - interval '3 hours' WHERE id = %s",
               [older])
    queue.enqueue("resize", {"image": 1}, queue="media", key="k2")
    (claim,) = queue.claim("w", queues=["media"], lease=600)
    for args, moved in (({"to": "carol@example.com"}, True), ({"day": 1}, False)):
        job_id = queue.enqueue("send_mail" if moved else "report", args,
                               queue="mail" if moved else "reports")
        (claim,) = queue.claim("w", queues=["mail" if moved else "reports"])
        assert claim.id == job_id and queue.complete(claim)
        if moved:
            db.execute("UPDATE jobs SET created_at = now() - interval '3 hours', "
                       "finished_at = now() - interval '2 hours' WHERE id = %s", [job_id])
    cancelled = queue.enqueue("charge", {"amount": 6}, queue="charge", delay=3600)
    assert queue.cancel(cancelled)
    db.execute("UPDATE jobs SET finished_at = now() - interval '30 minutes' WHERE id = %s",
               [cancelled])
    parent = queue.enqueue("report", {"day": 2}, queue="reports", delay=3600)
    queue.enqueue("report", {"day": 3}, queue="reports", after=[parent])
    assert queue.archive(after=3600, partition=3600) == 1


def filters(now: dt.datetime) -> list[pgbaton.JobFilter]:
    JobFilter = pgbaton.JobFilter
    return [
        JobFilter(),
        *(JobFilter(status=state) for state in STATES),
        JobFilter(queue="mail"), JobFilter(task="send_mail"), JobFilter(key="k1"),
        JobFilter(text="ann@EXAMPLE"), JobFilter(text="declined"), JobFilter(text="nothing"),
        JobFilter(since=now - HOUR), JobFilter(until=now - HOUR),
        JobFilter(since=now - 2.5 * HOUR, until=now - 1.5 * HOUR),
        JobFilter(queue="mail", status="done"), JobFilter(task="charge", key="k1"),
        JobFilter(status="scheduled", since=now - HOUR),
        JobFilter(queue="reports", text="day"),
    ]


def documented(job_filter: pgbaton.JobFilter, job: dict[str, Any]) -> bool:
    """What JobFilter's docstring says it matches: its status is a state as shown
    (pending: due; scheduled: pending with run_at ahead)."""
    f = job_filter
    when = job["finished_at"] or job["created_at"]
    text = None if f.text is None else f.text.lower()
    state = job["status"]
    if state == "pending" and job["run_at"] > dt.datetime.now(dt.UTC):
        state = "scheduled"
    return ((f.status is None or state == f.status)
            and (f.queue is None or job["queue"] == f.queue)
            and (f.task is None or job["task"] == f.task)
            and (f.key is None or job["key"] == f.key)
            and (text is None or text in job["args"].lower() or text in job["errors"].lower())
            and (f.since is None or when >= f.since)
            and (f.until is None or when < f.until)
            and (f.ids is None or job["id"] in f.ids))


def rows(conn: psycopg.Connection[DictRow], table: str) -> list[dict[str, Any]]:
    return conn.execute(  # type: ignore[call-overload, no-any-return]
        f"SELECT id, status, queue, task, key, args::text AS args, errors::text AS errors, "
        f"created_at, finished_at, run_at, priority FROM {table}").fetchall()


def changed_by(conn: psycopg.Connection[DictRow], schema: str, action: Action,
               params: dict[str, Any]) -> set[int]:
    """The ids of the jobs the action's statement changes, the change rolled back: those
    it returns, or for a statement that returns a count, those whose state it changed
    (the others' triggers end a cancelled or deleted parent's children too, which the
    filter did not choose)."""
    def states() -> dict[int, tuple[Any, ...]]:
        return {r["id"]: (r["status"], r["run_at"], r["priority"])
                for r in rows(conn, f'"{schema}".jobs')}

    with conn.transaction(force_rollback=True):
        before = states()
        answer = conn.execute(_sql.queries(schema)[action.matching], params).fetchall()
        if not action.wakes:
            return {r["id"] for r in answer}
        after = states()
    return {job_id for job_id, state in before.items() if after.get(job_id) != state}


def test_every_filtering_statement_matches_the_jobs_the_filter_documents(
        queue: pgbaton.Queue, db: psycopg.Connection[DictRow], dsn: str,
        schema: str) -> None:
    """For each filter (selections of ids included): the dashboard's page (jobs and
    jobs_history), its state tabs' counts, the bulk count and each *_matching action
    (the jobs table) hold exactly the jobs JobFilter means."""
    fill(queue, db)
    sql = _sql.queries(schema)
    now = db.execute("SELECT now() AS now").fetchone()["now"]
    with psycopg.connect(dsn, row_factory=dict_row) as conn:
        jobs = rows(conn, f'"{schema}".jobs')
        moved = rows(conn, f'"{schema}".jobs_history')
        assert {j["status"] for j in jobs} == set(STATUSES) and len(moved) == 1
        conn.rollback()
        seen_any = set()
        every_other = tuple(sorted(j["id"] for j in jobs)[::2])
        selections = [pgbaton.JobFilter(ids=every_other),
                      pgbaton.JobFilter(ids=(moved[0]["id"], *every_other[:2]), queue="mail")]
        for job_filter in [*filters(now), *selections]:
            wanted = {j["id"] for j in jobs if documented(job_filter, j)}
            kept = {j["id"] for j in moved if documented(job_filter, j)}
            tabs = conn.execute(sql["dashboard_state_counts"], {
                **job_filter.params(), "status": None, "cap": 1000}).fetchall()
            for state in STATES:
                one = replace(job_filter, status=state)
                assert {r["state"]: r["count"] for r in tabs}[state] == sum(
                    documented(one, j) for j in [*jobs, *moved]), (state, job_filter)
            seen_any |= wanted
            page = conn.execute(sql["dashboard_job_page"], {
                **job_filter.params(), "before": None, "limit": 1000}).fetchall()
            assert {r["id"] for r in page} == wanted | kept, job_filter
            counted = conn.execute(sql["job_count_matching"], {
                **job_filter.params(), "statuses": list(STATUSES)}).fetchone()
            assert (counted["count"], counted["upto"]) == (
                len(wanted), max(wanted, default=None)), job_filter
            conn.rollback()
            for action in ACTIONS:
                params = {**job_filter.params(), "upto": INT8_MAX, "priority": 7,
                          "channel": queue.channel}
                acted = {j["id"] for j in jobs
                         if j["id"] in wanted and j["status"] in action.statuses}
                assert changed_by(conn, schema, action, params) == acted, (
                    action.name, job_filter)
        assert seen_any == {j["id"] for j in jobs}


@pytest.mark.parametrize("name", ["dashboard_job_page", "dashboard_state_counts",
                                  "job_count_matching",
                                  *(a.matching for a in ACTIONS)])
def test_each_filtering_statement_takes_the_one_filter(name: str) -> None:
    """Its text, as written, holds the job_filter fragment's hole and no filter test of
    its own."""
    written = _sql._sections()[0][name]
    assert "__job_filter__" in written and "%(queue)s" not in written


@pytest.mark.parametrize("ids", [(), [1] * 0, (0,), (-1,), (True,), ("1",), (INT8_MAX + 1,),
                                 tuple(range(1, 502)), "12"])
def test_a_selection_that_is_not_job_ids_is_refused(ids: Any) -> None:
    """ids holds 1 to 500 job ids; anything else is InvalidArgument naming ids."""
    with pytest.raises(pgbaton.InvalidArgument, match="ids"):
        pgbaton.JobFilter(ids=ids)


def test_queue_jobs_takes_a_selection(queue: pgbaton.Queue) -> None:
    """Queue.jobs(ids=) lists the selected jobs only, newest first, each once."""
    made = [queue.enqueue("t") for _ in range(4)]
    found = queue.jobs(ids=[made[0], made[2], made[2]])
    assert [job.id for job in found] == [made[2], made[0]]
