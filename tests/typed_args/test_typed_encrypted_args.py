"""Typed and encrypted args against PostgreSQL (docs/howto/typed-args.md,
docs/howto/encryption.md): every enqueue path judges typed args before anything is
written; an encrypted task's row, its listing and `pgbaton show` hold no plaintext;
`pgbaton rotate-keys` reseals the jobs still to run with the first key."""

from __future__ import annotations

import json
import textwrap
from typing import Any

import psycopg
import pytest

import pgbaton
from pgbaton import encryption
from tests.cli.cli_helpers import clean_env
from tests.cli.cli_helpers import pgbaton as run_pgbaton

pydantic = pytest.importorskip("pydantic")
pytest.importorskip("cryptography")

SECRET = "s3cret-4111-1111"
OLD, NEW, ELSEWHERE = encryption.new_key(), encryption.new_key(), encryption.new_key()


class Order(pydantic.BaseModel):
    id: int
    lines: list[str]


def count(db: psycopg.Connection[Any], where: str = "true", *params: Any) -> int:
    row = db.execute(f"SELECT count(*) AS n FROM jobs WHERE {where}", params).fetchone()
    assert row is not None
    return int(row["n"])


@pytest.fixture
def app(dsn: str, schema: str, queue: pgbaton.Queue, monkeypatch) -> pgbaton.App:
    monkeypatch.setenv(encryption.KEYS_VARIABLE, OLD)
    app = pgbaton.App(dsn, schema=schema)

    @app.task
    def ship(order: Order, copies: int = 1) -> None:
        pass

    @app.task(encrypt=True)
    def charge(card: str, cents: int) -> None:
        pass

    @app.task(encrypt=True, unique=pgbaton.Unique(args=[]))
    def charge_once(card: str) -> None:
        pass

    return app


def test_typed_args_that_do_not_fit_write_nothing_on_any_path(app, db):
    """Single, once, many (in one statement and by COPY): one bad job, nothing written,
    the error naming the job, the field and the problem."""
    ship = app.tasks["ship"]
    bad = {"order": {"id": "seven", "lines": []}}
    with pytest.raises(pgbaton.InvalidArgument, match=r"order\.id: Input should be a valid int"):
        ship.enqueue(bad)
    with pytest.raises(pgbaton.InvalidArgument, match=r"order\.id"):
        ship.enqueue_once(bad, idempotency_key="k")
    good = {"task": "ship", "args": {"order": Order(id=1, lines=["a"])}}
    for size in (3, 3000):  # the second is past the size enqueue_many writes by COPY
        jobs = [good] * size + [{"task": "ship", "args": {"order": {"id": 1}, "copies": "x"}}]
        with pytest.raises(pgbaton.InvalidArgument, match=rf"job {size}: .*order\.lines: "
                           r"Field required; copies: Input should be a valid integer"):
            app.enqueue_many(jobs)
    assert count(db) == 0


def test_typed_args_are_stored_as_their_json(app, db):
    ship = app.tasks["ship"]
    first = ship.defer(order=Order(id=7, lines=["tea"]), copies="2")  # type: ignore[attr-defined]
    ids = app.enqueue_many([{"task": "ship", "args": {"order": Order(id=8, lines=[])}}] * 3000)
    rows = db.execute("SELECT args FROM jobs WHERE id = ANY(%s) ORDER BY id",
                      ([first, ids[-1]],)).fetchall()
    assert [row["args"] for row in rows] == [
        {"order": {"id": 7, "lines": ["tea"]}, "copies": 2}, {"order": {"id": 8, "lines": []}}]


