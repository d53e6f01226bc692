"""The crash-and-stall timeline (two workers, one stalls past its lease, a third reclaims its
job), replayed on a real PostgreSQL with sub-second leases."""

from __future__ import annotations

import pgbaton
from tests.helpers import job_rows, wait_for_lease_to_pass


def test_stalled_worker_is_fenced_out_and_the_table_ends_as_expected(queue: pgbaton.Queue, db):
    """A claims job 1, B job 2, A stalls past its lease, C reclaims job 1 (attempts 2);
    A's late completion changes nothing, C's is accepted, and the table ends with job 1
    done on attempt 2, job 2 running for B and job 3 pending."""
    ids = [queue.enqueue("send_email", {"to": f"user{n}"}) for n in (1, 2, 3)]
    assert ids == [1, 2, 3]

    [a] = queue.claim("A", lease=0.3)
    assert (a.id, a.attempts) == (1, 1)
    [b] = queue.claim("B", lease=30)
    assert (b.id, b.attempts) == (2, 1)

    wait_for_lease_to_pass(db, a.id)  # A stalls
    assert queue.reap() == 1
    [c] = queue.claim("C", lease=30)
    assert (c.id, c.attempts) == (1, 2)

    assert queue.complete(a) is False  # rows updated: 0
    assert job_rows(db, "id", "status", "attempts", "worker_id")[0] == (1, "running", 2, "C")
    assert queue.complete(c) is True  # rows updated: 1

    assert job_rows(db, "id", "status", "attempts", "claim_token") == [
        (1, "done", 2, None),
        (2, "running", 1, b.token),
        (3, "pending", 0, None),
    ]
