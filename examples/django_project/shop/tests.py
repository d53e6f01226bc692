"""The shop under Django's own test runner (`python manage.py test shop`), against the
real database: jobs follow Django's transactions, and a real worker runs them."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psycopg
from django.db import connection, transaction
from django.test import TestCase, TransactionTestCase
from pgbaton.contrib.django import deferral, enqueue, pgbaton_settings
from pgbaton.contrib.django.settings import database_dsn
from pgbaton.testing import assert_enqueued, refute_enqueued

from shop.jobs import send_receipt
from shop.models import Order

PROJECT = Path(__file__).resolve().parent.parent


def job_count() -> int:
    with connection.cursor() as cursor:
        cursor.execute(f'SELECT count(*) FROM "{pgbaton_settings().schema}".jobs')
        return int(cursor.fetchone()[0])


def job_status(job_id: int) -> str:
    with connection.cursor() as cursor:
        cursor.execute(
            f'SELECT status FROM "{pgbaton_settings().schema}".jobs WHERE id = %s', [job_id]
        )
        return str(cursor.fetchone()[0])


def jobs_seen_elsewhere(dsn: str) -> int:
    """The jobs another connection sees: only committed ones."""
    with psycopg.connect(dsn, autocommit=True) as other:
        return other.execute(
            f'SELECT count(*) FROM "{pgbaton_settings().schema}".jobs'
        ).fetchone()[0]


def pgbaton_pool_connections(dsn: str) -> int:
    """Connections of the App's own pool (named `pgbaton`) on the test database."""
    with psycopg.connect(dsn, autocommit=True) as other:
        return other.execute(
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE application_name = 'pgbaton' AND datname = current_database()"
        ).fetchone()[0]


def wait_until(condition, what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.05)


