"""`pgbaton doctor` run as a user runs it, against a live schema with one problem made
at a time: each problem must come out as a failing finding with its evidence and exit 1,
and a healthy install must pass."""

from __future__ import annotations

import datetime as dt
import json
import socket
import subprocess
import sys
import time
import uuid
from typing import Any

import psycopg
from psycopg.rows import dict_row

import pgbaton

CHECKS = {
    "schema_version", "schema_objects", "claim_plan", "expired_leases", "queue_lag",
    "jobs_table_vacuum", "idle_in_transaction", "old_transactions", "connection_pooling",
}


def run_doctor(dsn: str, schema: str, *options: str, as_json: bool = True) -> tuple[
    int, Any, str
]:
    """Runs the command line; returns its exit status, its JSON report (or text), stderr."""
    command = [sys.executable, "-m", "pgbaton", "doctor", "--dsn", dsn, "--schema", schema]
    done = subprocess.run(
        [*command, *(["--json"] if as_json else []), *options],
        capture_output=True, text=True, timeout=120, check=False,
    )
    output = json.loads(done.stdout) if as_json and done.stdout.strip() else done.stdout
    return done.returncode, output, done.stderr


def finding(report: dict[str, Any], name: str) -> dict[str, Any]:
    [found] = [f for f in report["findings"] if f["name"] == name]
    return found


def wait_for_state(db: psycopg.Connection[Any], pid: int, state: str) -> None:
    """Polls pg_stat_activity until the session shows the state."""
    deadline = time.monotonic() + 10
    while True:
        row = db.execute(
            "SELECT state FROM pg_stat_activity WHERE pid = %s", (pid,)
        ).fetchone()
        if row and row["state"] == state:
            return
        assert time.monotonic() < deadline, f"session {pid} never became {state!r}: {row}"
        time.sleep(0.02)


def test_healthy_install_passes(queue: pgbaton.Queue, db, dsn, schema):
    """A migrated schema with pending, running and done jobs passes every check (exit 0),
    and on a table small enough for the planner to prefer a seq scan the claim plan is
    still judged by whether it can read jobs_claimable, which it can."""
    for n in range(5):
        queue.enqueue("send_email", {"n": n})
    first, second = queue.claim("w1", limit=2, lease=300)
    assert queue.complete(first)
    db.execute("ANALYZE jobs")

    status, report, stderr = run_doctor(dsn, schema)

    assert status == 0, (report, stderr)
    assert report["status"] in ("ok", "warn")
    assert {f["name"] for f in report["findings"]} == CHECKS
    assert [f for f in report["findings"] if f["status"] == "fail"] == []
    plan = finding(report, "claim_plan")
    assert plan["status"] == "ok"
    assert any("Index Scan using jobs_claimable on jobs" in line for line in plan["details"])
    assert finding(report, "queue_lag")["data"]["queues"]["default"]["running"] == 1
    objects = finding(report, "schema_objects")
    assert objects["status"] == "ok" and objects["data"]["problems"] == []

    # When all is well the text report leaves the EXPLAIN out; --verbose shows it.
    status, text, _ = run_doctor(dsn, schema, as_json=False)
    assert status == 0
    assert "claim_plan" in text and "expired_leases" in text and "healthy" in text
    assert "Index Scan using jobs_claimable" not in text
    assert "EXPLAIN" not in text
    status, verbose_text, _ = run_doctor(dsn, schema, "--verbose", as_json=False)
    assert status == 0
    assert "Index Scan using jobs_claimable on jobs" in verbose_text
    # The doctor changed nothing: the running claim is still held.
    assert db.execute("SELECT status, claim_token FROM jobs WHERE id = %s",
                      (second.id,)).fetchone() == {"status": "running",
                                                   "claim_token": second.token}