def test_an_encrypted_row_holds_no_plaintext_anywhere(app, db, dsn, schema):
    """enqueue, enqueue_once and enqueue_many: no column of the row, no listing and no
    `pgbaton show` holds the secret or the arg's name."""
    charge, charge_once = app.tasks["charge"], app.tasks["charge_once"]
    one = charge.enqueue({"card": SECRET, "cents": 250})
    charge_once.enqueue_once({"card": SECRET})
    app.enqueue_many([{"task": "charge", "args": {"card": SECRET, "cents": n}}
                      for n in range(2500)])
    assert count(db) == 2502
    # The whole row as text: args, errors, keys, meta, every column. The arg's name is
    # looked for with the envelope's base64 taken out: 2,500 random ciphertexts spell
    # "card" somewhere now and then (about one run in seventy).
    assert count(db, "jobs::text LIKE %s", f"%{SECRET}%") == 0
    assert count(db, "replace(replace(replace(jobs::text, args->'$encrypted'->>'ct', ''),"
                     " args->'$encrypted'->>'nonce', ''), args->'$encrypted'->>'kid', '')"
                     " LIKE %s", "%card%") == 0
    assert count(db, "args ? '$encrypted'") == 2502
    shown = run_pgbaton("show", str(one), "--schema", schema, "--json", dsn=dsn)
    assert shown.returncode == 0, shown.stderr
    assert SECRET not in shown.stdout and "$encrypted" in shown.stdout
    listed = run_pgbaton("jobs", "--text", SECRET, "--schema", schema, dsn=dsn)
    assert SECRET not in listed.stdout.replace(f"--text {SECRET}", "")
    assert count(db, "args::text LIKE %s", f"%{SECRET}%") == 0


def test_without_usable_keys_an_encrypted_enqueue_writes_nothing(app, db, monkeypatch):
    charge = app.tasks["charge"]
    monkeypatch.delenv(encryption.KEYS_VARIABLE)
    with pytest.raises(pgbaton.ConfigurationError, match="PGBATON_ENCRYPTION_KEYS is not set"):
        charge.enqueue({"card": SECRET, "cents": 1})
    monkeypatch.setenv(encryption.KEYS_VARIABLE, f"{NEW},short")
    with pytest.raises(pgbaton.ConfigurationError, match=r"entry 2 of 2 is not URL-safe|"
                       r"entry 2 of 2 decodes to"):
        app.enqueue_many([{"task": "ship", "args": {"order": {"id": 1, "lines": []}}},
                          {"task": "charge", "args": {"card": SECRET, "cents": 1}}])
    assert count(db) == 0


def test_args_that_are_not_an_object_are_refused(app, db):
    for bad in ([SECRET], SECRET, 5):
        with pytest.raises(pgbaton.InvalidArgument, match="must be a mapping"):
            app.tasks["charge"].enqueue(bad)
    assert count(db) == 0


def test_rotate_keys_reseals_the_jobs_still_to_run(app, db, dsn, schema, queue):
    """Jobs sealed with the old key: those pending, scheduled and waiting are sealed
    again with the first key, page by page; finished ones are left; one sealed with a
    key not in the list is named and the command exits 1."""
    charge = app.tasks["charge"]
    pending = [charge.enqueue({"card": SECRET, "cents": n}) for n in range(7)]
    later = charge.enqueue({"card": SECRET, "cents": 99}, delay=3600)
    finished = charge.enqueue({"card": SECRET, "cents": 100})
    db.execute("UPDATE jobs SET status = 'done', finished_at = now() WHERE id = %s",
               (finished,))
    stranger = queue.enqueue("charge", encryption.seal(
        "charge", '{"card": "x", "cents": 1}', encryption.parse_keys(ELSEWHERE)))
    old_id, new_id = (encryption.parse_keys(k).current for k in (OLD, NEW))
    env = clean_env(dsn, PGBATON_ENCRYPTION_KEYS=f"{NEW},{OLD}")
    ran = run_pgbaton("rotate-keys", "--schema", schema, "--batch-size", "3", "--json",
                      env=env)
    assert ran.returncode == 1, ran.stderr
    assert json.loads(ran.stdout) == {"key_id": new_id, "resealed": 8,
                                      "changed_meanwhile": 0, "unopenable": [stranger]}
    assert f"ids {stranger})" in ran.stderr
    kids = {row["id"]: row["kid"] for row in db.execute(
        "SELECT id, args -> '$encrypted' ->> 'kid' AS kid FROM jobs")}
    assert {kids[i] for i in [*pending, later]} == {new_id}
    assert kids[finished] == old_id
    assert count(db, "args::text LIKE %s", f"%{SECRET}%") == 0
    new_only = encryption.parse_keys(NEW)
    for job in queue.jobs(limit=100):
        if job.id in pending:
            assert encryption.open_sealed("charge", job.args, new_only)["card"] == SECRET
    again = run_pgbaton("rotate-keys", "--schema", schema, env=env)
    assert "resealed 0 jobs" in again.stdout