class JobsFollowDjangoTransactions(TransactionTestCase):
    """Real commits and rollbacks, seen from outside, and a real `manage.py pgbaton worker`."""

    def setUp(self) -> None:
        dsn = database_dsn("default")  # the test database
        self.wakeups = psycopg.connect(dsn, autocommit=True)
        self.addCleanup(self.wakeups.close)
        # TransactionTestCase empties Django's tables between tests, not pgbaton's.
        self.wakeups.execute(f'TRUNCATE "{pgbaton_settings().schema}".jobs')
        self.wakeups.execute(f'LISTEN "{pgbaton_settings().schema}_jobs"')
        self.worker = subprocess.Popen(
            [sys.executable, "manage.py", "pgbaton", "worker", "--shutdown-grace", "5"],
            cwd=PROJECT, env={**os.environ, "SHOP_DATABASE_URL": dsn},
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        self.addCleanup(self.stop_worker)

    def stop_worker(self) -> None:
        self.worker.send_signal(signal.SIGTERM)
        self.worker.wait(30)

    def test_a_rolled_back_atomic_block_leaves_no_job_and_no_wakeup(self) -> None:
        class Refused(Exception):
            pass

        with self.assertRaises(Refused), transaction.atomic():
            Order.objects.create(item="lost")
            enqueue(send_receipt, {"order_id": 0}, queue="rolled_back")
            raise Refused
        self.assertEqual(job_count(), 0)
        with transaction.atomic():
            order = Order.objects.create(item="kept")
            deferral(send_receipt).defer(order_id=order.id)
        self.assertEqual(job_count(), 1)
        # Wake-ups arrive in commit order: a rolled-back one would come first.
        payloads = [note.payload for note in self.wakeups.notifies(timeout=60, stop_after=1)]
        self.assertEqual(payloads, ["default"])
        wait_until(
            lambda: Order.objects.get(id=order.id).receipt_sent, "the worker to send the receipt"
        )
        self.assertEqual(list(Order.objects.values_list("item", flat=True)), ["kept"])

    def test_enqueue_without_conn_joins_the_atomic_block(self) -> None:
        """Inside transaction.atomic(), defer(), enqueue() and the App's Queue.enqueue
        with no conn= write on Django's connection: rolled back or committed with the
        order, with no transaction.on_commit and without opening pgbaton's own pool."""
        dsn = database_dsn("default")
        queue = send_receipt.app.queue
        queue.close()  # no pool left open by an earlier test
        self.addCleanup(queue.close)

        class Refused(Exception):
            pass

        with self.assertRaises(Refused), transaction.atomic():
            Order.objects.create(item="lost")
            send_receipt.using(queue="rolled_back").defer(order_id=0)
            send_receipt.enqueue({"order_id": 0}, queue="rolled_back")
            queue.enqueue("send_receipt", {"order_id": 0}, queue="rolled_back")
            self.assertEqual(job_count(), 3)  # Django's connection sees its own jobs
            raise Refused
        self.assertEqual(job_count(), 0)
        with transaction.atomic():
            order = Order.objects.create(item="kept")
            job_id = send_receipt.defer(order_id=order.id)
            with transaction.atomic():  # a savepoint joins the same way
                send_receipt.defer(order_id=order.id)
                transaction.set_rollback(True)
            self.assertEqual(jobs_seen_elsewhere(dsn), 0)
        self.assertEqual(jobs_seen_elsewhere(dsn), 1)
        self.assertEqual(pgbaton_pool_connections(dsn), 0)
        payloads = [note.payload for note in self.wakeups.notifies(timeout=60, stop_after=1)]
        self.assertEqual(payloads, ["default"])
        wait_until(lambda: job_status(job_id) == "done", f"job {job_id} to be done")
        self.assertTrue(Order.objects.get(id=order.id).receipt_sent)
        # Outside any atomic block: pgbaton's own pool, committed at once.
        send_receipt.defer(order_id=order.id)
        self.assertEqual(jobs_seen_elsewhere(dsn), 2)
        self.assertGreaterEqual(pgbaton_pool_connections(dsn), 1)

    def test_a_job_enqueued_on_pgbatons_own_connection_goes_to_the_test_database(self) -> None:
        order = Order.objects.create(item="book")
        send_receipt.defer(order_id=order.id)  # no conn=: committed at once, on its own
        # The App's pool holds connections to the test database, which Django drops last.
        self.addCleanup(send_receipt.app.queue.close)
        self.assertEqual(job_count(), 1)
        wait_until(
            lambda: Order.objects.get(id=order.id).receipt_sent, "the worker to send the receipt"
        )

    def test_the_order_view_commits_the_order_and_its_job_together(self) -> None:
        refused = self.client.post("/orders", json.dumps({"item": "refused"}),
                                   content_type="application/json")
        self.assertEqual(refused.status_code, 422)
        self.assertEqual((Order.objects.count(), job_count()), (0, 0))
        created = self.client.post("/orders", json.dumps({"item": "book"}),
                                   content_type="application/json")
        self.assertEqual(created.status_code, 201)
        order_id = created.json()["order"]
        wait_until(
            lambda: Order.objects.get(id=order_id).receipt_sent, "the worker to send the receipt"
        )


class JobsInsideATestCase(TestCase):
    """A TestCase's transaction holds the job: visible inside, gone after the test."""

    def test_enqueue_without_conn_joins_the_tests_transaction(self) -> None:
        order = Order.objects.create(item="book")
        send_receipt.defer(order_id=order.id)  # no conn=: the TestCase's atomic block
        self.assertEqual(job_count(), 1)
        self.assertEqual(jobs_seen_elsewhere(database_dsn("default")), 0)

    def test_pgbaton_testing_sees_the_tests_transaction(self) -> None:
        """assert_enqueued reads through the App's connection provider: Django's
        connection here, so it sees what the test's transaction holds."""
        order = Order.objects.create(item="book")
        send_receipt.defer(order_id=order.id)
        assert_enqueued(send_receipt, args={"order_id": order.id}, count=1)
        refute_enqueued(send_receipt, args={"order_id": order.id + 1})

    def test_the_job_is_seen_in_the_tests_transaction(self) -> None:
        order = Order.objects.create(item="book")
        job_id = deferral(send_receipt).defer(order_id=order.id)
        self.assertEqual(job_count(), 1)
        with connection.cursor() as cursor:
            cursor.execute(
                f'SELECT task, args FROM "{pgbaton_settings().schema}".jobs WHERE id = %s',
                [job_id],
            )
            task, args = cursor.fetchone()
        self.assertEqual(task, "send_receipt")
        self.assertEqual(json.loads(args) if isinstance(args, str) else args,
                         {"order_id": order.id})
