"""The shop's tasks. settings.PGBATON["APP"] names this App, so pgbaton's Django app
points it at Django's database and `manage.py pgbaton worker` runs it."""

import pgbaton
from django.db import close_old_connections

from shop.models import Order

app = pgbaton.App()


@app.task(max_attempts=3)
def send_receipt(order_id: int) -> None:
    try:
        Order.objects.filter(id=order_id).update(receipt_sent=True)
    finally:
        # Handlers run in the worker's threads, outside any request: hand back the
        # thread's connection as a request's end would.
        close_old_connections()
