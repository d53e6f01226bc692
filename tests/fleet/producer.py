"""A producer process for the failover tests: enqueues jobs through the multi-host DSN and
writes each id the server acknowledged to a file, so the test can later look for every one.

    python -m tests.fleet.producer DSN SCHEMA COUNT ACK_FILE PAUSE_SECONDS

An enqueue that raised has no known outcome: it is retried with the same idempotency key
until it is acknowledged, so the intended job exists once whichever attempt committed.
"""

from __future__ import annotations

import sys
import time

import psycopg

import pgbaton

TASK = "work"
RETRY_SECONDS = 0.2


def idempotency_key(number: int) -> str:
    """The key of the producer's `number`th job: what the failover run looks for."""
    return f"failover-{number}"


def produce(dsn: str, schema: str, count: int, ack_path: str, pause: float) -> int:
    failed_calls = 0
    with open(ack_path, "a", buffering=1) as acks:
        queue: pgbaton.Queue | None = None
        number = 0
        while number < count:
            try:
                if queue is None:
                    queue = pgbaton.Queue(dsn, schema=schema)
                job_id = queue.enqueue(
                    TASK, {"seconds": 0.01}, idempotency_key=idempotency_key(number),
                    max_attempts=25)
            except (psycopg.Error, pgbaton.PgbatonError) as error:
                failed_calls += 1
                print(f"producer: enqueue {number} failed, retrying: {error}", flush=True)
                if queue is not None:
                    queue.close()
                    queue = None
                time.sleep(RETRY_SECONDS)
                continue
            acks.write(f"{number} {job_id}\n")
            number += 1
            time.sleep(pause)
        if queue is not None:
            queue.close()
    print(f"producer: {count} enqueues acknowledged, {failed_calls} calls failed", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(produce(sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4],
                     float(sys.argv[5])))