def test_rotate_keys_names_a_malformed_list(dsn, schema):
    env = clean_env(dsn, PGBATON_ENCRYPTION_KEYS=f"{NEW},,{OLD}")
    ran = run_pgbaton("rotate-keys", "--schema", schema, env=env)
    assert ran.returncode == 1 and "entry 2 of 3 is empty" in ran.stderr
    assert NEW not in ran.stderr
    ran = run_pgbaton("rotate-keys", "--schema", schema, env=clean_env(dsn))
    assert ran.returncode == 1 and "PGBATON_ENCRYPTION_KEYS is not set" in ran.stderr


def test_pgbaton_tasks_prints_each_tasks_args_as_json_schema(tmp_path):
    (tmp_path / "typed_tasks_app.py").write_text(textwrap.dedent('''
        import pydantic
        import pgbaton
        app = pgbaton.App()
        class Order(pydantic.BaseModel):
            id: int
        @app.task(encrypt=True)
        def charge(card: str, order: Order, note=None): ...
        @app.task
        def plain(a, b=1): ...
    '''))
    ran = run_pgbaton("tasks", "--app", "typed_tasks_app:app", "--json", cwd=tmp_path,
                      env=clean_env())
    assert ran.returncode == 0, ran.stderr
    rows = {row["name"]: row for row in json.loads(ran.stdout)}
    charge = rows["charge"]
    assert charge["encrypt"] is True and charge["typed"] is True
    assert charge["args_schema"]["properties"]["card"] == {"type": "string"}
    assert charge["args_schema"]["properties"]["order"]["properties"]["id"]["type"] == "integer"
    assert charge["args_schema"]["required"] == ["card", "order"]
    assert rows["plain"]["typed"] is False
    table = run_pgbaton("tasks", "--app", "typed_tasks_app:app", cwd=tmp_path,
                        env=clean_env())
    assert "typed, encrypted" in table.stdout and '"card":{"type":"string"}' in table.stdout
    missing = run_pgbaton("tasks", "--app", "nowhere:app", cwd=tmp_path, env=clean_env())
    assert missing.returncode == 2 and "cannot import 'nowhere'" in missing.stderr


def test_an_encrypting_task_is_scheduled_without_args_and_its_run_now_is_sealed(app, db):
    """A schedule's args are kept in the clear (the schedules table, its list, its log
    lines): an encrypting task's schedule with args is refused, in code and at run time,
    and a run now of one without args is sealed as the task's jobs are."""
    charge = app.tasks["charge"]
    with pytest.raises(pgbaton.InvalidArgument, match="schedule it without args"):
        app.periodic("0 3 * * *", args={"card": SECRET, "cents": 1})(charge)
    with pytest.raises(pgbaton.InvalidArgument, match="schedule it without args"):
        app.schedules.add("nightly", "0 3 * * *", "charge", {"card": SECRET, "cents": 1})
    assert db.execute("SELECT count(*) AS n FROM schedules").fetchone()["n"] == 0

    @app.task(encrypt=True)
    def sweep() -> None:
        pass

    app.schedules.add("sweep", "0 3 * * *", "sweep")
    job_id = app.schedules.run_now("sweep")
    row = db.execute("SELECT args FROM jobs WHERE id = %s", (job_id,)).fetchone()
    assert list(row["args"]) == [encryption.ENVELOPE]