def test_dropped_claim_index_fails_with_the_plan(queue: pgbaton.Queue, db, dsn, schema):
    """Without jobs_claimable the claim_plan finding fails (exit 1) and shows the EXPLAIN
    lines with the Seq Scan, and the CREATE INDEX it advises makes it pass again."""
    queue.enqueue("send_email", {"n": 1})
    db.execute("DROP INDEX jobs_claimable")

    status, report, stderr = run_doctor(dsn, schema)

    assert status == 1, stderr
    assert report["status"] == "fail"
    plan = finding(report, "claim_plan")
    assert plan["status"] == "fail"
    assert f"index jobs_claimable: does not exist in schema {schema!r}" in plan["evidence"]
    forced_at = plan["details"].index(
        "EXPLAIN with enable_seqscan = off (can the claim use the index at all?):"
    )
    # Some other way to the rows: a table scan, or (flow control's) per-queue index.
    assert any(
        "Seq Scan on jobs c" in line or "using jobs_queue_claimable on jobs c" in line
        for line in plan["details"][forced_at:]
    ), plan["details"][forced_at:]
    assert plan["data"]["index_exists"] is False
    assert "no scan of jobs_claimable in the candidate CTE" in (
        plan["data"]["plan_without_seqscan"]["problems"]
    )

    objects = finding(report, "schema_objects")
    assert objects["status"] == "fail"
    assert objects["data"]["problems"] == ["index jobs_claimable is missing"]

    # A failing plan is shown in the text report without --verbose.
    status, text, _ = run_doctor(dsn, schema, as_json=False)
    assert status == 1
    assert "EXPLAIN with enable_seqscan = off" in text and "Seq Scan on jobs" in text

    create = plan["advice"].split(": ", 1)[1]
    assert create == (
        f'CREATE INDEX CONCURRENTLY jobs_claimable ON "{schema}".jobs USING btree '
        "(priority DESC, run_at, id) WHERE (status = 'pending'::text)"
    )
    db.execute(create)
    status, report, _ = run_doctor(dsn, schema)
    assert finding(report, "claim_plan")["status"] == "ok"
    assert finding(report, "schema_objects")["status"] == "ok"
    assert status == 0, report


def test_changed_index_and_constraint_fail_schema_objects(queue, db, dsn, schema):
    """An index rebuilt on other columns, a dropped CHECK constraint and a team's own
    index are read from the catalogue: the first two fail schema_objects with the
    statements that restore them, the third is listed and not judged."""
    db.execute("DROP INDEX jobs_finished")
    db.execute("CREATE INDEX jobs_finished ON jobs (created_at)")
    db.execute("ALTER TABLE jobs DROP CONSTRAINT jobs_attempts_in_range")
    db.execute("CREATE INDEX jobs_by_task ON jobs (task)")

    status, report, stderr = run_doctor(dsn, schema)

    assert status == 1, stderr
    objects = finding(report, "schema_objects")
    assert objects["status"] == "fail"
    assert objects["data"]["problems"] == [
        "index jobs_finished differs", "constraint jobs_attempts_in_range is missing",
    ]
    assert objects["data"]["other_indexes"] == ["jobs_by_task"]
    assert "index jobs_finished: USING btree (created_at); expected USING btree " \
        "(finished_at) WHERE (status = ANY (ARRAY['done'::text, 'failed'::text, " \
        "'cancelled'::text]))" in objects["evidence"]
    assert finding(report, "claim_plan")["status"] == "ok"

    for statement in objects["advice"].split("; "):
        db.execute(statement)
    status, report, _ = run_doctor(dsn, schema)
    assert finding(report, "schema_objects")["status"] == "ok"
    assert status == 0, report


def test_idle_in_transaction_session_fails_and_holds_back_vacuum(queue, db, dsn, schema):
    """A session that reads jobs in a REPEATABLE READ transaction and goes quiet is named
    by pid and application_name as idle in transaction and as holding back vacuum."""
    application = f"idle-{schema}"
    with psycopg.connect(dsn, application_name=application) as idle:
        idle.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
        idle.execute(f'SELECT count(*) FROM "{schema}".jobs')  # type: ignore[arg-type]
        pid = idle.info.backend_pid
        wait_for_state(db, pid, "idle in transaction")

        status, report, stderr = run_doctor(
            dsn, schema, "--max-idle-in-transaction", "0", "--max-transaction-age", "0"
        )

        assert status == 1, stderr
        idle_finding = finding(report, "idle_in_transaction")
        assert idle_finding["status"] == "fail"
        sessions = {s["pid"]: s for s in idle_finding["data"]["sessions"]}
        assert pid in sessions, sessions
        assert sessions[pid]["application_name"] == application
        assert sessions[pid]["over_limit"] is True
        assert any(f"pid {pid} " in line and repr(application) in line
                   for line in idle_finding["evidence"])
        assert "pg_terminate_backend" in idle_finding["advice"]
        old = finding(report, "old_transactions")
        assert old["status"] == "fail"
        assert pid in [s["pid"] for s in old["data"]["sessions"]]
        # The doctor's own session is never one of them.
        assert all(s["application_name"] != "pgbaton doctor"
                   for s in idle_finding["data"]["sessions"] + old["data"]["sessions"])


