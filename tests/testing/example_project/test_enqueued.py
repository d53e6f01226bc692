"""assert_enqueued and refute_enqueued: what the code under test left in the queue."""

import pgbaton
from pgbaton.testing import assert_enqueued, refute_enqueued
from shop_jobs import charge, place_order, send_receipt


def test_an_order_enqueues_its_charge_and_receipt(pgbaton_app: pgbaton.App) -> None:
    place_order(customer_id=3, amount=100)
    assert_enqueued(charge, args={"customer_id": 3, "amount": 100}, count=1)
    assert_enqueued(send_receipt, args={"order_id": 1003}, queue="default")
    refute_enqueued(charge, args={"customer_id": 4})


def test_every_test_starts_with_an_empty_queue(pgbaton_app: pgbaton.App) -> None:
    refute_enqueued(charge)
    refute_enqueued("send_receipt", app=pgbaton_app)  # a task by name needs its App
