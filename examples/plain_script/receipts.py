"""pgbaton without a framework: enqueue in your own psycopg transaction, then claim,
work and complete the jobs with the data plane, in one plain script.

    PGBATON_DSN=postgresql://localhost/shop python examples/plain_script/receipts.py

The schema is PGBATON_SCHEMA (else `pgbaton`); the script migrates it and creates its
own `orders` table there. Real deployments run `pgbaton worker` instead of the loop.
"""

from __future__ import annotations

import os

import pgbaton
import psycopg

SCHEMA = os.environ.get("PGBATON_SCHEMA", "pgbaton")


def create_order(queue: pgbaton.Queue, item: str, *, commit: bool) -> int | None:
    """The order and its receipt job in one transaction: both stay, or neither does."""
    with psycopg.connect(queue.dsn) as conn:
        order_id = conn.execute(
            f'INSERT INTO "{SCHEMA}".orders (item) VALUES (%s) RETURNING id', (item,)
        ).fetchone()[0]
        queue.enqueue("send_receipt", {"order_id": order_id}, conn=conn)
        if not commit:
            conn.rollback()
            return None
    return order_id


def main() -> None:
    queue = pgbaton.Queue(schema=SCHEMA)
    queue.migrate()
    with psycopg.connect(queue.dsn, autocommit=True) as conn:
        conn.execute(
            f'CREATE TABLE IF NOT EXISTS "{SCHEMA}".orders '
            "(id bigserial PRIMARY KEY, item text NOT NULL)"
        )
    create_order(queue, "refused", commit=False)
    order_id = create_order(queue, "book", commit=True)
    print(f"order {order_id} created with its receipt job")

    # Claim, commit, then work: no transaction is open while a job runs.
    while claims := queue.claim("receipts-script", limit=10, lease=30):
        for claim in claims:
            receipt = f"receipt for order {claim.args['order_id']}"
            if queue.complete(claim, result={"receipt": receipt}):
                print(f"job {claim.id} done: {receipt}")
    queue.close()


if __name__ == "__main__":
    main()