def test_expired_lease_without_reaper_fails(queue: pgbaton.Queue, db, dsn, schema):
    """A running job whose lease lies in the past, with no maintenance leader, fails as
    'the reaper is not running'; with a leader holding the lock it names the leader; once
    reaped the finding passes. The doctor itself reaps nothing."""
    queue.enqueue("send_email", {"n": 1})
    [claim] = queue.claim("stalled-worker", lease=30)
    db.execute("UPDATE jobs SET lease_until = now() - interval '10 minutes' WHERE id = %s",
               (claim.id,))

    status, report, stderr = run_doctor(dsn, schema)

    assert status == 1, stderr
    leases = finding(report, "expired_leases")
    assert leases["status"] == "fail"
    assert leases["summary"].endswith("the reaper is not running")
    assert leases["data"]["expired"] == 1 and leases["data"]["leader_pid"] is None
    assert leases["data"]["jobs"][0]["id"] == claim.id
    assert leases["data"]["jobs"][0]["worker_id"] == "stalled-worker"
    assert "Queue.reap()" in leases["advice"]
    assert db.execute("SELECT status, claim_token FROM jobs WHERE id = %s",
                      (claim.id,)).fetchone() == {"status": "running", "claim_token": claim.token}

    # A leader that holds the lock but does not reap is a different story.
    with psycopg.connect(dsn, autocommit=True, row_factory=dict_row) as leader:
        assert leader.execute(
            "SELECT pg_try_advisory_lock(hashtext('pgbaton.leader.' || %s)) AS got", (schema,)
        ).fetchone() == {"got": True}
        status, report, _ = run_doctor(dsn, schema)
        leases = finding(report, "expired_leases")
        assert status == 1
        assert leases["data"]["leader_pid"] == leader.info.backend_pid
        assert f"(pid {leader.info.backend_pid}) is not reaping" in leases["summary"]

    assert queue.reap() == 1
    status, report, stderr = run_doctor(dsn, schema)
    assert finding(report, "expired_leases")["status"] == "ok"
    assert status == 0, report


def test_queue_lag_fails_past_the_limit(queue: pgbaton.Queue, dsn, schema):
    """A job due an hour ago makes queue_lag fail for its queue; a job scheduled for later
    is not lag."""
    queue.enqueue("report", {}, queue="reports",
                  run_at=dt.datetime.now(dt.UTC) - dt.timedelta(hours=1))
    queue.enqueue("send_email", {}, queue="mail", delay=3600)

    status, report, _ = run_doctor(dsn, schema, "--max-lag", "60")

    assert status == 1
    lag = finding(report, "queue_lag")
    assert lag["status"] == "fail"
    assert "reports" in lag["summary"] and "mail" not in lag["summary"]
    queues = lag["data"]["queues"]
    assert queues["reports"]["lag_seconds"] > 3500
    assert queues["mail"] == {"paused": False, "due": 0, "scheduled": 1, "running": 0,
                              "lag_seconds": None}


def test_a_paused_queues_lag_is_the_pause_a_warning_that_says_so(
        queue: pgbaton.Queue, dsn, schema):
    """A paused queue's due jobs wait because of the pause, not a missing worker: the
    finding is a warning that names the pause and the command that ends it."""
    queue.enqueue("report", {}, queue="reports",
                  run_at=dt.datetime.now(dt.UTC) - dt.timedelta(hours=1))
    queue.pause("reports")
    status, report, _ = run_doctor(dsn, schema, "--max-lag", "60")
    assert status == 0  # a warning, not a failure
    lag = finding(report, "queue_lag")
    assert (lag["status"], lag["summary"]) == (
        "warn", "due jobs wait in reports because it is paused")
    assert "pgbaton queue resume reports" in lag["advice"]
    assert "queue reports (paused): 1 due" in lag["evidence"][0]
    assert lag["data"]["queues"]["reports"]["paused"] is True


def test_dead_rows_are_a_warning_that_does_not_fail(queue: pgbaton.Queue, db, dsn, schema):
    """A jobs table that is mostly dead row versions gives a jobs_table_vacuum warning
    with the counts as evidence, and the exit status stays 0."""
    # Autovacuum off on the table so that it cannot clean up between filling and checking.
    db.execute("ALTER TABLE jobs SET (autovacuum_enabled = false)")
    db.execute("INSERT INTO jobs (task) SELECT 'old' FROM generate_series(1, 3000)")
    db.execute("DELETE FROM jobs WHERE id > 100")
    db.execute("SELECT pg_stat_force_next_flush()")
    deadline = time.monotonic() + 10
    while db.execute("SELECT n_dead_tup FROM pg_stat_user_tables WHERE relid = 'jobs'::regclass"
                     ).fetchone()["n_dead_tup"] < 2900:
        assert time.monotonic() < deadline, "the dead rows never reached the statistics"
        time.sleep(0.05)

    status, report, stderr = run_doctor(dsn, schema)

    assert status == 0, (report, stderr)
    assert report["status"] == "warn"
    vacuum = finding(report, "jobs_table_vacuum")
    assert vacuum["status"] == "warn"
    assert "of the row versions in jobs are dead" in vacuum["summary"]
    assert "autovacuum is disabled on the jobs table" in vacuum["summary"]
    assert vacuum["data"]["dead_rows"] >= 2900
    assert "autovacuum_enabled" in vacuum["advice"]


