"""`pgbaton show` lists a job's durable steps and says what a suspended job waits for
(docs/howto/durable-steps.md)."""

from __future__ import annotations

import json

from tests.cli.cli_helpers import pgbaton


def test_show_lists_the_steps_and_what_the_job_waits_for(dsn, schema, db):
    """Each step with its state, duration and size; a waiting job names its event; the
    --json form has the same steps."""
    assert pgbaton("migrate", "--schema", schema, dsn=dsn).returncode == 0
    job_id = db.execute("INSERT INTO jobs (task, has_steps, waiting_event, run_at) VALUES "
                        "('signup', true, 'confirmed', '9999-12-31T00:00:00Z') RETURNING id"
                        ).fetchone()["id"]
    db.execute("INSERT INTO job_steps (job_id, seq, name, kind, result, started_at, "
               "finished_at, size) VALUES "
               "(%s, 0, 'mail', 'step', '\"sent\"', now() - interval '2 seconds', now(), 6)",
               [job_id])
    db.execute("INSERT INTO job_steps (job_id, seq, name, kind, until) VALUES "
               "(%s, 1, 'confirmed', 'event', '2030-01-01T00:00:00Z')", [job_id])
    shown = pgbaton("show", str(job_id), "--schema", schema, dsn=dsn)
    assert shown.returncode == 0, shown.stderr
    assert "steps of job" in shown.stdout
    mail = next(line for line in shown.stdout.splitlines() if "mail" in line)
    assert "done" in mail and "2.0" in mail and "6" in mail
    assert "waiting for event 'confirmed' (until 2030-01-01T00:00:00+00:00)" in shown.stdout
    as_json = json.loads(pgbaton("show", str(job_id), "--schema", schema, "--json",
                                 dsn=dsn).stdout)
    assert [(s["name"], s["state"], s["size"]) for s in as_json["steps"]] == [
        ("mail", "done", 6), ("confirmed", "waiting", None)]
    plain = db.execute("INSERT INTO jobs (task) VALUES ('plain') RETURNING id").fetchone()
    shown = pgbaton("show", str(plain["id"]), "--schema", schema, dsn=dsn)
    assert "steps of job" not in shown.stdout
