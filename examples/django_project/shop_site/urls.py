"""POST /orders creates an order and enqueues its receipt, in one transaction."""

from django.urls import path

from shop import views

urlpatterns = [path("orders", views.create_order)]
