"""An order, and whether the worker has sent its receipt."""

from django.db import models


class Order(models.Model):
    item = models.TextField()
    receipt_sent = models.BooleanField(default=False)
