"""A job's args are checked (a JSON object) when the job is written, not at every new
version of its row: a claim, a heartbeat, a completion do not read them back (migration
26). A table CHECK on args ran at every update and read the whole value from its TOAST
table: some 85 µs a row version for 96 kB of args. The insert trigger checks the
statement's new jobs instead, with the CHECK's error; the writers that change args
afterwards (a unique job's replacement, sealing) write args pgbaton checked itself."""

from __future__ import annotations

import json
import os
from typing import Any

import psycopg
import pytest

# Random hex does not compress: stored out of line, in some 40 TOAST pages.
BLOB = os.urandom(100_000).hex()
# What a row's new version may touch: the heap page, the indexes' pages, no TOAST.
MOST_BUFFERS = 30


def _buffers_of(db: psycopg.Connection[Any], statement: str, params: dict[str, Any]) -> int:
    """The buffers one statement touched (EXPLAIN ANALYZE, rolled back)."""
    with db.transaction(force_rollback=True):
        row = db.execute(
            f"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {statement}", params).fetchone()
    plan = row["QUERY PLAN"][0]["Plan"]
    return int(plan["Shared Hit Blocks"] + plan["Shared Read Blocks"])


def test_a_write_that_leaves_args_alone_does_not_read_them(queue, db):
    queue.enqueue("t", {"blob": BLOB})
    [claim] = queue.engine.claim_batch("w", limit=1).claims
    assert claim.args == {"blob": BLOB}  # the claim reads them, once, as it must
    touched = {
        "a lease extended": _buffers_of(
            db, "UPDATE jobs SET lease_until = lease_until + interval '1 s'"
                " WHERE id = %(id)s", {"id": claim.id}),
        "the job done": _buffers_of(
            db, "UPDATE jobs SET status = 'done', finished_at = now(), claim_token = NULL,"
                " lease_until = NULL, result = '1' WHERE id = %(id)s", {"id": claim.id}),
    }
    assert all(n <= MOST_BUFFERS for n in touched.values()), touched


@pytest.mark.parametrize("args", ["[1]", '"text"', "null", "3"])
def test_args_that_are_not_an_object_are_refused_at_the_insert(queue, db, args):
    """The same error as the table's CHECK gave, by name, and nothing written."""
    with pytest.raises(psycopg.errors.CheckViolation, match="jobs_args_is_object") as caught:
        db.execute("INSERT INTO jobs (task, args) VALUES ('t', '{}'), ('t', %s::jsonb)",
                   (args,))
    assert caught.value.diag.constraint_name == "jobs_args_is_object"
    assert caught.value.diag.table_name == "jobs"
    assert db.execute("SELECT count(*) AS n FROM jobs").fetchone() == {"n": 0}


def _copy(db: psycopg.Connection[Any], rows: list[tuple[str, str]]) -> None:
    with db.cursor().copy("COPY jobs (task, args) FROM STDIN") as copy:
        for row in rows:
            copy.write_row(row)


def test_copy_refuses_args_that_are_not_an_object(queue, db):
    rows = [("t", json.dumps({"ok": 1})), ("t", json.dumps([1]))]
    with pytest.raises(psycopg.errors.CheckViolation, match="jobs_args_is_object"):
        _copy(db, rows)
    assert db.execute("SELECT count(*) AS n FROM jobs").fetchone() == {"n": 0}
