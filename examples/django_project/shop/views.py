"""The order view: the order and its receipt job commit together, or neither does."""

import json

from django.db import transaction
from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST
from pgbaton.contrib.django import deferral

from shop.jobs import send_receipt
from shop.models import Order


@csrf_exempt
@require_POST
def create_order(request: HttpRequest) -> JsonResponse:
    item = json.loads(request.body)["item"]
    with transaction.atomic():
        order = Order.objects.create(item=item)
        job_id = deferral(send_receipt).defer(order_id=order.id)
        if item == "refused":
            # Anything that fails after the enqueue takes the order and the job back.
            transaction.set_rollback(True)
            return JsonResponse({"error": "refused"}, status=422)
    return JsonResponse({"order": order.id, "job": job_id}, status=201)