def test_schema_newer_than_the_library_fails(queue: pgbaton.Queue, db, dsn, schema):
    """A schema migrated by a newer pgbaton fails schema_version with the advice to upgrade."""
    db.execute("INSERT INTO schema_version (version, name) VALUES (99, 'from_the_future')")

    status, report, _ = run_doctor(dsn, schema)

    assert status == 1
    version = finding(report, "schema_version")
    assert version["status"] == "fail"
    assert version["data"] == {"found": 99, "wanted": pgbaton.schema_version()}
    assert "upgrade pgbaton" in version["advice"]


def test_unmigrated_schema_fails_and_skips_the_table_checks(dsn, schema):
    """A schema without pgbaton's tables fails schema_version, advises `pgbaton migrate`,
    and runs only the checks that need no jobs table."""
    status, report, _ = run_doctor(dsn, schema)

    assert status == 1
    version = finding(report, "schema_version")
    assert version["status"] == "fail" and version["data"]["found"] == 0
    assert f"pgbaton migrate --schema {schema}" in version["advice"]
    assert {f["name"] for f in report["findings"]} == {
        "schema_version", "idle_in_transaction", "old_transactions", "connection_pooling",
    }


def test_unreachable_server_is_one_clear_line():
    """A DSN nobody listens on gives one line on stderr naming the server, and exit 1."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    # Nothing listens on the port once the probe is closed.
    status, output, stderr = run_doctor(
        f"postgresql://nobody:secret@127.0.0.1:{port}/nowhere", "pgbaton"
    )

    assert status == 1
    assert output == ""
    assert stderr.startswith(
        f"pgbaton: error: cannot connect to PostgreSQL at postgresql://nobody:***@127.0.0.1:{port}"
    )
    assert len(stderr.strip().splitlines()) == 1
    assert "secret" not in stderr


def test_other_sessions_statements_are_shown_without_literals(queue, db, dsn, schema):
    """A session idle in a transaction whose last statement selected a secret string is
    listed with that statement, but with every literal replaced by ?, in the JSON and
    the text report alike."""
    secret = f"secret-{uuid.uuid4().hex}"
    with psycopg.connect(dsn, application_name=f"secret-{schema}") as idle:
        idle.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
        idle.execute(
            f"SELECT '{secret}' AS password, $${secret}$$ AS token, 42 AS n,"  # type: ignore[arg-type]
            f" E'\\'{secret}' AS quoted FROM \"{schema}\".jobs /* {secret} */"
        )
        pid = idle.info.backend_pid
        wait_for_state(db, pid, "idle in transaction")
        limits = ("--max-idle-in-transaction", "0", "--max-transaction-age", "0")

        status, report, stderr = run_doctor(dsn, schema, *limits)
        _, text, _ = run_doctor(dsn, schema, *limits, as_json=False)

    assert status == 1, stderr
    shown = (f"last statement: SELECT ? AS password, ? AS token, ? AS n, ? AS quoted "
             f'FROM "{schema}".jobs')
    for name in ("idle_in_transaction", "old_transactions"):
        [line] = [line for line in finding(report, name)["evidence"] if f"pid {pid} " in line]
        assert line.endswith(shown), line
    assert secret not in json.dumps(report)
    assert secret not in text
    assert f"pid {pid} " in text


def test_a_held_xmin_is_named_with_its_age_and_its_statement_without_literals(
    queue, db, dsn, schema
):
    """The issue-27 holder, `BEGIN; SELECT txid_current()` left idle: old_transactions
    names its pid, user and application, and its last statement with the literal gone."""
    application = f"holder-{schema}"
    with psycopg.connect(dsn, application_name=application) as holder:
        holder.execute("SELECT txid_current(), 'a-secret-literal'")
        pid = holder.info.backend_pid
        wait_for_state(db, pid, "idle in transaction")

        status, report, stderr = run_doctor(dsn, schema, "--max-transaction-age", "0")

        assert status == 1, stderr
        old = finding(report, "old_transactions")
        assert old["status"] == "fail"
        [session] = [s for s in old["data"]["sessions"] if s["pid"] == pid]
        assert session["application_name"] == application
        assert session["user"] == db.info.user
        assert session["state"] == "idle in transaction"
        assert "txid_current()" in session["last_query"]
        assert "a-secret-literal" not in json.dumps(report)
        assert any(f"pid {pid} {db.info.user}@" in line for line in old["evidence"])
        assert "A held xmin" in old["advice"]
