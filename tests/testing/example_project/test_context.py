"""job_context(): call a handler that takes a JobContext directly."""

from pgbaton.testing import job_context
from shop_jobs import send_receipt


def test_the_handler_passes_on_the_jobs_idempotency_key() -> None:
    ctx = job_context(send_receipt, job_id=7, attempt=2)
    assert send_receipt(ctx, order_id=1) == "receipt 1 sent with key pgbaton-job-7"


def test_the_handler_stops_when_its_claim_is_lost() -> None:
    ctx = job_context(send_receipt)
    ctx.stop("lost")
    assert send_receipt(ctx, order_id=1) == "stopped"
    assert ctx.heartbeat_sync() is False
