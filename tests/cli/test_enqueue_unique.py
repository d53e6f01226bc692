"""`pgbaton enqueue --unique ...` and a task's unique= through `--app`: the output names
the job the call met and what it did (docs/howto/unique.md)."""

from __future__ import annotations

import json

from tests.cli.cli_helpers import pgbaton
from tests.helpers import job_rows


def test_enqueue_unique_keeps_replaces_and_says_so(dsn, schema, db):
    """--unique --unique-args: a second call prints the first job's id, says on stderr
    that it was kept, and --json gives created, outcome and status; --on-conflict
    replace gives the pending job the new args; a bad option writes nothing."""
    s = ("--schema", schema, "--json")
    assert pgbaton("migrate", "--schema", schema, dsn=dsn).returncode == 0
    first = pgbaton("enqueue", "sync", "--args", '{"c": 1, "r": "a"}', "--unique-args", "c",
                    *s, dsn=dsn)
    assert first.returncode == 0, first.stderr
    made = json.loads(first.stdout)
    assert (made["created"], made["outcome"]) == (True, "created")
    second = pgbaton("enqueue", "sync", "--args", '{"c": 1, "r": "b"}', "--unique-args", "c",
                     "--on-conflict", "replace", *s, dsn=dsn)
    assert second.returncode == 0, second.stderr
    assert json.loads(second.stdout) == {"id": made["id"], "created": False,
                                         "outcome": "replaced", "status": "pending"}
    plain = pgbaton("enqueue", "sync", "--args", '{"c": 1}', "--unique-args", "c",
                    "--schema", schema, dsn=dsn)
    assert plain.stdout.strip() == str(made["id"])
    assert f"job {made['id']} of the same unique key was kept (pending)" in plain.stderr
    for bad, says in (
        (("--unique-period", "0"), "period"),
        (("--unique-states", "pending"), "must include pending and running"),
        (("--on-conflict", "debounce"), "needs delay="),
    ):
        refused = pgbaton("enqueue", "other", "--unique", *bad, "--schema", schema, dsn=dsn)
        assert refused.returncode != 0 and says in refused.stderr, refused.stderr
    assert job_rows(db, "task", "args") == [("sync", {"c": 1, "r": "b"})]


def test_enqueue_with_a_debounce_delay(dsn, schema, db):
    """--debounce-delay alone makes a debounced unique job, due that long from now."""
    assert pgbaton("migrate", "--schema", schema, dsn=dsn).returncode == 0
    for _ in range(2):
        ran = pgbaton("enqueue", "reindex", "--debounce-delay", "60", "--schema", schema,
                      "--json", dsn=dsn)
        assert ran.returncode == 0, ran.stderr
    assert json.loads(ran.stdout)["outcome"] == "debounced"
    assert db.execute(
        "SELECT count(*) AS n, bool_and(run_at > now() + interval '50 seconds') AS later"
        " FROM jobs").fetchone() == {"n": 1, "later": True}


def test_show_prints_the_unique_key_and_states(dsn, schema):
    """`pgbaton show` (and --json) has the job's unique_key and unique_states."""
    assert pgbaton("migrate", "--schema", schema, dsn=dsn).returncode == 0
    made = json.loads(pgbaton("enqueue", "sync", "--unique", "--schema", schema, "--json",
                              dsn=dsn).stdout)
    shown = json.loads(pgbaton("show", str(made["id"]), "--schema", schema, "--json",
                               dsn=dsn).stdout)
    assert len(shown["unique_key"]) == 64
    assert shown["unique_states"] == ["pending", "running", "waiting"]
    text = pgbaton("show", str(made["id"]), "--schema", schema, dsn=dsn).stdout
    assert "unique_key" in text and shown["unique_key"][:16] in text
